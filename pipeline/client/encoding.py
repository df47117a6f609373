"""A put's tuples as the records of an input stream queue: checked, keyed, encoded.

:class:`TupleEncoder` takes what :meth:`~pipeline.client.input.StreamInput.put` is
given (a dict, a list of dicts, a ``pyarrow.Table``) and returns each tuple's Kafka key
and Avro value, or refuses the whole batch before anything of it is sent.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pipeline.config import QueryGroupConfig
from pipeline.errors import ConfigError, EventTimeError, NullKeyError, SchemaError
from pipeline.serde.block import BlockEncoder, epoch_millis
from pipeline.serde.codec import TupleKey, epoch_ms, field_kind
from pipeline.serde.schemas import SchemaRepository

#: A Kafka record of a tuple: its key (``None``: the stream is not keyed) and value.
Record = tuple[bytes | None, bytes]


def _epoch_ms(value: Any) -> int | None:
    """An event-time field of a normalised tuple (epoch ms, or a datetime where the
    field is no ``timestamp-millis``) as epoch ms, a naive datetime as UTC
    (:func:`~pipeline.serde.codec.epoch_ms`); ``None`` for anything else."""
    if isinstance(value, datetime):
        return epoch_ms(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _is_arrow_table(value: Any) -> bool:
    """Whether ``value`` is a ``pyarrow.Table`` or ``RecordBatch`` (a caller holding
    one has imported pyarrow; a list of dicts does not import it)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(value, pa.Table | pa.RecordBatch)


class TupleEncoder:
    """Encodes the tuples of one input stream's puts into Kafka records, all or nothing.

    Every tuple of a batch is checked before any record is returned: against the
    stream's schema (:meth:`~pipeline.serde.codec.StreamCodec.normalise`), for a value
    of each key field (a keyed stream), and for an event time at most
    ``max_event_time_ahead_ms`` ahead of now (``data_source`` timestamps). The key is
    the stream's :class:`~pipeline.serde.codec.TupleKey` (or the Schema Registry's,
    ``key_encoding = "confluent"``), the value its codec's encoding.

    Args:
        config: the query group.
        stream: the input stream's name (one the query group declares).
        schemas: the schema repository.

    Raises:
        ConfigError: the stream's ``key`` names a field its schema does not have.
    """

    def __init__(self, config: QueryGroupConfig, stream: str, schemas: SchemaRepository) -> None:
        self.stream = stream
        stream_config = config.input_streams[stream]
        #: Makes a tuple's Kafka key (bytes, or ``None`` for a stream without key fields).
        self.key = TupleKey(stream_config.key)
        self._confluent_key = stream_config.key_encoding == "confluent"
        self._event_field = (
            stream_config.timestamp_field if stream_config.timestamp_mode == "data_source" else None
        )
        self._max_ahead_ms = stream_config.max_event_time_ahead_ms
        #: The stream's codec: encodes a tuple's value, decodes one back.
        self.codec = config.stream_codec("input", stream, schemas)
        fields = self.codec.schema.field_names
        for name in self.key.fields:
            if name not in fields:  # checked at load too, against the file's schema_dir
                raise ConfigError(
                    f"input_streams.{stream}.key names {name!r}, which is no field of schema "
                    f"{stream_config.schema_!r}; its fields: {', '.join(fields)}",
                    key=f"input_streams.{stream}.key",
                    value=name,
                    allowed=", ".join(fields),
                )
        if self._confluent_key:  # after the check above names a key field it lacks
            self.key = config.input_key(stream, schemas)
        self._block_encoder = BlockEncoder(self.codec)

    def encode(self, tuples: Any) -> list[Record]:
        """The ``(key, value)`` record of every tuple of a put, in order.

        Args:
            tuples: one tuple (a dict), a list of them, or a ``pyarrow.Table`` (or
                ``RecordBatch``) whose columns are the stream's fields, a row a tuple.
                A table is encoded a column at a time
                (:class:`~pipeline.serde.block.BlockEncoder`) when its columns map
                exactly onto the schema, and row by row as dicts (``to_pylist``)
                otherwise: the same bytes, keys and errors either way.

        Returns:
            The records, keys and values as bytes; empty for an empty batch.

        Raises:
            SchemaError: a tuple does not match the schema (names its index and the
                field), or ``tuples`` is no dict, list or table (names its type).
            NullKeyError: a tuple has no value for a key field of a keyed stream.
            EventTimeError: a tuple's event time is more than
                ``max_event_time_ahead_ms`` ahead of now.
        """
        if _is_arrow_table(tuples):
            encoded = self._encode_table(tuples)
            if encoded is not None:
                return encoded
            tuples = tuples.to_pylist()
        if isinstance(tuples, Mapping):
            batch = [tuples]
        elif isinstance(tuples, Iterable) and not isinstance(tuples, str | bytes):
            batch = list(tuples)
        else:
            raise SchemaError(
                f"stream {self.stream!r}: put takes a dict (one tuple), a list of dicts or a "
                f"pyarrow Table, not {type(tuples).__name__}; nothing was sent",
                stream=self.stream,
            )
        normalise = self.codec.normalise
        for i, t in enumerate(batch):
            try:
                batch[i] = normalise(t)
            except SchemaError as exc:
                raise SchemaError(
                    f"tuple {i} of the batch: {exc}; nothing of the batch was sent",
                    stream=self.stream,
                    field=exc.field,
                ) from exc
        self._check_keys_and_event_times(batch)
        key, encode = self.key, self.codec.encode_normalised
        return [(key(t), encode(t)) for t in batch]

    def _encode_table(self, table: Any) -> list[Record] | None:
        """An Arrow table's tuples encoded a column at a time, or ``None`` when only
        the row-by-row path can encode them or name what is wrong with them: a column
        set or type the block encoder does not write, a null key field, an event time
        too far ahead, a key column whose text the row path writes otherwise."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._confluent_key:  # keys through the registry's serializer: row by row
            return None
        fields = self.key.fields
        names = set(table.column_names)
        if any(f not in names or table.column(f).null_count for f in fields):
            return None
        key_columns = []
        for f in fields:
            column = self._key_column(table.column(f), field_kind(self.codec.schema.schema, f))
            if column is None:
                return None
            key_columns.append(column)
        event = self._event_field
        if event is not None and event in names and table.num_rows:
            column = epoch_millis(table.column(event))
            if column is None:
                return None
            latest = pc.max(column).as_py()
            if latest is not None and latest > time.time() * 1000 + self._max_ahead_ms:
                return None
        values = self._block_encoder.encode(table)
        if values is None:
            return None
        if not fields:
            return [(None, v) for v in values]
        texts = [pc.cast(c, pa.string()) for c in key_columns]
        joined = texts[0] if len(texts) == 1 else pc.binary_join_element_wise(*texts, "|")
        keys = pc.cast(joined, pa.binary()).to_pylist()
        return list(zip(keys, values, strict=True))

    @staticmethod
    def _key_column(column: Any, kind: str | None) -> Any | None:
        """A key column as the row path keys it (:class:`~pipeline.serde.codec.TupleKey` of
        normalised tuples): an integer column of an ``int``/``long`` field, a string
        column of a ``string`` field, a ``timestamp-millis`` field's column as epoch ms;
        ``None`` for anything else (row by row)."""
        import pyarrow as pa

        if kind in ("int", "long") and pa.types.is_integer(column.type):
            return column
        if kind == "string" and pa.types.is_string(column.type):
            return column
        if kind == "timestamp-millis":
            return epoch_millis(column)
        return None

    def _check_keys_and_event_times(self, batch: Sequence[Any]) -> None:
        """Refuse a tuple with no value for a key field of a keyed stream, or with an
        event time more than ``max_event_time_ahead_ms`` ahead of now (``data_source``
        timestamps).

        Raises:
            NullKeyError: names the tuple's index and the key field.
            EventTimeError: names the tuple's index, its event time and the limit.
        """
        fields, event = self.key.fields, self._event_field
        if not fields and event is None:
            return
        limit_ms = time.time() * 1000 + self._max_ahead_ms
        for i, t in enumerate(batch):
            for name in fields:
                if t.get(name) is None:
                    raise NullKeyError(
                        f"stream {self.stream!r}: tuple {i} of the batch has no value for key "
                        f"field {name!r} (the stream is keyed by {fields}); nothing of the "
                        "batch was sent",
                        stream=self.stream,
                        index=i,
                        field=name,
                    )
            if event is not None:
                ms = _epoch_ms(t.get(event))
                if ms is not None and ms > limit_ms:
                    ahead_s = (ms - time.time() * 1000) / 1000
                    raise EventTimeError(
                        f"stream {self.stream!r}: tuple {i} of the batch has event time "
                        f"{event} = {datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()}, "
                        f"{ahead_s:,.0f} s ahead of now; at most "
                        f"{self._max_ahead_ms / 1000:,.0f} s is accepted "
                        "(input_streams.<stream>.max_event_time_ahead_ms); nothing of the "
                        "batch was sent",
                        stream=self.stream,
                        index=i,
                        field=event,
                        event_time_ms=int(ms),
                        limit_ms=self._max_ahead_ms,
                    )
