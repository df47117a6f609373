"""``scripts/system-deps``: what pip cannot install is checked before
``make demo``, ``make test`` and ``.ci/run`` start anything, installed with apt-get
when the run can (root, or passwordless sudo), else named in one command within
seconds, never found missing by minutes of failing tests.

The script runs here with a PATH of fake tools only (``id``, ``sudo``, ``apt-get``,
``java``... as small shell scripts), so nothing is installed and the machine's own
tools do not count; ``FLOODGATE_POSTGRES_BINDIRS`` points its search for ``initdb``
into the test's directory."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "system-deps"
BASH = shutil.which("bash") or "/bin/bash"
CHMOD = shutil.which("chmod") or "/bin/chmod"
MKDIR = shutil.which("mkdir") or "/bin/mkdir"
#: What `make test` needs on PATH; the PostgreSQL binaries are found apart.
TEST_TOOLS = ("java", "javac", "promtool", "prometheus", "mvn")
#: What `make demo` needs: Spark's Java, and the JDK and Maven that build the source's jar.
JAR_TOOLS = ("java", "javac", "mvn")
#: Each package, and the fake executables its fake installation puts on PATH.
PROVIDES = {
    "openjdk-17-jdk-headless": ("java", "javac"),
    "openjdk-17-jre-headless": ("java",),
    "prometheus": ("promtool", "prometheus"),
    "maven": ("mvn",),
    "docker.io": ("dockerd", "docker"),
    "docker-compose": ("docker-compose",),
    "debootstrap": ("debootstrap",),
}


@dataclass
class Machine:
    """A directory of fake tools that is the script's whole PATH."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def pg(self) -> Path:
        return self.root / "pg"

    @property
    def log(self) -> Path:
        """What the fake apt-get and sudo were asked, one call a line."""
        return self.root / "calls.log"

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def tool(self, name: str, body: str = "exit 0") -> None:
        path = self.bin / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)

    def tools(self, *names: str) -> None:
        for name in names:
            self.tool(name)

    def postgres(self) -> None:
        """PostgreSQL's server binaries where Debian puts them (initdb, as the tests find it)."""
        (self.pg / "bin").mkdir(parents=True, exist_ok=True)
        initdb = self.pg / "bin" / "initdb"
        initdb.write_text("#!/bin/sh\n")
        initdb.chmod(0o755)

    def uid(self, uid: int) -> None:
        self.tool("id", f"echo {uid}")

    def apt_get(self, *, fails: bool = False) -> None:
        """An apt-get that logs its arguments and "installs" each package's tools."""
        lines = [f'echo "apt-get $*" >> {self.log}']
        if fails:
            lines.append("exit 100")
        for package, names in PROVIDES.items():
            for name in names:
                made = self.bin / name
                lines.append(
                    f'case " $* " in *" install "*" {package} "*) '
                    f"printf '#!/bin/sh\\n' > {made}; {CHMOD} +x {made};; esac"
                )
        lines.append(
            f'case " $* " in *" install "*" postgresql "*) '
            f"{MKDIR} -p {self.pg}/bin; printf '' > {self.pg}/bin/initdb; "
            f"{CHMOD} +x {self.pg}/bin/initdb;; esac"
        )
        self.tool("apt-get", "\n".join(lines))

    def sudo(self, *, passwordless: bool) -> None:
        self.tool("sudo", f'echo "sudo $*" >> {self.log}\nexit {0 if passwordless else 1}')

    def run(self, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
        environment = {
            "PATH": str(self.bin),
            "HOME": str(self.root),
            "FLOODGATE_POSTGRES_BINDIRS": str(self.pg / "*"),
            **env,
        }
        started = time.monotonic()
        done = subprocess.run(
            [BASH, str(SCRIPT), *args],
            env=environment,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done, time.monotonic() - started


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    m = Machine(tmp_path)
    m.bin.mkdir()
    m.pg.mkdir()
    return m


def test_everything_present_exits_0_silently_and_installs_nothing(machine: Machine) -> None:
    machine.tools(*TEST_TOOLS, "mvn")
    machine.postgres()
    machine.uid(0)
    machine.apt_get()
    for targets in (["demo"], ["test"], ["test-integration"], ["test", "test-apache-kafka"]):
        done, took = machine.run(*targets)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), targets
        assert took < 5, f"{targets}: {took:.1f} s with everything present"
    assert machine.calls() == []


def test_a_missing_promtool_without_root_stops_within_seconds_naming_the_command(
    machine: Machine,
) -> None:
    # The run that once went wrong: `make test` on a machine without Debian's prometheus.
    machine.tools(*JAR_TOOLS)
    machine.postgres()
    machine.uid(1000)
    machine.apt_get()
    machine.sudo(passwordless=False)  # sudo asks for a password: no installing
    done, took = machine.run("test")
    assert done.returncode == 1
    assert took < 5
    assert "sudo apt-get install -y --no-install-recommends prometheus\n" in done.stderr
    assert "promtool" in done.stderr
    assert [c for c in machine.calls() if c.startswith("apt-get")] == []


def test_without_sudo_the_command_is_named_too(machine: Machine) -> None:
    machine.postgres()
    machine.uid(1000)
    machine.apt_get()
    done, _ = machine.run("test")
    assert done.returncode == 1
    assert (
        "    sudo apt-get install -y --no-install-recommends "
        "openjdk-17-jdk-headless prometheus maven\n" in done.stderr
    )
    assert machine.calls() == []


def test_installing_can_be_refused_and_root_is_told_the_command_without_sudo(
    machine: Machine,
) -> None:
    machine.tools(*JAR_TOOLS)
    machine.uid(0)
    machine.apt_get()
    done, _ = machine.run("test", FLOODGATE_INSTALL_SYSTEM_DEPS="0")
    assert done.returncode == 1
    assert "    apt-get install -y --no-install-recommends prometheus postgresql\n" in done.stderr
    assert "sudo" not in done.stderr
    assert "FLOODGATE_TEST_POSTGRES_URL" in done.stderr  # the other way to a server
    assert machine.calls() == []


def test_a_machine_without_apt_get_is_told_the_debian_command(machine: Machine) -> None:
    machine.tools("java", "javac")
    machine.postgres()
    machine.uid(0)
    done, _ = machine.run("test")
    assert done.returncode == 1
    assert "apt-get install -y --no-install-recommends prometheus" in done.stderr


def test_dry_run_as_root_prints_the_apt_get_lines_and_runs_none(machine: Machine) -> None:
    machine.tools(*JAR_TOOLS)
    machine.uid(0)
    machine.apt_get()
    done, _ = machine.run("--dry-run", "test")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "+ apt-get update -qq",
        "+ apt-get install -y --no-install-recommends prometheus postgresql -qq",
    ]
    assert machine.calls() == []


def test_dry_run_with_passwordless_sudo_goes_through_sudo(machine: Machine) -> None:
    machine.tools("java", "javac", "promtool", "prometheus")
    machine.postgres()
    machine.uid(1000)
    machine.apt_get()
    machine.sudo(passwordless=True)
    done, _ = machine.run("--dry-run", "test-apache-kafka")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == (
        "+ sudo -n env DEBIAN_FRONTEND=noninteractive "
        "apt-get install -y --no-install-recommends maven -qq"
    )
    assert machine.calls() == ["sudo -n true"]


def test_as_root_it_installs_what_is_missing_then_checks_again(machine: Machine) -> None:
    # What .ci/run does on a fresh machine: update, install, and every tool is there.
    machine.uid(0)
    machine.apt_get()
    done, _ = machine.run("test", "test-apache-kafka")
    assert done.returncode == 0, done.stderr
    assert machine.calls() == [
        "apt-get update -qq",
        "apt-get install -y --no-install-recommends "
        "openjdk-17-jdk-headless prometheus postgresql maven -qq",
    ]
    done, _ = machine.run("test", "test-apache-kafka")
    assert (done.returncode, done.stderr) == (0, "")
    assert len(machine.calls()) == 2  # nothing more to install


def test_a_failing_apt_get_fails_naming_the_command(machine: Machine) -> None:
    machine.tools("java", "javac")
    machine.postgres()
    machine.uid(0)
    machine.apt_get(fails=True)
    done, _ = machine.run("test")
    assert done.returncode == 1
    assert "apt-get failed" in done.stderr
    assert "apt-get install -y --no-install-recommends prometheus" in done.stderr


def test_the_jdk_and_maven_for_the_sources_jar(machine: Machine) -> None:
    # Every target that starts Spark from a checkout builds the floodgate_kafka jar
    # (make jar): Java's compiler and Maven, whatever broker or registry is named.
    machine.tools("java", "promtool", "prometheus")
    machine.postgres()
    machine.uid(1000)
    for done, _ in (
        machine.run("demo"),
        machine.run("test"),
        machine.run("test-integration"),
        machine.run("test-apache-kafka"),
        machine.run("test-soak"),
        machine.run(
            "test",
            FLOODGATE_KAFKA_ENGINE="apache-kafka",
            FLOODGATE_KAFKA_BOOTSTRAP="h:9092",
            FLOODGATE_TEST_SCHEMA_REGISTRY_URL="http://h:8081",
        ),
    ):
        assert done.returncode == 1
        assert (
            "sudo apt-get install -y --no-install-recommends openjdk-17-jdk-headless maven\n"
            in done.stderr
        )
    machine.tools("javac", "mvn")
    for target in ("demo", "test", "test-apache-kafka", "test-soak"):
        done, _ = machine.run(target)
        assert done.returncode == 0, (target, done.stderr)


def test_what_each_target_needs(machine: Machine) -> None:
    machine.uid(1000)
    assert machine.run("test-unit")[0].returncode == 0  # nothing
    demo, _ = machine.run("demo")
    assert demo.returncode == 1
    assert "install -y --no-install-recommends openjdk-17-jdk-headless maven\n" in demo.stderr
    soak, _ = machine.run("test-soak")
    assert "install -y --no-install-recommends openjdk-17-jdk-headless maven\n" in soak.stderr
    machine.tools(*TEST_TOOLS)
    # A server of one's own instead of a private cluster: no PostgreSQL binaries needed.
    done, _ = machine.run("test", FLOODGATE_TEST_POSTGRES_URL="postgresql+psycopg://h/db")
    assert done.returncode == 0, done.stderr
    done, _ = machine.run("test")
    assert "install -y --no-install-recommends postgresql\n" in done.stderr
    # Found through pg_config, as tests/integration/postgres.py finds it first.
    (machine.root / "pgconfig").mkdir()
    (machine.root / "pgconfig" / "initdb").write_text("")
    (machine.root / "pgconfig" / "initdb").chmod(0o755)
    machine.tool("pg_config", f"echo {machine.root / 'pgconfig'}")
    assert machine.run("test")[0].returncode == 0


def test_java_home_is_what_spark_starts(machine: Machine) -> None:
    machine.uid(1000)
    jdk = machine.root / "jdk"
    (jdk / "bin").mkdir(parents=True)
    machine.tools("mvn")
    (jdk / "bin" / "java").write_text("#!/bin/sh\n")
    (jdk / "bin" / "java").chmod(0o755)
    # Its compiler is the one Maven builds the jar with: JAVA_HOME's, not PATH's.
    machine.tools("javac")
    done, _ = machine.run("demo", JAVA_HOME=str(jdk))
    assert done.returncode == 1
    assert "openjdk-17-jdk-headless" in done.stderr
    (jdk / "bin" / "javac").write_text("#!/bin/sh\n")
    (jdk / "bin" / "javac").chmod(0o755)
    assert machine.run("demo", JAVA_HOME=str(jdk))[0].returncode == 0
    machine.tools("java")
    done, _ = machine.run("demo", JAVA_HOME=str(machine.root / "nowhere"))
    assert done.returncode == 1
    assert "JAVA_HOME" in done.stderr


def test_unknown_targets_and_options_are_refused(machine: Machine) -> None:
    for args in ([], ["bench"], ["--install-everything", "test"]):
        assert machine.run(*args)[0].returncode == 2, args


def _prerequisites(makefile: str, target: str) -> list[str]:
    match = re.search(rf"^{re.escape(target)}:([^=\n]*)$", makefile, re.MULTILINE)
    assert match, f"no rule for {target}"
    return match.group(1).split()


@pytest.mark.parametrize(
    "target", ["demo", "test", "test-integration", "test-apache-kafka", "test-soak"]
)
def test_the_makefile_checks_first(target: str) -> None:
    # First prerequisite, before the virtualenv ($(STAMP)): seconds, not a pip install.
    makefile = (ROOT / "Makefile").read_text()
    assert _prerequisites(makefile, target)[:2] == [f"system-deps-{target}", "$(STAMP)"]
    # And what `make -n` would run first is the script, with the target's name.
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout.splitlines()[0] == f"scripts/system-deps {target}"


def test_ci_runs_the_script_before_anything_else_and_installs_nothing_itself() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[:3] == [
        "set -euo pipefail",
        'cd "$(dirname "$0")/.."',
        "scripts/system-deps test test-apache-kafka test-compose",
    ]
    assert not [line for line in lines if "apt-get" in line]  # one place for that


def test_the_script_is_executable() -> None:
    assert SCRIPT.stat().st_mode & 0o111


def test_the_compose_test_gets_docker_compose_and_debootstrap_as_root(machine: Machine) -> None:
    machine.tools(*JAR_TOOLS)
    machine.uid(0)
    machine.apt_get()
    done, _ = machine.run("test-compose")
    assert done.returncode == 0, done.stderr
    installs = [c for c in machine.calls() if " install " in f" {c} "]
    assert len(installs) == 1, machine.calls()
    assert installs[0].split()[-4:] == ["docker.io", "docker-compose", "debootstrap", "-qq"]
    again, _ = machine.run("test-compose")  # everything there now: silent
    assert (again.returncode, again.stderr) == (0, "")
