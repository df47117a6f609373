"""A registered BLOB checked against its catalog row before and while it is read: its
path inside the BLOB directory the catalog recorded, a regular file reached without a
symbolic link, its size and SHA-256, and its offsets and count as it is decoded (no
silent BLOB corruption). Also which files of a row the sweeper may remove.

The Spark source checks a BLOB the same way (``io.floodgate.spark.swept.RegisteredBlob``,
``BlobPaths``).
"""

from __future__ import annotations

import array
import errno
import hashlib
import itertools
import logging
import operator
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipeline.errors import BlobIntegrityError, BlobPathError
from pipeline.swept.blob import (
    UNREADABLE,
    BlobSeal,
    SweptRecord,
    blob_batch_records,
    blob_name,
    records_of_batch,
    unpack_column,
)
from pipeline.swept.store import TEMPORARY_PREFIX, is_object_url, object_size, open_object
from pipeline.swept.tables import Blob

log = logging.getLogger(__name__)


#: The ``reason`` of a :class:`~pipeline.errors.BlobIntegrityError` (a metric label).
DAMAGE_REASONS = (
    "missing",
    "size",
    "sha256",
    "offset",
    "count",
    "unreadable",
    # A row naming a file that is not a BLOB of the catalog's (BlobPathError).
    "outside",
    "not-a-file",
    "name",
)


#: Unsealed BLOBs (registered before checksums) already logged by this process.
_unsealed_logged: set[tuple[str, int]] = set()


def _damaged(
    blob: Blob, reason: str, message: str, offset: int | None = None
) -> BlobIntegrityError:
    error = BlobIntegrityError(
        message,
        blob_id=blob.id or None,  # 0: not registered yet
        path=blob.path,
        reason=reason,
        topic=blob.topic,
        partition=blob.partition,
        start=blob.start_offset,
        end=blob.end_offset,
        offset=offset,
    )
    log.error("FG-BLOB-002 %s", error)
    return error


def _refused(blob: Blob, blob_dir: str | None, reason: str, message: str) -> BlobPathError:
    error = BlobPathError(
        message,
        blob_id=blob.id or None,
        path=blob.path,
        blob_dir=blob_dir,
        reason=reason,
        topic=blob.topic,
        partition=blob.partition,
        start=blob.start_offset,
        end=blob.end_offset,
    )
    log.error("FG-BLOB-002 %s", error)
    return error


def inside(path: str, directory: str) -> bool:
    """Whether ``path`` lies inside ``directory`` once both are resolved (symbolic
    links, ``..``; relative paths from the working directory): what a BLOB path
    must be, checked before its file is opened or deleted.

    An object store's (``s3://bucket/prefix``) has no links to resolve: the path must
    be ``<directory>/<name>`` as written, with one plain segment for ``name`` (no
    ``/``, ``.`` or ``..``), and a path of one kind is never inside a directory of the
    other."""
    if is_object_url(directory) or is_object_url(path):
        base = directory.rstrip("/") + "/"
        name = path[len(base) :] if path.startswith(base) else ""
        return is_object_url(directory) and name not in ("", ".", "..") and "/" not in name
    base = os.path.realpath(directory)
    real = os.path.realpath(path)
    return real != base and os.path.commonpath([real, base]) == base


def check_blob_path(blob: Blob, blob_dir: str | None = None) -> None:
    """Refuse a row whose file is not inside the BLOB directory, symbolic links
    resolved (``/dev/zero``, a file in ``/tmp``, a link in the directory that points
    out of it). Nothing is opened.

    Args:
        blob: the row.
        blob_dir: the directory to check against; ``None``: the one the catalog
            recorded when the row was read (``blob.blob_dir``). With neither (a
            catalog no sweeper has recorded a directory in yet), nothing is checked
            here; readers still open only a regular file, never through a link.

    Raises:
        BlobPathError: ``reason`` ``"outside"``, naming the BLOB id, its path and
            the directory; logged as ``FG-BLOB-002``.
    """
    directory = blob_dir if blob_dir is not None else blob.blob_dir
    if directory is not None and not inside(blob.path, directory):
        raise _refused(
            blob,
            directory,
            "outside",
            f"its file resolves to {resolved(blob.path)}, outside the BLOB "
            f"directory {directory}: not the sweeper's, neither read nor deleted",
        )


def resolved(path: str) -> str:
    """A file's path with symbolic links resolved; an object URL as it is."""
    return path if is_object_url(path) else os.path.realpath(path)


def owned_objects(blob: Blob, blob_dir: str) -> list[str]:
    """:func:`owned_files` for an object store's BLOB (``blob_dir`` is
    ``s3://bucket/prefix``): its object and its temporary one, those that exist.

    Raises:
        BlobPathError: ``reason`` ``"outside"`` or ``"name"``; nothing is removed.
        OSError: the store did not answer.
    """
    check_blob_path(blob, blob_dir)
    name = blob_name(blob.topic, blob.partition, blob.start_offset, blob.end_offset)
    final = f"{blob_dir.rstrip('/')}/{name}"
    if blob.path != final:
        raise _refused(
            blob,
            blob_dir,
            "name",
            f"it is not {final}, the object the sweeper writes for that range: not removed",
        )
    temporary = f"{blob_dir.rstrip('/')}/{TEMPORARY_PREFIX}{name}"
    return [url for url in (final, temporary) if object_size(url) is not None]


def owned_files(blob: Blob, blob_dir: str) -> list[Path]:
    """The files of a BLOB that the sweeper of ``blob_dir`` may remove: its file and
    the temporary one it is written to (``.tmp-<name>``), those that exist.

    A row's path is the sweeper's only when it is ``<blob_dir>/<name>`` with symbolic
    links resolved and ``<name>`` the one :func:`~pipeline.swept.blob.blob_name` gives
    the row's topic, partition and range; and each file must be a regular one (a
    symbolic link is not removed either: it is not a file the sweeper wrote).

    Args:
        blob: a registered row, or a journaled sweep's (``id`` 0).
        blob_dir: the sweeper's BLOB directory.

    Returns:
        Up to two paths, the BLOB's file first.

    Raises:
        BlobPathError: ``reason`` ``"outside"``, ``"name"`` or ``"not-a-file"``,
            naming the BLOB id, the path and ``blob_dir``; nothing is removed.
    """
    check_blob_path(blob, blob_dir)
    name = blob_name(blob.topic, blob.partition, blob.start_offset, blob.end_offset)
    path = Path(blob.path)
    if path.name != name or os.path.realpath(path.parent) != os.path.realpath(blob_dir):
        raise _refused(
            blob,
            blob_dir,
            "name",
            f"it is not {os.path.join(blob_dir, name)}, the file the sweeper writes for "
            "that range: not removed",
        )
    found = []
    for candidate in (path, path.with_name(f"{TEMPORARY_PREFIX}{name}")):
        try:
            mode = os.lstat(candidate).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise _refused(
                blob,
                blob_dir,
                "not-a-file",
                f"{candidate} is not a regular file (mode {stat.filemode(mode)}): not removed",
            )
        found.append(candidate)
    return found


def _open_file(blob: Blob) -> Any:
    """The BLOB's file, open for reading at its start: inside the BLOB directory
    (:func:`check_blob_path`), opened without following a symbolic link, and a
    regular file (a device or a FIFO is never read: ``/dev/zero`` would be hashed
    for ever). An object store's BLOB (``s3://``) is opened as an object
    (:func:`pipeline.swept.store.open_object`): a seekable file with ``size()``.

    Raises:
        BlobPathError: outside the directory, or not a regular file.
        BlobIntegrityError: the file cannot be opened (``missing``).
    """
    check_blob_path(blob)
    if is_object_url(blob.path):
        try:
            return open_object(blob.path)
        except (OSError, ValueError) as exc:
            raise _damaged(blob, "missing", f"{exc.__class__.__name__}: {exc}") from exc
    try:
        # O_NONBLOCK: opening a FIFO planted at the name must not wait for a writer.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(blob.path, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link
            raise _refused(
                blob, blob.blob_dir, "not-a-file", "it is a symbolic link: never followed"
            ) from exc
        raise _damaged(blob, "missing", f"{exc.__class__.__name__}: {exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refused(
                blob,
                blob.blob_dir,
                "not-a-file",
                f"it is not a regular file (mode {stat.filemode(mode)}): not read",
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _open_checked(blob: Blob) -> Any:
    """The BLOB's file (:func:`_open_file`), open at its start, its size and (when
    sealed) SHA-256 checked.

    Raises:
        BlobPathError: as :func:`_open_file`.
        BlobIntegrityError: the file is missing, or its size or digest differs.
    """
    src = _open_file(blob)
    try:
        size = src.size() if is_object_url(blob.path) else os.fstat(src.fileno()).st_size
        if size != blob.bytes:
            raise _damaged(blob, "size", f"the file holds {size} bytes, the catalog {blob.bytes}")
        if blob.sha256 is None:
            if (blob.path, blob.id) not in _unsealed_logged:
                _unsealed_logged.add((blob.path, blob.id))
                log.warning(
                    "FG-BLOB-001 BLOB %d (%s) of %s[%d] has no SHA-256 in the catalog "
                    "(registered before checksums): read with the size, offset and count "
                    "checks only",
                    blob.id,
                    blob.path,
                    blob.topic,
                    blob.partition,
                )
        else:
            digest = hashlib.file_digest(src, "sha256").hexdigest()
            if digest != blob.sha256:
                raise _damaged(
                    blob, "sha256", f"the file's SHA-256 is {digest}, the catalog's {blob.sha256}"
                )
            src.seek(0)
    except BaseException:
        src.close()
        raise
    return src


def _increasing(offsets: array.array[int]) -> bool:
    return all(map(operator.lt, offsets, itertools.islice(offsets, 1, None)))


def read_registered(blob: Blob) -> Iterator[list[SweptRecord]]:
    """The records of a registered BLOB, batch by batch, in offset order, checked
    against its catalog row (no silent BLOB corruption).

    Before any record is yielded: the file's size and SHA-256 are the recorded ones.
    While reading: offsets are strictly increasing (not contiguous: transaction
    markers and aborted records take offsets without being records), inside
    ``[start_offset, end_offset)``, the first is ``first_offset``. At the end of the
    file: the last is ``last_offset`` and the count is ``tuples``. A row without a
    seal (registered before checksums) gets every check but the digest and the
    first/last offsets.

    Before the file is opened: its path is inside the catalog's BLOB directory, and
    it is a regular file reached without a symbolic link (:func:`check_blob_path`).

    Raises:
        BlobIntegrityError: a check failed (``reason``: ``missing``, ``size``,
            ``sha256``, ``offset``, ``count``, ``unreadable``); logged as
            ``FG-BLOB-002``. Records of the BLOB yielded before an ``offset`` error
            are inside its range and in order; nothing past the error is read.
        BlobPathError: (a ``BlobIntegrityError``) the path is outside the BLOB
            directory or is not a regular file; nothing was read.
    """
    src = _open_checked(blob)
    with src:
        count = 0
        previous = blob.start_offset - 1
        try:
            for batch_record in blob_batch_records(src):
                offsets = unpack_column("q", batch_record["offsets"])
                if not offsets:
                    continue
                first = offsets[0]
                if count == 0 and blob.first_offset is not None and first != blob.first_offset:
                    raise _damaged(
                        blob,
                        "offset",
                        f"its first offset is {first}, the catalog's {blob.first_offset}",
                        first,
                    )
                if first <= previous or offsets[-1] >= blob.end_offset or not _increasing(offsets):
                    bad, before = _first_out_of_order(offsets, previous, blob.end_offset)
                    raise _damaged(
                        blob,
                        "offset",
                        f"offset {bad} after {before} is not strictly increasing inside "
                        f"[{blob.start_offset}, {blob.end_offset})",
                        bad,
                    )
                previous = offsets[-1]
                batch = records_of_batch(batch_record, blob.topic, blob.partition)
                count += len(batch)
                yield batch
        except UNREADABLE as exc:
            raise _damaged(blob, "unreadable", f"{exc.__class__.__name__}: {exc}") from exc
        if count != blob.tuples:
            raise _damaged(blob, "count", f"it holds {count} records, the catalog {blob.tuples}")
        last = previous if count else None
        if blob.sha256 is not None and last != blob.last_offset:
            raise _damaged(
                blob, "offset", f"its last offset is {last}, the catalog's {blob.last_offset}", last
            )


def _first_out_of_order(offsets: array.array[int], previous: int, end: int) -> tuple[int, int]:
    """``(the first offset not after the one before it or not before end, that one)``."""
    for offset in offsets:
        if offset <= previous or offset >= end:
            return offset, previous
        previous = offset
    raise AssertionError("no offset out of order")  # pragma: no cover


def seal_blob(blob: Blob) -> BlobSeal:
    """Check a registered BLOB whole (:func:`read_registered`) and return its seal
    (the sweeper seals rows registered before checksums with it).

    Raises:
        BlobIntegrityError: as :func:`read_registered`.
    """
    first: int | None = None
    last: int | None = None
    count = 0
    for batch in read_registered(blob):
        if first is None:
            first = batch[0].offset()
        last = batch[-1].offset()
        count += len(batch)
    with _open_file(blob) as src:
        digest = hashlib.file_digest(src, "sha256").hexdigest()
    return BlobSeal(digest, blob.bytes, count, first, last)


def check_blob(blob: Blob) -> None:
    """Check a registered BLOB's size and SHA-256 (a full :func:`seal_blob` check when
    it has no SHA-256 yet), without decoding its records: what the sweeper does before
    it truncates the broker copy of the BLOB's range.

    Raises:
        BlobIntegrityError: as :func:`read_registered`.
    """
    if blob.sha256 is None:
        seal_blob(blob)
        return
    _open_checked(blob).close()
