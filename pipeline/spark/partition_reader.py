"""Reading the planned ranges of a micro-batch's topic-partitions, in a Spark task.

A micro-batch's planned range ``[start, end)`` of each topic-partition it reads (the
source reads one or more topics) is dealt out to Spark tasks as
:class:`KafkaInputPartition` ranges, grouped per task in a
:class:`KafkaTaskPartition`; a task reads its ranges with a :class:`PartitionReader`,
which may read ranges of several topics one after the other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    StructType,
)

from pipeline.deadletter import (
    DeadLetterWriter,
)
from pipeline.errors import DeserializationError
from pipeline.serde.block import BlockDecoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import ConfluentKey
from pipeline.serde.confluent_block import block_decoder
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SourceOptions
from pipeline.spark.refusals import RefusalRules
from pipeline.spark.schema import kafka_columns
from pipeline.swept.catalog import catalog_for
from pipeline.swept.reading import RANGE_CONSUMER, BlobReader, read_partition

log = logging.getLogger(__name__)


#: Rows per Arrow record batch yielded by :meth:`KafkaStreamReader.read`.
ARROW_BATCH_ROWS = 8192


#: A partition read that makes no progress for this long fails the task.
READ_STALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task's share of a micro-batch: ``[start, end)`` of one Kafka
    topic-partition."""

    topic: str
    partition: int
    start: int
    end: int
    watermark_ms: int | None = None
    """The watermark for the micro-batch's late tuples (epoch ms; ``None``: no
    lateness check, :func:`batch_watermark`)."""
    batch_id: int | None = None


@dataclass(frozen=True)
class KafkaTaskPartition(InputPartition):
    """One Spark task of a micro-batch: topic-partition ranges read one after the other.

    Spark pays for every task of a Python data source (a worker round trip, the
    reader shipped and set up: ~0.1-0.2 s a task on the 2-core development machine,
    more than decoding 15 000 flights), so a micro-batch is read with at most
    ``maxTasks`` tasks, not one per Kafka partition (``bench/README.md``, issue 9).
    """

    ranges: tuple[KafkaInputPartition, ...]

    @property
    def tuples(self) -> int:
        """Offsets spanned by the ranges (an upper bound of the tuples)."""
        return sum(r.end - r.start for r in self.ranges)


class PartitionReader:
    """Reads the :class:`KafkaInputPartition` ranges of one task in a Python worker.

    Records come from the broker, or from the swept BLOBs where the sweeper moved
    them; they are decoded 8 192 at a time as one Avro block
    (:class:`~pipeline.serde.block.BlockDecoder`; in the Confluent wire format one block
    per schema id, :class:`~pipeline.serde.confluent_block.ConfluentBlockDecoder`), tuple
    by tuple when the block cannot be vouched for, into Arrow record batches of the
    stream's columns and the metadata columns, with codecs of the range's topic (in the
    Confluent wire format a topic's subjects are its own). A tuple that does not decode,
    or that a
    :class:`~pipeline.spark.refusals.RefusalRules` rule refuses, goes to the
    dead-letter topic (:class:`~pipeline.deadletter.DeadLetterWriter`) when the task's
    ranges are read.

    Args:
        options: the source's options.
        schema: the source's Spark schema (:func:`~pipeline.spark.schema.spark_schema`).
    """

    #: The range being read (set by :meth:`batches`).
    partition: KafkaInputPartition

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self.options = options
        #: The codecs of the range being read (:meth:`_use_codecs_of`): the tuples'
        #: codec, its block decoder, and the key codec of ``keyEncoding = confluent``.
        self.codec: StreamCodec | None = None
        self._decoder: BlockDecoder | None = None
        self.key_codec: ConfluentKey | None = None
        self._codecs: dict[
            str, tuple[StreamCodec | None, BlockDecoder | None, ConfluentKey | None]
        ] = {}
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        # Timestamps arrive as epoch milliseconds and dates as epoch days (logical types
        # stripped for speed): build with those, then cast the few columns concerned.
        self._raw_schema = pa.schema(
            [
                pa.field(f.name, pa.int64(), f.nullable)
                if pa.types.is_timestamp(f.type)
                else pa.field(f.name, pa.int32(), f.nullable)
                if pa.types.is_date32(f.type)
                else f
                for f in self.arrow_schema
            ]
        )
        self.fields = (
            SchemaRepository.from_json(options.schemas_json or "{}")
            .get(options.schema_name)
            .field_names
            if options.schema_name is not None
            else []
        )
        #: Spark's Kafka columns in the schema (those no field of the stream takes).
        self._kafka_names = [
            f.name
            for f in kafka_columns(include_headers=True)
            if f.name in schema.names and f.name not in self.fields
        ]
        self._pa = pa
        self.rules = RefusalRules(options)
        self.dead = DeadLetterWriter(
            options.dead_letter_topic,
            bootstrap_servers=options.bootstrap_servers,
            stream=options.stream,
            query=options.query,
            client=options.client,
        )
        self._blobs: BlobReader | None = None

    def _use_codecs_of(self, topic: str) -> None:
        """Decode with the codecs of ``topic``'s tuples from now on (made on first use:
        :meth:`SourceOptions.codec`, :meth:`SourceOptions.confluent_key`)."""
        made = self._codecs.get(topic)
        if made is None:
            codec = self.options.codec(topic) if self.options.decoded else None
            made = self._codecs[topic] = (
                codec,
                block_decoder(codec) if codec is not None else None,
                # keyEncoding = confluent: the key codec that fills the ``key`` column.
                self.options.confluent_key(topic) if "key" in self._kafka_names else None,
            )
        self.codec, self._decoder, self.key_codec = made

    def batches(self, ranges: Sequence[KafkaInputPartition]) -> Iterator[Any]:
        """Arrow record batches of ``ranges``, in order, through one consumer; the
        dead letters of all of them are sent at the end, and logged as one
        ``FG-SOURCE-001`` line per reason for the task.

        Raises:
            DataLossError: an offset neither the broker nor a BLOB holds.
            KafkaException: the dead letters were not acknowledged.
        """
        consumer = Consumer(
            # A user's kafka.* properties win over the range reader's.
            self.options.consumer_config(**{**RANGE_CONSUMER, **self.options.client})
        )
        try:
            for part in ranges:
                if not self.options.fail_on_data_loss:
                    part = self._past_lost(consumer, part)
                self.partition = part
                self._use_codecs_of(part.topic)
                pending: list[Any] = []
                for fetched in self._records(consumer):
                    pending.extend(fetched)
                    while len(pending) >= ARROW_BATCH_ROWS:
                        chunk, pending = pending[:ARROW_BATCH_ROWS], pending[ARROW_BATCH_ROWS:]
                        yield from self._convert(chunk)
                if pending:
                    yield from self._convert(pending)
        finally:
            consumer.close()
        self.dead.send(batch_id=ranges[0].batch_id if ranges else None)

    def _past_lost(self, consumer: Consumer, part: KafkaInputPartition) -> KafkaInputPartition:
        """``part`` from the broker's low watermark on when it starts below it: with
        ``failOnDataLoss = false`` offsets the broker no longer holds (retention,
        ``delete_records``) are skipped with a ``FG-SOURCE-004`` warning, as Spark's
        Kafka source skips them with a warning."""
        low, _ = consumer.get_watermark_offsets(
            TopicPartition(part.topic, part.partition), timeout=30
        )
        if part.start >= low:
            return part
        log.warning(
            "FG-SOURCE-004 source %s: offsets [%d, %d) of %s[%d] are no longer on the "
            "broker and are skipped (failOnDataLoss = false)",
            self.options.stream,
            part.start,
            min(low, part.end),
            part.topic,
            part.partition,
        )
        return replace(part, start=min(low, part.end))

    def _convert(self, messages: list[Any]) -> Iterator[Any]:
        """One Arrow record batch of ``messages`` (none if every one was refused).

        The block decoder decodes them all at once; when it cannot vouch for the
        block (a malformed tuple, an older writer schema), they are decoded one by
        one, which dead-letters exactly the bad ones.
        """
        if self._decoder is None:  # raw Kafka columns: nothing to decode
            batch = self._columns(None, messages)
            if batch.num_rows:
                yield batch
            return
        values = [m.value() for m in messages]
        table = self._decoder.decode(values)
        if table is not None:
            batch = self._columns(table, messages, values)
            if batch.num_rows:
                yield batch
            return
        dead_before = len(self.dead.pending)
        rows: list[dict[str, Any]] = []
        kept: list[Any] = []
        for message in messages:
            row = self._decode(message)
            if row is not None:
                rows.append(row)
                kept.append(message)
        if len(self.dead.pending) == dead_before and self._decoder.enabled:
            # Every tuple decoded alone, so the block reader is what failed: a type it
            # reads differently. Leave it off for the rest of this range.
            log.info(
                "stream %r: block decoding is off for %s[%d]; decoding tuple by tuple",
                self.options.stream,
                self.partition.topic,
                self.partition.partition,
            )
            self._decoder.enabled = False
        if rows:
            yield self._to_arrow_or_dead_letter(rows, kept)

    def _columns(self, table: Any, messages: list[Any], values: list[Any] | None = None) -> Any:
        """The source's record batch from a block-decoded ``table`` of ``messages``
        (``None``: nothing decoded): the stream's columns, then the metadata columns;
        tuples the source refuses (:meth:`_refusal`) are dead-lettered and left out.
        ``values``: the messages' values, when the caller has them already."""
        pa = self._pa
        import pyarrow.compute as pc

        keys = [m.key() for m in messages]
        timestamps = [
            ts if kind != 0 and ts >= 0 else None for kind, ts in (m.timestamp() for m in messages)
        ]
        timestamp_col = pa.array(timestamps, pa.int64())
        options = self.options
        if options.timestamp_mode == "data_source" and table is not None:
            field = options.timestamp_field or ""
            event_col = (
                pc.cast(table.column(field).combine_chunks(), pa.int64())
                if field in table.column_names
                else pa.nulls(len(messages), pa.int64())
            )
        else:
            event_col = timestamp_col
        # Rows that may be refused, found by column; each is then judged on its own,
        # after its key (keyEncoding = confluent), in order, as _decode judges them.
        watermark = self.partition.watermark_ms
        suspects = self.rules.suspects(
            pa.array(keys, pa.binary()), timestamp_col, event_col, watermark
        )
        decoded_keys, bad_keys = self._decode_keys(messages, keys)
        judged = set(bad_keys)
        if suspects is not None:
            judged.update(pc.indices_nonzero(pc.fill_null(suspects, False)).to_pylist())
        refused: list[int] = []
        for index in sorted(judged):
            message = messages[index]
            if index in bad_keys:
                self.dead.add(message, bad_keys[index])
                refused.append(index)
                continue
            error = self.rules.refusal(
                message,
                keys[index],
                timestamps[index],
                event_col[index].as_py(),
                watermark_ms=watermark,
                batch_id=self.partition.batch_id,
            )
            if error is not None:
                self.dead.add(message, error)
                refused.append(index)
        named = {name: table.column(name).combine_chunks() for name in self.fields}
        key_col = pa.array(keys, pa.binary())
        key_type = self._raw_schema.field("key").type if "key" in self._kafka_names else None
        partition_col = pa.array(np.full(len(messages), self.partition.partition, dtype=np.int32))
        offset_col = pa.array([m.offset() for m in messages], pa.int64())
        named |= {
            "event_time": event_col,
            "_key": key_col,
            "_partition": partition_col,
            "_offset": offset_col,
            "_timestamp": timestamp_col,
        }
        kafka = {
            "key": lambda: key_col if decoded_keys is None else pa.array(decoded_keys, key_type),
            "value": lambda: binary_array(
                values if values is not None else [m.value() for m in messages]
            ),
            "topic": lambda: pa.repeat(pa.scalar(self.partition.topic, pa.string()), len(messages)),
            "partition": lambda: partition_col,
            "offset": lambda: offset_col,
            "timestamp": lambda: timestamp_col,
            # confluent-kafka's kinds (0 none, 1 CreateTime, 2 LogAppendTime) less one are
            # Kafka's own ids, which Spark's column holds (-1 none).
            "timestampType": lambda: pc.subtract(
                pa.array([m.timestamp()[0] for m in messages], pa.int32()), 1
            ),
            "headers": lambda: pa.array([_headers(m) for m in messages]),
        }
        named |= {name: kafka[name]() for name in self._kafka_names}
        batch = self._cast([named[f.name].cast(f.type) for f in self._raw_schema])
        if refused:
            keep = np.ones(len(messages), dtype=bool)
            keep[refused] = False
            batch = batch.filter(pa.array(keep))
        return batch

    def _decode_keys(
        self, messages: list[Any], keys: list[bytes | None]
    ) -> tuple[list[dict[str, Any] | None] | None, dict[int, DeserializationError]]:
        """The ``key`` column's values of ``keyEncoding = confluent``: ``(decoded keys,
        {index: error} of the keys that do not decode)``; a missing key is ``None``
        (the ``null-key`` rule judges it). ``(None, {})`` for raw keys."""
        if self.key_codec is None:
            return None, {}
        decoded: list[dict[str, Any] | None] = []
        bad: dict[int, DeserializationError] = {}
        for index, key in enumerate(keys):
            if key is None:
                decoded.append(None)
                continue
            try:
                decoded.append(self.key_codec.decode(key))
            except DeserializationError as exc:
                message = messages[index]
                bad[index] = exc.at(
                    topic=message.topic(), partition=message.partition(), offset=message.offset()
                )
                decoded.append(None)
        return decoded, bad

    def _records(self, consumer: Consumer) -> Iterator[list[Any]]:
        """The records of ``[start, end)`` in offset order, batch by batch: from the
        broker while it holds them, from the BLOB chain where the sweeper moved them
        (unsweep; :func:`pipeline.swept.reading.read_partition`).

        Raises:
            DataLossError: an offset neither the broker nor a BLOB holds.
        """
        part = self.partition
        if self.options.sweep_catalog and self._blobs is None:
            self._blobs = BlobReader(catalog_for(self.options.sweep_catalog))
        return read_partition(
            consumer,
            part.topic,
            part.partition,
            part.start,
            part.end,
            blobs=self._blobs,
            stall_timeout_s=READ_STALL_TIMEOUT_S,
        )

    def _decode(self, message: Any) -> dict[str, Any] | None:
        assert self.codec is not None
        value = message.value()
        try:
            row = self.codec.decode(value if value is not None else b"", logical=False)
        except DeserializationError as exc:
            self.dead.add(
                message,
                exc.at(
                    topic=message.topic(), partition=message.partition(), offset=message.offset()
                ),
            )
            return None
        ts_type, ts = message.timestamp()
        key = message.key()
        decoded_keys, bad_keys = self._decode_keys([message], [key])
        if bad_keys:
            self.dead.add(message, bad_keys[0])
            return None
        row["_key"] = key
        row["_partition"] = message.partition()
        row["_offset"] = message.offset()
        timestamp = row["_timestamp"] = ts if ts_type != 0 and ts >= 0 else None
        kafka = {
            "key": key if decoded_keys is None else decoded_keys[0],
            "value": value,
            "topic": message.topic(),
            "partition": message.partition(),
            "offset": message.offset(),
            "timestamp": timestamp,
            "timestampType": ts_type - 1,
        }
        for name in self._kafka_names:
            row[name] = _headers(message) if name == "headers" else kafka[name]
        if self.options.timestamp_mode == "data_source":
            event_time = row["event_time"] = row.get(self.options.timestamp_field or "")
        else:
            event_time = row["event_time"] = timestamp
        error = self.rules.refusal(
            message,
            key,
            timestamp,
            event_time,
            watermark_ms=self.partition.watermark_ms,
            batch_id=self.partition.batch_id,
        )
        if error is not None:
            self.dead.add(message, error)
            return None
        return row

    def _to_arrow_or_dead_letter(self, rows: list[dict[str, Any]], messages: list[Any]) -> Any:
        """Arrow batch of ``rows``; a row whose values Arrow cannot hold (an Avro ``int``
        beyond 32 bits written by a careless producer, say) is dead-lettered with reason
        ``bad-value`` instead of failing every retry of the batch."""
        pa = self._pa
        try:
            return self._to_arrow(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            kept = []
            for row, message in zip(rows, messages, strict=True):
                try:
                    self._to_arrow([row])
                    kept.append(row)
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    self.dead.add(
                        message,
                        DeserializationError(
                            f"a value does not fit its column: {exc}",
                            reason="bad-value",
                            stream=self.options.stream,
                            topic=message.topic(),
                            partition=message.partition(),
                            offset=message.offset(),
                        ),
                    )
            return self._to_arrow(kept)

    def _to_arrow(self, rows: list[dict[str, Any]]) -> Any:
        # from_pylist transposes in C++: ~2.3x faster than a list per column here.
        return self._cast(self._pa.RecordBatch.from_pylist(rows, schema=self._raw_schema).columns)

    def _cast(self, raw_columns: Sequence[Any]) -> Any:
        """The record batch of :func:`spark_schema` from columns of the raw schema
        (timestamps as epoch-ms longs, dates as epoch-day ints)."""
        pa = self._pa
        columns = []
        for field, column in zip(self.arrow_schema, raw_columns, strict=True):
            if pa.types.is_timestamp(field.type):
                # epoch milliseconds -> the microsecond timestamps Spark expects
                column = column.cast(pa.timestamp("ms", tz="UTC")).cast(field.type)
            elif pa.types.is_date32(field.type):
                column = column.cast(field.type)
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)


def _headers(message: Any) -> list[dict[str, Any]] | None:
    """A record's headers as Spark's ``headers`` column holds them: a list of
    ``{key, value}`` in order, ``None`` for a record without headers (as Spark's
    ``KafkaRecordToRowConverter``)."""
    headers = message.headers()
    if not headers:
        return None
    return [{"key": k, "value": v} for k, v in headers]


def binary_array(values: list[bytes | None]) -> Any:
    """``values`` as an Arrow binary array, built from one joined buffer and its offsets
    when none is ``None`` (4x faster than ``pa.array(values, pa.binary())`` for 8 192
    flights); ``pa.array`` otherwise, and past 2 GiB of bytes, where 32-bit offsets end."""
    import pyarrow as pa

    if None in values:
        return pa.array(values, pa.binary())
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    lengths = np.fromiter((len(v) for v in values if v is not None), np.int64, len(values))
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        return pa.array(values, pa.binary())
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(values))]  # type: ignore[arg-type]
    return pa.Array.from_buffers(pa.binary(), len(values), buffers)
