"""The SQL databases of the services' state (admission's job queue, the sweep
catalog, leader election): SQLAlchemy engines made one way.

SQLite by default (a file, created 0600 in a folder created 0700 by
:func:`pipeline.state.files.private_file`: jobs' arguments,
catalog paths and leases are the service user's alone; WAL so readers do not block
the writer), any SQLAlchemy URL otherwise (PostgreSQL through psycopg 3:
``postgresql+psycopg://user@host/db``); docs/architecture.md says which component keeps what.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import tenacity
from sqlalchemy import MetaData, Table, create_engine, event, inspect, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError

from pipeline.state.files import private_file, restrict_file


def create_database_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; ``kwargs`` go to :func:`sqlalchemy.create_engine`
    (``connect_args`` are merged with SQLite's own). A SQLite file is made private
    first (:func:`private_sqlite_file`).

    The engine hides a statement's parameters from its errors and logs
    (SQLAlchemy's ``hide_parameters``, on unless ``kwargs`` says otherwise): they hold
    jobs' ``env`` values and argv, which no error or log line may show. Its URL shows
    its password as ``***`` (SQLAlchemy's ``URL`` does).
    """
    kwargs.setdefault("hide_parameters", True)
    parsed = make_url(url)
    sqlite = parsed.get_backend_name() == "sqlite"
    connect_args = dict(kwargs.pop("connect_args", {}))
    if sqlite:
        private_sqlite_file(url)
        connect_args.setdefault("check_same_thread", False)
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    if sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def private_sqlite_file(url: str) -> None:
    """Create a SQLite database file 0600 in a folder created 0700
    (:func:`~pipeline.state.files.private_file`), or set an existing file (and the
    WAL, shared-memory and journal files an earlier run left) to 0600 without opening
    them for I/O (:func:`~pipeline.state.files.restrict_file`: a connection of this
    process to the same file keeps its locks), never through a symbolic link. SQLite
    gives the files it creates later the database file's mode. Other URLs: nothing to
    do (the database server owns its files).

    Raises:
        UntrustedFileError: one of the files is a symbolic link, not a regular file, or
            another user's.
        OSError: the database file cannot be created.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    try:
        restrict_file(parsed.database)
    except FileNotFoundError:
        os.close(private_file(parsed.database))  # new: no connection can hold it yet
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            restrict_file(f"{parsed.database}{suffix}")


def create_tables(metadata: MetaData, engine: Engine) -> None:
    """Create ``metadata``'s tables that do not exist yet; safe when several processes
    start at once. ``create_all`` looks for each table, then creates the missing ones
    one by one, so the loser of a CREATE race tries again and finds that table; it may
    lose the race for the next table too (two processes creating the same tables in
    step), so it tries once per table at most: each lost race is a table another
    process created.

    Raises:
        DBAPIError: a CREATE failed for another reason, or on every try.
    """
    for attempt in range(len(metadata.tables) + 1):
        try:
            metadata.create_all(engine)
            return
        except DBAPIError:
            if attempt == len(metadata.tables):
                raise


def add_columns(engine: Engine, added: Mapping[Table, Sequence[str]]) -> None:
    """Give a database made before them the columns of ``added`` it lacks (``{table:
    column names}``, each column as the table defines it; NULL in old rows), each typed
    in the database's dialect. Safe when several processes open the database at once:
    each column is added in a transaction of its own, and an ``ALTER TABLE`` refused
    because another process added the column meanwhile is passed over.

    Raises:
        DBAPIError: the tables' columns could not be read, or a column is still
            missing after the database refused to add it.
    """
    for table, names in added.items():
        have = {c["name"] for c in inspect(engine).get_columns(table.name)}
        for column in (table.c[name] for name in names if name not in have):
            kind = column.type.compile(dialect=engine.dialect)
            try:
                with engine.begin() as conn:
                    conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))
            except DBAPIError:
                if column.name not in {c["name"] for c in inspect(engine).get_columns(table.name)}:
                    raise


def advisory_lock_key(name: str) -> int:
    """The signed 64-bit PostgreSQL advisory lock key of ``name`` (stable across
    processes and Python versions, unlike ``hash``)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


#: How long a new connection tries to put a SQLite database in WAL mode, s.
WAL_SWITCH_S = 10.0


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """WAL journaling and ``synchronous=NORMAL`` on every SQLite connection. The first
    switch of a database to WAL takes an exclusive lock, which SQLite refuses at once
    ("database is locked", no busy handler) while another process's connection reads
    the file: several services opening a new database together retry it for up to
    :data:`WAL_SWITCH_S`; once the file is in WAL mode, the pragma takes no lock."""
    cursor = dbapi_connection.cursor()
    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception(
            lambda e: isinstance(e, sqlite3.OperationalError) and "locked" in str(e)
        ),
        wait=tenacity.wait_random_exponential(multiplier=0.01, max=0.5),
        stop=tenacity.stop_after_delay(WAL_SWITCH_S),
        reraise=True,
    ):
        with attempt:
            cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
