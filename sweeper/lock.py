"""One catalog per BLOB directory: the lock file ``<blob_dir>/.sweeper.lock``.

Two sweepers of different catalogs on one ``blob_dir`` would write BLOBs of the same
name over each other's (a BLOB's file name is its topic, partition and range). The
sweepers of one catalog share it: they elect one leader, the only one that writes
(:mod:`pipeline.state.leader`), and the catalog records that directory for the
readers (:meth:`pipeline.swept.catalog.SweepCatalog.record_blob_dir`).

So the lock is an ``flock`` held for the sweeper's life, shared by the sweepers of one
catalog: the first takes it exclusively, writes its catalog's id and its process id
into the file, and turns it into a shared lock; the next one of the same catalog
takes it shared and finds its catalog's id there; one of another catalog finds
another id and is refused. The kernel drops a lock when its process ends, ``kill
-9`` included. The file is opened by :func:`pipeline.state.files.private_file`
(0600, its folder 0700 when missing, never through a symbolic link: ``O_NOFOLLOW``).

An object store (``sweeper.blob_store = "s3://bucket/prefix"``) has no ``flock``: there
the catalog claims the prefix with the object ``<prefix>/.sweeper.lock``
(:class:`ObjectStoreClaim`), kept for as long as the prefix holds the catalog's BLOBs.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from pipeline.errors import ConfigError
from pipeline.state.files import private_file
from pipeline.swept.store import ObjectBlobStore, object_key

#: The lock file's name in ``blob_dir`` (the sweeper's recovery never removes it: it
#: removes only the files its journal names).
LOCK_NAME = ".sweeper.lock"

#: How long a sweeper waits for another one that is writing the lock file (it holds
#: it exclusively only for that moment) before taking it shared, seconds.
CLAIM_WAIT_S = 5.0


def _flock(file: IO[bytes], operation: int) -> bool:
    """``flock(operation | LOCK_NB)``: whether it was taken."""
    try:
        fcntl.flock(file.fileno(), operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(file: IO[bytes]) -> dict[str, Any]:
    """What the lock file says of the sweeper that claimed it (``{}``: nothing
    readable)."""
    file.seek(0)
    try:
        found = json.loads(file.read(4096).decode("utf-8") or "{}")
    except (UnicodeDecodeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


class BlobDirLock:
    """Hold ``<blob_dir>/.sweeper.lock`` for the sweepers of one catalog.

    Args:
        blob_dir: the BLOB directory (created 0700 when missing).
        catalog_id: the sweeper's catalog's id
            (:meth:`pipeline.swept.catalog.SweepCatalog.identity`).

    Raises:
        ConfigError: a sweeper of another catalog holds the directory (key
            ``sweeper.blob_dir``; the message names the directory, the lock file and,
            when the file says so, the holder's process id and host).
        UntrustedFileError: (a ``PermissionError``) a symbolic link, or something
            other than a regular file of our user, is at the lock file's name.
        OSError: the lock file cannot be opened or created otherwise.
    """

    def __init__(self, blob_dir: Path, catalog_id: str) -> None:
        self.path = blob_dir / LOCK_NAME
        self.catalog_id = catalog_id
        self._file: IO[bytes] | None = os.fdopen(private_file(self.path), "r+b")
        try:
            self._take()
        except BaseException:
            self.release()
            raise

    def _take(self) -> None:
        assert self._file is not None
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            if _flock(self._file, fcntl.LOCK_EX):  # nobody holds it: claim it
                claim = {"catalog": self.catalog_id, "pid": os.getpid()}
                self._file.seek(0)
                self._file.truncate()
                self._file.write(json.dumps({**claim, "host": socket.gethostname()}).encode())
                self._file.flush()
                # Shared from now on; not atomic, so what the file says is read below.
                fcntl.flock(self._file.fileno(), fcntl.LOCK_SH)
                break
            if _flock(self._file, fcntl.LOCK_SH):  # held shared: by whom, below
                break
            if time.monotonic() > deadline:  # held exclusively all along
                self._refuse(_holder(self._file))
            time.sleep(0.05)  # another sweeper is writing its claim
        holder = _holder(self._file)
        if holder.get("catalog") != self.catalog_id:
            self._refuse(holder)

    def _refuse(self, holder: dict[str, Any]) -> None:
        pid = holder.get("pid")
        by = (
            f"process {pid} on {holder.get('host') or 'an unnamed host'}"
            if pid is not None
            else "a process that wrote no id in the lock file"
        )
        raise ConfigError(
            f"sweeper.blob_dir {self.path.parent} is held by a sweeper of another catalog "
            f"({by}; lock file {self.path}): two catalogs in one BLOB directory would "
            "write BLOBs over each other's; give this sweeper a directory of its own, or "
            "stop the other one",
            key="sweeper.blob_dir",
            value=str(self.path.parent),
            allowed="a directory no sweeper of another catalog holds",
        )

    def release(self) -> None:
        """Give the lock up (closing the file drops it)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class ObjectStoreClaim:
    """Claim an object store's prefix for the sweepers of one catalog: the object
    ``<prefix>/.sweeper.lock`` names the catalog's id. A sweeper of the catalog that
    finds its own id there (or none) goes on; one of another catalog is refused.

    Not a lock: S3 has no ``flock``, and the object outlives the process. Two
    catalogs that start on an empty prefix in the same instant could both claim it;
    that is a deployment's mistake this catches when either restarts. The sweepers
    of one catalog need no lock among themselves: one leader writes
    (:mod:`pipeline.state.leader`).

    Args:
        store: the sweeper's object store.
        catalog_id: its catalog's id.
        key: the setting that named the store, for the refusal.

    Raises:
        ConfigError: another catalog's id is in the claim (names the prefix, the
            claim object and the holder's host).
        OSError: the store did not answer.
    """

    def __init__(self, store: ObjectBlobStore, catalog_id: str, *, key: str) -> None:
        self.url = store.path(LOCK_NAME)
        filesystem, path = object_key(self.url)
        try:
            with filesystem.open_input_stream(path) as src:
                holder = json.loads(src.read(4096).decode("utf-8") or "{}")
        except FileNotFoundError:
            holder = {}
        except (UnicodeDecodeError, ValueError):
            holder = {"catalog": "unreadable"}
        if not isinstance(holder, dict):
            holder = {"catalog": "unreadable"}
        if holder.get("catalog") not in (None, catalog_id):
            raise ConfigError(
                f"{key} {store.location} is claimed by the sweepers of another catalog "
                f"({holder.get('host') or 'an unnamed host'}; claim {self.url}): two "
                "catalogs under one prefix would write BLOBs over each other's; give this "
                "sweeper a prefix of its own",
                key=key,
                value=store.location,
                allowed="a prefix no sweeper of another catalog claims",
            )
        if not holder:
            claim = {"catalog": catalog_id, "host": socket.gethostname()}
            with filesystem.open_output_stream(path) as out:
                out.write(json.dumps(claim).encode())

    def release(self) -> None:
        """Nothing to give up: the claim stays with the catalog's BLOBs."""
