"""Where swept BLOBs live: a local directory, or a prefix of an S3 bucket.

``sweeper.blob_store`` names the store as a URL (``sweeper.blob_dir``, a path, is the
local one). The sweeper writes, publishes, sizes and removes BLOBs through a
:class:`BlobStore`; readers open a registered BLOB by its catalog row's path
(:func:`open_object` for an ``s3://`` one, :mod:`pipeline.swept.catalog` for a file).

Both stores keep one protocol (docs/architecture.md, "The sweeper"):

* a BLOB is written under ``.tmp-<name>`` beside its final name, hashed as it is
  written (:func:`pipeline.swept.blob.write_sealed`), then published under
  ``<name>``: a local file by an fsynced rename, an object by a server-side copy.
  Neither store ever shows a BLOB at its final name that is not whole -- an S3
  multipart upload completes on close, even one a failed write left short, which is
  why the upload goes to the temporary key;
* the catalog's journal names both keys before the write, so a sweeper killed
  mid-sweep leaves nothing its recovery does not remove;
* a row's path must be ``<location>/<name>`` (:func:`pipeline.swept.registered.inside`):
  for a file with symbolic links resolved, for an object textually.

Objects are read and written with pyarrow's S3 filesystem (Arrow's C++ AWS SDK
client): endpoint, region and credentials come from the standard AWS environment
(``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
or ``AWS_PROFILE`` and ``~/.aws/config``), as every AWS tool takes them. Spark's JVM
reads them through Hadoop's ``s3a`` connector (docs/spark-cluster.md).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from pipeline.errors import ConfigError
from pipeline.state.files import private_dir
from pipeline.swept.blob import BlobSeal, publish_blob, write_sealed, write_sealed_blob

#: URL schemes of object stores (S3 and its API-compatibles: MinIO, Ceph RGW, S3Proxy).
OBJECT_SCHEMES = ("s3",)

#: What ``sweeper.blob_store`` accepts, for refusals.
ALLOWED_STORES = "file:///absolute/folder, or s3://bucket/prefix (S3 or an S3-compatible)"

#: The prefix of a BLOB's temporary name (its final name's, in the same folder).
TEMPORARY_PREFIX = ".tmp-"


def is_object_url(location: str) -> bool:
    """Whether ``location`` (a catalog row's path or BLOB directory) is an object URL."""
    return location.split("://", 1)[0] in OBJECT_SCHEMES and "://" in location


def split_object_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix/`` -> ``("bucket", "some/prefix")``.

    Raises:
        ValueError: not ``s3://bucket[/prefix]``, or with a query, a fragment, an
            empty or ``.``/``..`` segment (the message says which).
    """
    parts = urlsplit(url)
    if parts.scheme not in OBJECT_SCHEMES:
        raise ValueError(f"{url!r} is not an object URL ({', '.join(OBJECT_SCHEMES)})")
    if parts.query or parts.fragment or parts.username or parts.port:
        raise ValueError(
            f"{url!r} carries a query, a fragment or credentials: the endpoint, region "
            "and credentials come from the AWS environment (AWS_ENDPOINT_URL, AWS_REGION, "
            "AWS_ACCESS_KEY_ID, AWS_PROFILE)"
        )
    if not parts.netloc:
        raise ValueError(f"{url!r} names no bucket")
    prefix = parts.path.strip("/")
    if prefix and any(s in ("", ".", "..") for s in prefix.split("/")):
        raise ValueError(f"{url!r}: an empty, '.' or '..' segment in the prefix")
    return parts.netloc, prefix


@functools.lru_cache(maxsize=16)
def object_filesystem(bucket: str) -> pafs.FileSystem:
    """pyarrow's S3 filesystem for ``bucket``, configured from the AWS environment
    (``FileSystem.from_uri`` reads ``AWS_ENDPOINT_URL`` besides the SDK's own chain);
    one per bucket and process (each holds an HTTP client pool)."""
    filesystem, _ = pafs.FileSystem.from_uri(f"s3://{bucket}")
    return filesystem


def object_key(url: str) -> tuple[pafs.FileSystem, str]:
    """``s3://bucket/key`` -> (its bucket's filesystem, ``bucket/key``, pyarrow's path).

    Raises:
        ValueError: as :func:`split_object_url`.
    """
    bucket, key = split_object_url(url)
    return object_filesystem(bucket), f"{bucket}/{key}"


def open_object(url: str) -> Any:
    """An object, open for reading at its start: a seekable pyarrow ``NativeFile``
    with ``read``, ``readinto``, ``seek`` and ``size()``.

    Raises:
        FileNotFoundError: no such object.
        OSError: the store did not answer or refused the read.
    """
    filesystem, key = object_key(url)
    return filesystem.open_input_file(key)


def object_size(url: str) -> int | None:
    """The object's size in bytes, ``None`` when there is none.

    Raises:
        OSError: the store did not answer or refused the request.
    """
    filesystem, key = object_key(url)
    info = filesystem.get_file_info(key)
    return None if info.type == pafs.FileType.NotFound else int(info.size)


class BlobStore(abc.ABC):
    """Where one sweeper writes BLOBs (the catalog records :attr:`location`).

    Attributes:
        location: an absolute folder, or ``s3://bucket/prefix``; a BLOB named ``name``
            is at ``<location>/<name>`` (:meth:`path`).
    """

    location: str

    def path(self, name: str) -> str:
        """Where the BLOB named ``name`` is published (the catalog row's path)."""
        return f"{self.location.rstrip('/')}/{name}"

    def temporary(self, name: str) -> str:
        """Where the BLOB named ``name`` is written before it is published."""
        return self.path(TEMPORARY_PREFIX + name)

    @abc.abstractmethod
    def write(self, temporary: str, batches: Iterable[Sequence[Any]]) -> BlobSeal:
        """Write runs of Kafka records at ``temporary``, sealed
        (:func:`pipeline.swept.blob.write_sealed`).

        Raises:
            OSError: the write failed (a full disk, a store that refused it).
        """

    @abc.abstractmethod
    def publish(self, temporary: str, final: str) -> None:
        """Give the BLOB written at ``temporary`` its ``final`` name, durably; the
        temporary name is gone afterwards.

        Raises:
            OSError: it failed (``temporary`` may be left: the journal names it).
        """

    @abc.abstractmethod
    def size(self, path: str) -> int | None:
        """The BLOB's size in bytes, ``None`` when there is none at ``path``."""

    @abc.abstractmethod
    def remove(self, path: str) -> None:
        """Remove the BLOB at ``path``; nothing there is no error."""

    @abc.abstractmethod
    def room(self) -> str:
        """What the store says of its free space, for an error message."""


class LocalBlobStore(BlobStore):
    """BLOBs as files of a local (or shared) folder, the sweeper's user's alone.

    Args:
        folder: made absolute, created 0700 when missing.
        key: the setting that named it, for refusals.

    Raises:
        ConfigError: the folder is another user's or others can write to it
            (:func:`~pipeline.state.files.private_dir`); nothing was written.
    """

    def __init__(self, folder: str | Path, *, key: str = "sweeper.blob_dir") -> None:
        self.folder = private_dir(os.path.abspath(folder), key=key)
        self.location = str(self.folder)

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def write(self, temporary: str, batches: Iterable[Sequence[Any]]) -> BlobSeal:
        return write_sealed_blob(Path(temporary), batches)

    def publish(self, temporary: str, final: str) -> None:
        publish_blob(Path(temporary), Path(final))

    def size(self, path: str) -> int | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def remove(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def room(self) -> str:
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return f"unknown bytes free in {self.folder}"
        return f"{st.f_bavail * st.f_frsize} bytes free in {self.folder}"


class ObjectBlobStore(BlobStore):
    """BLOBs as objects under ``s3://bucket/prefix`` (S3 or an S3-compatible).

    Args:
        url: ``s3://bucket[/prefix]``; the bucket must exist (Floodgate creates no
            bucket: who may, and with which policy, is the operator's call).
        key: the setting that named it, for refusals.

    Raises:
        ConfigError: the URL is malformed, or the bucket cannot be listed with the
            environment's credentials (names the key, the URL and the store's answer).
    """

    def __init__(self, url: str, *, key: str = "sweeper.blob_store") -> None:
        try:
            self.bucket, self.prefix = split_object_url(url)
        except ValueError as exc:
            raise ConfigError(str(exc), key=key, value=url, allowed=ALLOWED_STORES) from exc
        self.location = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.filesystem = object_filesystem(self.bucket)
        try:
            info = self.filesystem.get_file_info(self.bucket)
        except OSError as exc:
            raise ConfigError(
                f"{key} {self.location}: the store did not answer: {exc}",
                key=key,
                value=url,
                allowed="a bucket the AWS environment's credentials can read and write",
            ) from exc
        if info.type != pafs.FileType.Directory:
            raise ConfigError(
                f"{key} {self.location}: no bucket {self.bucket!r} (create it first)",
                key=key,
                value=url,
                allowed="an existing bucket",
            )

    def _key(self, path: str) -> str:
        return object_key(path)[1]

    def write(self, temporary: str, batches: Iterable[Sequence[Any]]) -> BlobSeal:
        with self.filesystem.open_output_stream(self._key(temporary)) as out:
            return write_sealed(out, batches)

    def publish(self, temporary: str, final: str) -> None:
        # S3 has no rename: a server-side copy, then the temporary object goes. A copy
        # is atomic (the object appears whole or not at all) and durable on success.
        self.filesystem.copy_file(self._key(temporary), self._key(final))
        self.filesystem.delete_file(self._key(temporary))

    def size(self, path: str) -> int | None:
        return object_size(path)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filesystem.delete_file(self._key(path))

    def room(self) -> str:
        return f"an object store, {self.location}: no free-space figure"


def open_blob_store(location: str, *, key: str) -> BlobStore:
    """The store ``location`` names: ``s3://bucket/prefix``, ``file:///folder``, or a
    path (a folder).

    Raises:
        ConfigError: an unknown scheme, a ``file:`` URL with a host, or as the store's
            constructor (names ``key``, the value and what is allowed).
    """
    parts = urlsplit(location)
    if parts.scheme in OBJECT_SCHEMES:
        return ObjectBlobStore(location, key=key)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise ConfigError(
                f"{key} {location!r}: a file URL names a local folder, no host or query",
                key=key,
                value=location,
                allowed=ALLOWED_STORES,
            )
        return LocalBlobStore(parts.path, key=key)
    if parts.scheme and len(parts.scheme) > 1:  # "C:" is no scheme, but no OS of ours
        raise ConfigError(
            f"{key} {location!r}: unknown scheme {parts.scheme!r}",
            key=key,
            value=location,
            allowed=ALLOWED_STORES,
        )
    return LocalBlobStore(location, key=key)
