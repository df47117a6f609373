"""A real Schema Registry for the tests of ``encoding = "confluent"``: Apicurio Registry
with in-memory storage, spoken to through its Confluent-compatible API.

``FLOODGATE_TEST_SCHEMA_REGISTRY_URL`` names an existing registry (a Confluent-API base
URL, e.g. ``http://localhost:8081``). Otherwise Apicurio Registry is built from Maven
Central with Maven (``pom.xml`` beside this module: quarkus-maven-plugin packages the
``io.apicurio:apicurio-registry-app`` jar as a runnable application) into Floodgate's
cache directory (:func:`pipeline.brokers.apache_kafka.artifacts.cache_dir`, never the
checkout), once per version, and started with ``java -jar`` on a free loopback port;
stopped by its PID after. Its Confluent-compatible API is ``/apis/ccompat/v7``; its
storage is an in-memory H2 database, so every start is empty.

Why not Karapace (the Python registry): it is not on PyPI. Why not Confluent's own:
its jars are not on Maven Central.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.brokers.apache_kafka.artifacts import cache_dir, java_command
from pipeline.brokers.engines import free_port
from pipeline.brokers.maven import once, run_maven
from pipeline.errors import BrokerError
from tests.integration.java_service import running_service

ENV_URL = "FLOODGATE_TEST_SCHEMA_REGISTRY_URL"

#: The Apicurio Registry release built (``pom.xml`` says why this one).
APICURIO_VERSION = "2.4.2.Final"

#: The Confluent-compatible API under the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"

#: How long one Maven build may take, seconds (a cold one fetches ~250 MiB: 2-4 min here).
BUILD_TIMEOUT_S = 900.0

#: How long the registry may take to answer after its start, seconds (~5 s here).
START_TIMEOUT_S = 120.0


def registry_jar(*, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
    """The runnable registry jar, built with Maven when not cached yet.

    Returns:
        ``<cache>/apicurio-registry-<version>/floodgate-schema-registry-1-runner.jar``
        (its libraries in ``lib/`` beside it).

    Raises:
        BrokerError: no ``mvn`` on PATH, or the build failed (with Maven's last lines).
    """
    root = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"
    jar = root / "floodgate-schema-registry-1-runner.jar"

    def build() -> None:
        workdir = Path(tempfile.mkdtemp(prefix="build-", dir=root))
        try:
            shutil.copy(Path(__file__).with_name("pom.xml"), workdir / "pom.xml")
            run_maven(
                ["package"],
                what=f"Apicurio Registry {APICURIO_VERSION}",
                repository=cache_dir() / "m2",
                timeout_s=timeout_s,
                cwd=workdir,
            )
            target = workdir / "target"
            built = target / jar.name
            if not built.exists():
                raise BrokerError(f"Maven built no {built}")
            shutil.rmtree(root / "lib", ignore_errors=True)
            (target / "lib").rename(root / "lib")
            built.rename(jar)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    once(root, build, version=APICURIO_VERSION)
    return jar


@contextmanager
def schema_registry() -> Iterator[str]:
    """A Schema Registry for the duration; yields its Confluent-API base URL.

    Raises:
        BrokerError: the registry could not be built (:func:`registry_jar`).
        RuntimeError: it did not answer within :data:`START_TIMEOUT_S` (with the end
            of its log).
    """
    if os.environ.get(ENV_URL):
        yield os.environ[ENV_URL]
        return
    jar = registry_jar()
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="floodgate-registry-"))
    url = f"http://127.0.0.1:{port}{CCOMPAT_PATH}"
    try:
        with running_service(
            [
                *java_command(),
                "-Xmx512m",
                f"-Dquarkus.http.port={port}",
                "-Dquarkus.http.host=127.0.0.1",
                "-jar",
                str(jar),
            ],
            cwd=workdir,
            log_path=workdir / "registry.log",
            answers=lambda: _answers(url),
            what=f"Apicurio Registry at {url}",
            timeout_s=START_TIMEOUT_S,
        ):
            yield url
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
