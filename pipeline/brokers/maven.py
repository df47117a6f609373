"""Jars from Maven Central, fetched or built with Maven once per machine into
Floodgate's cache directory (:func:`pipeline.brokers.apache_kafka.artifacts.cache_dir`,
never a checkout), with one Maven repository beside them (``<cache>/m2``).

What uses it: Apache Kafka's broker (:func:`~pipeline.brokers.apache_kafka.kafka_libs`),
Spark's own Kafka connector for the benchmark's peer and the connector-compare test
(:mod:`pipeline.brokers.spark_connector`), and the tests' Schema Registry
(``tests/integration/registry``).

Each artefact has a directory of its own in the cache. :func:`once` makes it at most
once: a second process asking for it waits on a file lock while the first one works
(as Maven's own local repository does not), and a ``.complete`` marker written last
tells a finished directory from one a killed run left behind. :func:`run_maven` runs
Maven in batch mode and turns its failures into a :class:`~pipeline.errors.BrokerError`
with the end of its output.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from importlib.resources import as_file, files
from pathlib import Path

from pipeline.errors import BrokerError
from pipeline.state.files import private_file, write_private_text

log = logging.getLogger(__name__)

#: The command that installs Maven where it is missing (Debian, as ``scripts/system-deps``).
INSTALL_MAVEN = "apt-get install -y maven"

#: Lines of Maven's output a failure reports.
TAIL_LINES = 25


def once(root: Path, make: Callable[[], None], *, version: str) -> None:
    """Run ``make()`` to fill ``root``, unless a run has finished it already.

    Args:
        root: the artefact's directory in the cache (created if missing).
        make: fills ``root``; raises on failure (``root`` stays unfinished, and the
            next call runs it again).
        version: written to ``root/.complete`` once ``make`` has returned.
    """
    done = root / ".complete"
    if done.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    with os.fdopen(private_file(root / ".lock", os.O_WRONLY), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making the same one
        if done.exists():
            return
        make()
        write_private_text(done, version + "\n")


def copy_dependencies(
    target: Path,
    *,
    package: str,
    properties: Mapping[str, str],
    expect: str,
    what: str,
    version: str,
    timeout_s: float,
) -> Path:
    """The jars of the dependencies of the ``pom.xml`` shipped in ``package``, copied by
    Maven's ``dependency:copy-dependencies`` goal into ``target`` once per machine.

    Args:
        target: the directory of the jars; its parent is the artefact's directory in
            the cache (:func:`once`), whose parent holds Maven's repository ``m2``.
        package: the Python package holding the ``pom.xml``.
        properties: ``-D`` properties of the run (the versions the pom takes).
        expect: a glob of a jar the run must have copied (the artefact itself).
        what: what is fetched, for messages ("Apache Kafka 4.4.0's jars").
        version: written to the ``.complete`` marker.
        timeout_s: how long the Maven run may take, seconds.

    Returns:
        ``target``.

    Raises:
        BrokerError: as :func:`run_maven`, or Maven copied no jar matching ``expect``.
    """
    root = target.parent

    def fetch() -> None:
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=root))
        try:
            with as_file(files(package).joinpath("pom.xml")) as pom:
                run_maven(
                    [
                        "-f",
                        str(pom),
                        *(f"-D{key}={value}" for key, value in properties.items()),
                        f"-DoutputDirectory={staging}",
                        "dependency:copy-dependencies",
                    ],
                    what=what,
                    repository=root.parent / "m2",
                    timeout_s=timeout_s,
                )
            if not any(staging.glob(expect)):
                raise BrokerError(f"Maven copied no {expect} for {what}: is it on Maven Central?")
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)

    once(root, fetch, version=version)
    return target


def run_maven(
    arguments: Sequence[str],
    *,
    what: str,
    repository: Path,
    timeout_s: float,
    cwd: Path | None = None,
) -> None:
    """``mvn --batch-mode --no-transfer-progress -Dmaven.repo.local=<repository>
    <arguments>``.

    Args:
        arguments: Maven's goals, ``-f`` and ``-D`` options.
        what: what the run fetches or builds, for messages ("Apache Kafka 4.1.0's jars").
        repository: Maven's local repository (``<cache>/m2``).
        timeout_s: how long the run may take, seconds.
        cwd: the directory Maven runs in (a project without ``-f``).

    Raises:
        BrokerError: no ``mvn`` on PATH (naming the command that installs it), or Maven
            failed or timed out (with the end of its output and the command).
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            f"{what} come from Maven Central through Maven, and no `mvn` is on PATH; "
            f"install it with: {INSTALL_MAVEN}"
        )
    command = [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        f"-Dmaven.repo.local={repository}",
        *arguments,
    ]
    log.info("Maven: %s", what)
    try:
        ran = subprocess.run(
            command,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(
            f"Maven did not finish {what} within {timeout_s:.0f} s",
            command=command,
            output=tail(exc.stdout),
        ) from exc
    if ran.returncode != 0:
        raise BrokerError(
            f"Maven could not make {what} (exit status {ran.returncode}); "
            "is Maven Central reachable?",
            command=command,
            output=tail(ran.stdout + ran.stderr),
        )


def tail(text: str | bytes | None, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a process's output."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-lines:])
