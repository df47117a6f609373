"""Leader election through a database lock, for services that run several instances on
one database (the admission service, the sweeper; docs/architecture.md, "The admission service",
"Several instances, one leader", and "The sweeper service", "Several sweepers").

The rule is leader-elected consumption, as with Spring Integration's
``LockRegistryLeaderInitiator`` over a JDBC lock table: leadership can be granted at
any moment at run time, and lost at any moment (the node stops, its database
connection fails), and the node starts or stops its work on the granted / revoked
events. :class:`LeaderElection` does the same with the lock the database gives:

* **PostgreSQL**: a session-level advisory lock (``pg_try_advisory_lock``) held on a
  connection of its own. The server releases it the moment that connection ends --
  the process died, was killed, or lost the network (TCP keepalives bound how long a
  silent peer holds it) -- so another instance takes over within one
  ``check_interval_s``. The holder checks its connection every interval; a failed
  check is a lost lock (revoked), and it tries again on a new connection.
* **SQLite** (one host): an exclusive ``flock`` on ``<database file>.leader``, which
  the kernel releases when the process ends. An in-memory database is its own leader.

A lock alone cannot stop a deposed leader that has not noticed yet (a pause longer
than the check interval) from acting for an instant; callers make every action that
must happen once a compare-and-set in the database as well (the admission service
claims a job ``ENQUEUED -> RUNNING`` before it starts its process), so two leaders
for an instant never do the same thing twice.

The holder is recorded in the ``floodgate_leaders`` table (service, instance,
address, since) for followers to point operators at it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from sqlalchemy import Column, Float, MetaData, String, Table, delete, insert, select
from sqlalchemy import text as sql_text
from sqlalchemy.engine import Connection, Engine, make_url

from pipeline.state.database import (
    advisory_lock_key,
    create_database_engine,
    create_tables,
)
from pipeline.state.files import private_file

log = logging.getLogger(__name__)

metadata = MetaData()

leaders = Table(
    "floodgate_leaders",
    metadata,
    Column("service", String, primary_key=True),
    Column("instance", String, nullable=False),
    Column("address", String, nullable=True),
    Column("since", Float, nullable=False),
)

#: libpq keepalives on the lock's connection: a holder whose host went silent loses
#: the lock after about idle + interval * count seconds, not the kernel's two hours.
PG_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}


@dataclass(frozen=True)
class Holder:
    """Who holds a service's lock, as recorded in ``floodgate_leaders``."""

    instance: str
    address: str | None
    since: float

    def as_json(self) -> dict[str, Any]:
        """As ``GET /status`` shows it."""
        return {"instance": self.instance, "address": self.address, "since": self.since}


def lock_key(service: str) -> int:
    """The advisory lock key of a service's leadership."""
    return advisory_lock_key(f"floodgate.leader.{service}")


def default_instance() -> str:
    """``<host>:<pid>:<random>``: unique per process, readable in logs."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class LeaderElection:
    """Take and keep the leadership of ``service`` at run time.

    Args:
        url: the service's SQLAlchemy database URL (the same every instance uses).
        service: what is led (``"admission"``, ``"sweeper"``); one lock per name.
        instance: this instance's name in logs and in ``floodgate_leaders``.
        address: where this instance answers (its API URL), shown to followers.
        on_granted / on_revoked: called from the election thread when leadership is
            taken / lost; the callee must not block for long.
        check_interval_s: how often a follower tries the lock and a leader checks it.

    The lock is tried once in :meth:`start` (so a lone instance leads from its first
    moment) and then every ``check_interval_s`` by a daemon thread.
    """

    def __init__(
        self,
        url: str,
        service: str,
        *,
        instance: str | None = None,
        address: str | None = None,
        on_granted: Callable[[], None] | None = None,
        on_revoked: Callable[[], None] | None = None,
        check_interval_s: float = 1.0,
    ) -> None:
        self.service = service
        self.instance = instance or default_instance()
        self.address = address
        self.check_interval_s = check_interval_s
        self.on_granted = on_granted
        self.on_revoked = on_revoked
        self._url = make_url(url)
        self._engine: Engine = create_database_engine(
            url, connect_args=PG_KEEPALIVES if self._postgres else {}, pool_pre_ping=True
        )
        create_tables(metadata, self._engine)
        self._leader = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None  # PostgreSQL: the lock's session
        self._file: IO[bytes] | None = None  # SQLite: the locked file
        self._mutex = threading.Lock()

    @property
    def _postgres(self) -> bool:
        return self._url.get_backend_name() == "postgresql"

    @property
    def is_leader(self) -> bool:
        """Whether this instance holds the lock (as of its last check)."""
        return self._leader.is_set()

    def start(self) -> LeaderElection:
        """Try the lock at once, then keep trying / checking in the background."""
        self._stop.clear()
        self.poll()
        self._thread = threading.Thread(
            target=self._loop, name=f"floodgate-{self.service}-leader", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Give the lock up (revoked first) and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with self._mutex:
            if self._leader.is_set():
                self._revoke("the instance is stopping")
            self._release()
        self._engine.dispose()

    def holder(self) -> Holder | None:
        """The instance recorded as leader, or ``None`` (no one has led yet)."""
        try:
            with self._engine.connect() as conn:
                row = conn.execute(select(leaders).where(leaders.c.service == self.service)).first()
        except Exception:  # the database is down: no one can be named
            log.debug("leader of %s: the database could not be read", self.service, exc_info=True)
            return None
        return None if row is None else Holder(row.instance, row.address, row.since)

    def poll(self) -> bool:
        """One check: a follower tries the lock, a leader verifies it still holds it.

        Returns:
            Whether this instance leads after the check.
        """
        with self._mutex:
            if self._leader.is_set():
                reason = self._verify()
                if reason is not None:
                    self._revoke(reason)
                    self._release()
            else:
                try:
                    acquired = self._acquire()
                except Exception as exc:
                    log.warning("%s: lock not tried, the database failed: %s", self.service, exc)
                    self._release()
                    acquired = False
                if acquired:
                    self._grant()
            return self._leader.is_set()

    # -- internals -------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.wait(self.check_interval_s):
            try:
                self.poll()
            except Exception:
                log.exception("%s: leader check failed", self.service)

    def _acquire(self) -> bool:
        if self._postgres:
            if self._conn is None:
                self._conn = self._engine.connect()
            got = self._conn.execute(
                sql_text("SELECT pg_try_advisory_lock(:key)"), {"key": lock_key(self.service)}
            ).scalar()
            self._conn.commit()
            return bool(got)
        database = self._url.database
        if self._url.get_backend_name() != "sqlite" or not database or database == ":memory:":
            return True  # no other process can share this database
        if self._file is None:
            # 0600 like the database beside it; held open while leading.
            self._file = os.fdopen(private_file(f"{database}.leader"), "r+b")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _verify(self) -> str | None:
        """``None`` while the lock is held; else why it was lost."""
        if not self._postgres:
            return None  # a flock lasts as long as the process
        assert self._conn is not None
        key = lock_key(self.service)
        try:
            held = self._conn.execute(
                # A bigint advisory lock shows as classid = high 32 bits, objid = low.
                sql_text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND pid = pg_backend_pid() AND granted AND objsubid = 1 "
                    "AND classid::bigint = :high AND objid::bigint = :low"
                ),
                {"high": (key >> 32) & 0xFFFF_FFFF, "low": key & 0xFFFF_FFFF},
            ).scalar()
            self._conn.commit()
        except Exception as exc:
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            return f"its database connection failed: {exc.__class__.__name__}: {first}"
        return None if held else "the database no longer shows the lock held"

    def _grant(self) -> None:
        now = time.time()
        try:
            with self._engine.begin() as conn:
                conn.execute(delete(leaders).where(leaders.c.service == self.service))
                conn.execute(
                    insert(leaders).values(
                        service=self.service,
                        instance=self.instance,
                        address=self.address,
                        since=now,
                    )
                )
        except Exception:
            log.warning("%s: leader not recorded in floodgate_leaders", self.service, exc_info=True)
        log.warning("FG-LEAD-001 %s: leadership granted to %s", self.service, self.instance)
        # The callee recovers first; only then does the instance act as the leader.
        if self.on_granted is not None:
            self.on_granted()
        self._leader.set()

    def _revoke(self, reason: str) -> None:
        self._leader.clear()
        log.warning(
            "FG-LEAD-002 %s: leadership of %s revoked: %s", self.service, self.instance, reason
        )
        if self.on_revoked is not None:
            self.on_revoked()

    def _release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.execute(
                    sql_text("SELECT pg_advisory_unlock(:key)"), {"key": lock_key(self.service)}
                )
                self._conn.commit()
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
