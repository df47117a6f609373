"""The SQL databases of the services' state (admission's job queue, the sweep
catalog, leader election): SQLAlchemy engines made one way.

SQLite by default (a file; its folder is created; WAL so readers do not block the
writer), any SQLAlchemy URL otherwise (PostgreSQL through psycopg 3:
``postgresql+psycopg://user@host/db``); README.md says which component keeps what.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError


def create_database_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; ``kwargs`` go to :func:`sqlalchemy.create_engine`
    (``connect_args`` are merged with SQLite's own)."""
    parsed = make_url(url)
    sqlite = parsed.get_backend_name() == "sqlite"
    connect_args = dict(kwargs.pop("connect_args", {}))
    if sqlite:
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        connect_args.setdefault("check_same_thread", False)
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    if sqlite:
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def create_tables(metadata: MetaData, engine: Engine) -> None:
    """Create ``metadata``'s tables that do not exist yet; safe when several processes
    start at once (the loser of a CREATE race tries again and finds them)."""
    try:
        metadata.create_all(engine)
    except DBAPIError:
        metadata.create_all(engine)


def advisory_lock_key(name: str) -> int:
    """The signed 64-bit PostgreSQL advisory lock key of ``name`` (stable across
    processes and Python versions, unlike ``hash``)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
