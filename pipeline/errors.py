"""One exception hierarchy for Floodgate.

Every error raised by Floodgate derives from :class:`FloodgateError` *and*, where
one fits, from the matching built-in error, so a caller can catch either
(the pattern of quix-streams' ``ValueSerializationError``). Exceptions carry
their data as attributes, not only in the message.

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).
"""

from __future__ import annotations

import queue
from collections.abc import Sequence

from pipeline.redaction import redact_any, redact_text


class FloodgateError(Exception):
    """Root of every error Floodgate raises."""


class ConfigError(FloodgateError, ValueError):
    """A configuration file or value is refused at start.

    No secret is shown (:mod:`pipeline.redaction`): the value of a secret-bearing key
    is :data:`~pipeline.redaction.REDACTED`, and URL passwords and ``password=...``
    pairs in the message, the value and ``allowed`` are ``***``.

    Attributes:
        key: dotted path of the offending key (``input_streams.flights.watermark``),
            or ``None`` when the file itself is unreadable.
        value: the value that was refused (``None`` when the key is missing), redacted.
        allowed: what is allowed instead, in words (``"'server' or 'data_source'"``).
    """

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        value: object = None,
        allowed: str | None = None,
    ) -> None:
        super().__init__(redact_text(message))
        self.key = key
        self.value = redact_any(key or "", value)
        self.allowed = None if allowed is None else redact_text(allowed)


class BrokerError(FloodgateError, RuntimeError):
    """The Kafka broker cannot be reached or started.

    Attributes:
        command: the command line that was run to start a broker, if any.
        output: what that command printed (stdout and stderr, tail), if any.
    """

    def __init__(
        self, message: str, *, command: Sequence[str] | None = None, output: str = ""
    ) -> None:
        text = message
        if command is not None:
            text += "\n  command: " + " ".join(command)
        if output:
            text += "\n  output:\n    " + "\n    ".join(output.splitlines())
        super().__init__(text)
        self.command = list(command) if command is not None else None
        self.output = output


class UntrustedFileError(FloodgateError, PermissionError):
    """A file Floodgate would write or trust is not its user's alone: a symbolic link
    (never followed), not a regular file, owned by another user, or (a file it
    trusts) writable by others (:mod:`pipeline.state.files`). Nothing was read
    from it or written to it.

    Attributes:
        path: the file.
        uid: its owner's user id (of the link itself for a symbolic link).
        mode: its permission bits (``0o7777`` of ``st_mode``).
        reason: what is wrong, in words (``"a symbolic link (to /etc/passwd)"``,
            ``"another user's (we are uid 1000)"``, ``"writable by others than its
            owner"``).
    """

    def __init__(self, message: str, *, path: str, uid: int, mode: int, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.uid = uid
        self.mode = mode
        self.reason = reason


class UntrustedEndpointError(FloodgateError, PermissionError):
    """The endpoint a query group's control file names is not proven to be the driver
    that wrote it (:func:`pipeline.http.control_file.verify_endpoint`): its process
    is gone, another user's, another process, does not listen on the port, or the
    endpoint cannot prove it holds the file's identity key. No token was sent to it.

    Attributes:
        path: the control file.
        pid: the process id it names.
        port: the port its URL names (``None``: none).
        reason: what failed, in words.
    """

    def __init__(self, message: str, *, path: str, pid: int, port: int | None, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid
        self.port = port
        self.reason = reason


class SchemaError(FloodgateError, ValueError):
    """An Avro schema cannot be found or parsed, or a tuple does not match it.

    Attributes:
        stream: the stream (or schema name) concerned.
        field: the offending field, when one can be named.
    """

    def __init__(self, message: str, *, stream: str, field: str | None = None) -> None:
        super().__init__(message)
        self.stream = stream
        self.field = field


class TupleTooLargeError(SchemaError):
    """A tuple whose encoded key and value exceed the producer's ``message.max.bytes``
    (librdkafka refuses it locally; the broker's own limit is the topic's
    ``max.message.bytes``). Raised by ``put`` before anything of the batch is sent.

    Attributes:
        index: the tuple's position in the batch.
        size: its encoded key + value, bytes.
        limit: ``message.max.bytes``.
    """

    def __init__(self, message: str, *, stream: str, index: int, size: int, limit: int) -> None:
        super().__init__(message, stream=stream)
        self.index = index
        self.size = size
        self.limit = limit


class NullKeyError(SchemaError):
    """A tuple of a keyed input stream (``key = [...]`` in the query group file) with no
    value for a key field: its Kafka key would not identify it, and its partition, so
    its order among the tuples of its key, would be lost. Raised by ``put`` before
    anything of the batch is sent.

    Attributes:
        index: the tuple's position in the batch.
    """

    def __init__(self, message: str, *, stream: str, index: int, field: str) -> None:
        super().__init__(message, stream=stream, field=field)
        self.index = index


class EventTimeError(SchemaError):
    """A tuple whose event time (``timestamp_field``) is more than the stream's
    ``max_event_time_ahead_ms`` ahead of now: one such tuple would move the watermark
    so far on that every tuple after it would be late. Raised by ``put`` before anything
    of the batch is sent (the rule of Kafka 4.0's ``log.message.timestamp.after.max.ms``,
    KIP-937, applied to the event time).

    Attributes:
        index: the tuple's position in the batch.
        event_time_ms: its event time, epoch milliseconds.
        limit_ms: ``max_event_time_ahead_ms``.
    """

    def __init__(
        self,
        message: str,
        *,
        stream: str,
        index: int,
        field: str,
        event_time_ms: int,
        limit_ms: int,
    ) -> None:
        super().__init__(message, stream=stream, field=field)
        self.index = index
        self.event_time_ms = event_time_ms
        self.limit_ms = limit_ms


class DeserializationError(FloodgateError, ValueError):
    """Bytes read from Kafka cannot be decoded as a tuple of their stream.

    Attributes:
        reason: a stable, machine-readable reason (``bad-marker``,
            ``unknown-fingerprint``, ``bad-body``); it is the ``floodgate.reason``
            header of the dead-letter record.
        stream, topic, partition, offset: where the bytes were read; ``None``
            when decoding outside the broker (e.g. in a unit test).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        stream: str,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        where = ""
        if topic is not None:
            where = f" (topic {topic!r}, partition {partition}, offset {offset})"
        super().__init__(f"stream {stream!r}: {message}{where}")
        self.detail = message
        self.reason = reason
        self.stream = stream
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def at(self, *, topic: str, partition: int, offset: int) -> DeserializationError:
        """Return a copy of this error that names where the bytes were read (same cause)."""
        located = DeserializationError(
            self.detail,
            reason=self.reason,
            stream=self.stream,
            topic=topic,
            partition=partition,
            offset=offset,
        )
        located.__cause__ = self.__cause__
        return located


class DataLossError(FloodgateError, RuntimeError):
    """Offsets a micro-batch must read are held neither by the broker nor by a BLOB.

    Floodgate never skips such a gap silently: the sweeper's unsweep reads an offset from
    the broker while it holds it and from the BLOB chain after, so a gap is lost data.

    Attributes:
        topic, partition: the partition concerned.
        start, end: the offset range ``[start, end)`` that was asked for.
        available_from: the broker's log start offset at the time, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        topic: str,
        partition: int,
        start: int,
        end: int,
        available_from: int | None = None,
    ) -> None:
        super().__init__(
            f"data loss on topic {topic!r} partition {partition}, offsets [{start}, {end}): "
            f"{message}"
        )
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.available_from = available_from


class BlobIntegrityError(DataLossError):
    """A registered BLOB is not what the sweeper wrote (no silent BLOB
    corruption): its SHA-256, size, record count, or record offsets differ from what
    the sweep catalog recorded when the BLOB was registered, or the file is missing or
    cannot be parsed.

    The tuples the BLOB held are lost unless the broker still holds them; a reader
    stops at this BLOB and commits nothing past it.

    Attributes:
        blob_id: the BLOB's id in the catalog (``floodgate_blobs.id``; ``None``: not
            registered yet).
        path: the BLOB file.
        reason: what differs, e.g. ``"sha256"``, ``"size"``, ``"count"``,
            ``"offset"``, ``"unreadable"``.
        offset: the first offset found wrong, when the check is about one.
        topic, partition, start, end: as :class:`DataLossError`; ``[start, end)`` is
            the BLOB's registered offset range.
    """

    def __init__(
        self,
        message: str,
        *,
        blob_id: int | None,
        path: str,
        reason: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        offset: int | None = None,
    ) -> None:
        named = f"BLOB {blob_id} ({path})" if blob_id is not None else f"BLOB {path}"
        super().__init__(
            f"{named} fails its integrity check ({reason}): {message}",
            topic=topic,
            partition=partition,
            start=start,
            end=end,
            available_from=None,
        )
        self.blob_id = blob_id
        self.path = path
        self.reason = reason
        self.offset = offset


class BlobPathError(BlobIntegrityError):
    """A catalog row names a file that is not the sweeper's BLOB, so it is neither
    read nor deleted: a catalog row can name any path, and a reader once hashed
    ``/dev/zero`` for ever and the sweeper deleted files it had not written.

    Nothing was read from the file (a reader fails as on any damaged BLOB: it stops
    there and commits nothing past it), and the sweeper leaves the file and the row
    as they are.

    Attributes:
        blob_dir: the BLOB directory the path was checked against (``None``: the
            catalog records none yet, so only the kind of file was checked).
        reason: ``"outside"`` (the path, symbolic links resolved, is not inside
            ``blob_dir``), ``"not-a-file"`` (a symbolic link, a device, a FIFO, a
            folder: never opened through), or ``"name"`` (inside ``blob_dir`` but not
            the name the sweeper gives that BLOB's file: not deleted).
        blob_id, path, topic, partition, start, end: as :class:`BlobIntegrityError`
            (``blob_id`` ``None`` for a sweep in progress, not registered).
    """

    def __init__(
        self,
        message: str,
        *,
        blob_id: int | None,
        path: str,
        blob_dir: str | None,
        reason: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
    ) -> None:
        super().__init__(
            message,
            blob_id=blob_id,
            path=path,
            reason=reason,
            topic=topic,
            partition=partition,
            start=start,
            end=end,
        )
        self.blob_dir = blob_dir


class SchemaRegistryError(FloodgateError, RuntimeError):
    """The Schema Registry of a stream with ``encoding = "confluent"`` could not be
    asked (refused connection, timeout, a server error). Not a fault of the tuple: a
    put that raises it sent nothing, and a query's task that raises it is retried
    rather than dead-lettering the tuple.

    Attributes:
        url: the registry's URL, its password (``basic.auth`` in the URL's userinfo)
            shown as ``***``, as in the message (:func:`pipeline.redaction.redact_text`).
    """

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(redact_text(message))
        self.url = redact_text(url)


class DeliveryError(FloodgateError, RuntimeError):
    """The broker did not acknowledge some produced tuples.

    Attributes:
        failed: ``(tuple, error_text)`` pairs of the tuples not acknowledged: the tuple
            as a dict, or as its raw ``(key, value)`` bytes when it cannot be decoded.
    """

    def __init__(self, message: str, *, failed: Sequence[tuple[object, str]]) -> None:
        super().__init__(message)
        self.failed = list(failed)


class QueryGroupError(FloodgateError, RuntimeError):
    """A query group failed to start, or one of its queries failed.

    Attributes:
        query_group: the query group's name.
        query: the failing query's name, when one can be named.
    """

    def __init__(self, message: str, *, query_group: str, query: str | None = None) -> None:
        where = f"query group {query_group!r}" + (f", query {query!r}" if query else "")
        super().__init__(f"{where}: {message}")
        self.query_group = query_group
        self.query = query


def compact_error(exc: BaseException, limit: int = 600) -> str:
    """An error's text without stack traces: ``Type: message``, one line.

    A Py4J error of the JVM (``Py4JJavaError``) or a PySpark error carrying one prints
    the whole Java stack; this keeps its first line and the Java exception with its
    ``Caused by`` lines, joined with `` | ``, drops ``at ...`` and ``... N more`` lines,
    and is at most ``limit`` characters (the end cut to ``...``): a message and a
    metric label, not a log.
    """
    kept = []
    for raw in str(exc).splitlines():
        line = raw.strip()
        if (
            not line
            or line.startswith("at ")
            or (line.startswith("...") and line.endswith("more"))
            or line == "JVM stacktrace:"
        ):
            continue
        kept.append(line.removeprefix(": "))
    text = f"{type(exc).__name__}: " + " | ".join(kept)
    text = text.replace("py4j.protocol.Py4JJavaError:", "Py4JJavaError:")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def java_causes(exc: BaseException) -> list[str]:
    """The ``Caused by:`` lines of the Java exception behind a PySpark error, outermost
    first, without the ``Caused by:`` prefix; ``[]`` for any other error.

    PySpark prints a JVM error's causes only when ``spark.sql.pyspark.jvmStacktrace.enabled``
    is set, and a streaming query's error (``StreamingQuery.exception()``) names only the
    outermost one: a state store's failed commit reads ``CANNOT_WRITE_STATE_STORE`` with
    the file system's ``No space left on device`` a cause below. PySpark's captured
    exception keeps the whole Java stack (``Utils.exceptionString``) in ``_stackTrace``
    and the converted cause in ``_cause``; this reads both, and nothing if a PySpark
    release renames them.
    """
    causes: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        stack = getattr(current, "_stackTrace", None)
        lines = [raw.strip() for raw in stack.splitlines()] if isinstance(stack, str) else []
        for n, line in enumerate(lines):
            # A converted cause's stack starts with the cause itself.
            if line.startswith("Caused by:") or (n == 0 and current is not exc):
                cause_line = line.removeprefix("Caused by:").strip()
                if cause_line and cause_line not in causes:
                    causes.append(cause_line)
        cause = getattr(current, "_cause", None)
        current = cause if isinstance(cause, BaseException) else None
    return causes


class QueryGroupHeld(QueryGroupError):
    """A micro-batch's output did not fit in an output stream queue, after every sleep:
    the query group is HELD (the output stream queue overflow rule of the stream data
    platform Floodgate follows; message code ``FG-QG-002``).

    Made by the query group from its query's failure: a write task of the JVM sink gave
    up (``OutputQueueFullException``) having sent nothing, so Spark terminates the query
    without committing the batch: it is replayed from Spark's offset log on release, and
    its tasks that had committed skip their rows.

    Attributes:
        stream: the output stream that had no room.
        batch_id: the micro-batch held back.
        required: output queue space the batch needs (tuples, transaction markers
            included).
        free: free queue size at the last check (tuples).
        max_queue_size: the output stream queue's max queue size (tuples).
        sleeps: how many times the query slept before the hold.
    """

    def __init__(
        self,
        *,
        query_group: str,
        query: str | None,
        stream: str,
        batch_id: int,
        required: int,
        free: int,
        max_queue_size: int,
        sleeps: int,
    ) -> None:
        used = max_queue_size - free
        super().__init__(
            f"FG-QG-002 held: micro-batch {batch_id} needs {required} tuples of room in "
            f"output stream {stream!r}, which has {free} free ({used} of {max_queue_size} in "
            f"use, {used / max_queue_size:.0%} full) after {sleeps} sleeps; release with "
            f"`floodgate query-group release {query_group}` once its readers have caught up",
            query_group=query_group,
            query=query,
        )
        self.stream = stream
        self.batch_id = batch_id
        self.required = required
        self.free = free
        self.max_queue_size = max_queue_size
        self.sleeps = sleeps


class BatchInterrupted(QueryGroupError):
    """A micro-batch was abandoned, unwritten and uncommitted, because its query group
    was held or stopped meanwhile; Spark replays it when the group starts again.

    Attributes:
        batch_id: the abandoned micro-batch.
    """

    def __init__(self, *, query_group: str, query: str | None, batch_id: int) -> None:
        super().__init__(
            f"micro-batch {batch_id} abandoned unwritten: the query group is held or "
            "stopping; it is replayed when the group starts again",
            query_group=query_group,
            query=query,
        )
        self.batch_id = batch_id


class OversizedBatchError(QueryGroupError):
    """A micro-batch's output is larger than the whole output stream queue: it can never
    fit, so the query fails at once rather than sleeping and holding forever
    (message code ``FG-QG-005``).

    Attributes:
        stream: the output stream.
        required: output queue space the batch needs (tuples, markers included).
        max_queue_size: the output stream queue's max queue size (tuples).
    """

    def __init__(
        self,
        *,
        query_group: str,
        query: str | None,
        stream: str,
        batch_id: int,
        required: int,
        max_queue_size: int,
    ) -> None:
        super().__init__(
            f"FG-QG-005 micro-batch {batch_id} writes {required} tuples to output stream "
            f"{stream!r}, more than its whole queue (max_queue_size = {max_queue_size}): raise "
            f"output_streams.{stream}.max_queue_size, or lower max_tuples_per_trigger of the "
            f"query's input streams so each micro-batch writes less",
            query_group=query_group,
            query=query,
        )
        self.stream = stream
        self.batch_id = batch_id
        self.required = required
        self.max_queue_size = max_queue_size


#: What a full disk makes the JVM and Python say: ``strerror(ENOSPC)`` on Linux, in
#: Java's ``IOException`` (wrapped in Hadoop's ``FSError`` for a local file) as in
#: Python's ``OSError``.
NO_SPACE = "No space left on device"


class CheckpointDiskFullError(QueryGroupError):
    """A query failed on a full disk (``ENOSPC``) while writing its checkpoint (the
    offset or commit log, a state store's files) or Spark's local files (message
    code ``FG-QG-010``).

    Spark writes every checkpoint file to a temporary name and renames it whole into
    place (``CheckpointFileManager.createAtomic``), and a micro-batch counts as done
    only once its commit-log entry is in place; so nothing the failed write left is
    taken as done, and the group started again on the same checkpoint, with room on
    the disk, replays the batch (the sink's tasks skip output they had already
    committed).

    Attributes:
        checkpoint: the query's checkpoint location.
        free_bytes: bytes free for the driver's user on that location's file system
            when the failure was read (``statvfs``); ``None`` when the location is not
            a local path.

    The message ends with ``cause``: the query's own error or Spark's, in one line
    (:func:`compact_error`).
    """

    def __init__(
        self,
        *,
        query_group: str,
        query: str | None,
        checkpoint: str,
        free_bytes: int | None,
        cause: str,
    ) -> None:
        if free_bytes is None:
            free = "free bytes unknown (not a local path)"
        else:
            free = f"{free_bytes} bytes free there"
        super().__init__(
            f"FG-QG-010 no space left on device: checkpoint {checkpoint} ({free}); "
            "the batch is not committed and is replayed on restart. Free space on that "
            "disk (or on Spark's local directory, spark.local.dir, if the checkpoint's has "
            f"room) and start the group again on the same checkpoint. Cause: {cause}",
            query_group=query_group,
            query=query,
        )
        self.checkpoint = checkpoint
        self.free_bytes = free_bytes


class QueueFullError(FloodgateError, queue.Full):
    """A put does not fit in the free space of the stream queue; nothing of it was sent.

    The stream data platform's ``SDPClientFreeInputQueueSizeLackException``.

    Attributes:
        stream: the stream.
        requested: tuples in the refused put.
        free: free queue size when it was refused (tuples).
        max_queue_size: the queue's max queue size (tuples).
        length: queue length when it was refused (tuples), when known.
    """

    def __init__(
        self,
        *,
        stream: str,
        requested: int,
        free: int,
        max_queue_size: int,
        length: int | None = None,
        waited_s: float = 0.0,
    ) -> None:
        used = max_queue_size - free
        text = (
            f"stream {stream!r}: queue full: a put of {requested} tuples does not fit in "
            f"{free} free; {used} of {max_queue_size} tuples in use "
            f"({used / max_queue_size:.0%} full)"
        )
        if requested > max_queue_size:
            text += "; the put is larger than the whole queue: split it or raise max_queue_size"
        if waited_s:
            text += f"; waited {waited_s:.1f} s"
        super().__init__(text)
        self.stream = stream
        self.requested = requested
        self.free = free
        self.max_queue_size = max_queue_size
        self.length = length


class QueueThresholdExceeded(FloodgateError):
    """The put *was accepted*, and the free space is now at or below the threshold.

    Raised after the tuples were handed to the broker, only with
    ``raise_on_threshold=True`` (the stream data platform's
    ``SDPClientFreeInputQueueSizeThresholdOverException``): the producer should
    slow down or wait for :meth:`~pipeline.client.input.StreamInput.free_queue_size`.

    Attributes:
        result: the :class:`~pipeline.client.input.PutResult` of the accepted put.
    """

    def __init__(self, message: str, *, result: object) -> None:
        super().__init__(message)
        self.result = result
