"""Apache Kafka's broker jars, fetched from Maven Central with Maven on first use.

The jars of ``org.apache.kafka:kafka_2.13`` (the broker, the KRaft controller and
``StorageTool``) and a Log4j 2 binding are copied by Maven's
``dependency:copy-dependencies`` goal, run on the ``pom.xml`` shipped beside this
module, into ``<cache>/apache-kafka-<version>/libs``; Maven's own repository for that
run is ``<cache>/m2``. The cache is ``$FLOODGATE_CACHE_DIR``, else
``$XDG_CACHE_HOME/floodgate``, else ``~/.cache/floodgate``: outside any checkout, so
nothing of it is ever committed, and shared by every checkout and virtualenv of the
same user. A second process asking for the same version waits on a file lock while
the first one fetches. Nothing is downloaded from anywhere but the Maven repository
Maven is configured for; Docker is never used.

Only the ``apache-kafka`` engine needs Maven; the default embedded engine
(``noida-db``) needs Python and Java alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pipeline.brokers.maven import copy_dependencies
from pipeline.errors import BrokerError

#: The Apache Kafka release the engine runs: the newest 4.x that Maven Central served
#: here whole (kafka_2.13 and its dependencies) on 2026-11-23.
APACHE_KAFKA_VERSION = "4.4.0"

#: Environment variable naming Floodgate's cache directory (jars, Maven repository).
CACHE_DIR_ENV = "FLOODGATE_CACHE_DIR"

#: How long one Maven fetch may take before it is called failed, seconds. A cold
#: fetch here takes 40-90 s (about 100 MiB with Maven's own plugins).
FETCH_TIMEOUT_S = 900.0

#: The oldest Java the broker runs on (Apache Kafka 4.0 dropped Java 11 for brokers).
MIN_JAVA_MAJOR = 17

_INSTALL_JAVA = "apt-get install -y openjdk-17-jre-headless"


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Floodgate's cache directory (see the module docstring for the order)."""
    env = os.environ if env is None else env
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "floodgate"


def java_command() -> list[str]:
    """The ``java`` launcher to start the broker with (``$JAVA_HOME/bin/java`` first).

    Raises:
        BrokerError: no Java, or one older than Java 17; names the command that
            installs one.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError(
            "the apache-kafka engine needs Java 17 or newer, and no `java` was found "
            f"(JAVA_HOME or PATH); install one with: {_INSTALL_JAVA}"
        )
    done = subprocess.run(
        [java, "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match:
        major = int(match.group(1))
        if major == 1 and match.group(2):  # "1.8.0_..." is Java 8
            major = int(match.group(2))
        if major < MIN_JAVA_MAJOR:
            raise BrokerError(
                f"Apache Kafka {APACHE_KAFKA_VERSION} needs Java {MIN_JAVA_MAJOR} or newer; "
                f"{java} is Java {major}. Install one with: {_INSTALL_JAVA}"
            )
    return [java]


def kafka_libs(
    version: str = APACHE_KAFKA_VERSION,
    *,
    cache: Path | None = None,
    timeout_s: float = FETCH_TIMEOUT_S,
) -> Path:
    """The directory of Apache Kafka's jars, fetched with Maven if not cached yet.

    Args:
        version: the ``org.apache.kafka:kafka_2.13`` version.
        cache: the cache directory; default :func:`cache_dir`.
        timeout_s: how long the Maven run may take, seconds.

    Returns:
        ``<cache>/apache-kafka-<version>/libs``, holding every jar the broker needs
        (its classpath is ``libs/*``).

    Raises:
        BrokerError: Maven is missing (names the command that installs it), or the
            fetch failed or timed out (with the tail of Maven's output).
    """
    return copy_dependencies(
        (cache or cache_dir()) / f"apache-kafka-{version}" / "libs",
        package="pipeline.brokers.apache_kafka",
        properties={"kafka.version": version},
        expect=f"kafka_2.13-{version}.jar",
        what=f"Apache Kafka {version}'s jars",
        version=version,
        timeout_s=timeout_s,
    )
