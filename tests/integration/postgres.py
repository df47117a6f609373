"""A real PostgreSQL server for the tests that need several service instances on one
database (leader election).

``FLOODGATE_TEST_POSTGRES_URL`` names an existing server (a SQLAlchemy URL of a
database the tests may create tables in). Otherwise a private cluster is made from
the installed server binaries (Debian's ``postgresql`` package, which ``.ci/run``
installs): ``initdb`` into a temporary directory, a free loopback port, the socket in
that directory, trust authentication on loopback only; stopped and removed after.
The server refuses to run as root, so as root it runs as the ``postgres`` user the
package creates (``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.brokers.engines import free_port

ENV_URL = "FLOODGATE_TEST_POSTGRES_URL"


def _bindir() -> Path:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not candidates:
        raise RuntimeError(
            "no PostgreSQL server binaries (initdb) found: install them "
            "(`scripts/system-deps test`, which make test runs, installs them) or set "
            f"{ENV_URL} to a server's SQLAlchemy URL"
        )
    return Path(candidates[-1]).parent


@contextmanager
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the duration; yields its SQLAlchemy URL (psycopg 3)."""
    if os.environ.get(ENV_URL):
        yield os.environ[ENV_URL]
        return
    bindir = _bindir()
    root = os.geteuid() == 0
    workdir = Path(tempfile.mkdtemp(prefix="floodgate-pg-"))
    data = workdir / "data"
    as_user = ["runuser", "-u", "postgres", "--"] if root else []
    if root:
        shutil.chown(workdir, "postgres", "postgres")
    port = free_port()

    def run(*argv: str) -> None:
        result = subprocess.run(
            [*as_user, *argv], capture_output=True, text=True, check=False, timeout=120
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")

    run(str(bindir / "initdb"), "-D", str(data), "-U", "floodgate", "-A", "trust", "-E", "UTF8")
    options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    log_file = str(workdir / "log")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", log_file, "-w", "start")
    try:
        yield f"postgresql+psycopg://floodgate@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            check=False,
            timeout=60,
        )
        shutil.rmtree(workdir, ignore_errors=True)


def fresh_database(url: str) -> str:
    """A new, empty database on the server of ``url``; its URL (one per test)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"floodgate_{uuid.uuid4().hex[:12]}"
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return make_url(url).set(database=name).render_as_string(hide_password=False)
