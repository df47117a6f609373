"""Whole micro-batches of a Confluent-framed stream at once: the block decoder.

A stream with ``encoding = "confluent"`` names each tuple's writer schema by a Schema
Registry id (:mod:`pipeline.serde.confluent`). :class:`ConfluentBlockDecoder` groups
the tuples of a micro-batch by that id and decodes each group's Avro bodies as one
container block (:meth:`pipeline.serde.block.BlockDecoder.decode_bodies`), then puts
the rows back in the tuples' order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastavro.schema import parse_schema, to_parsing_canonical_form

from pipeline.serde.block import BlockDecoder
from pipeline.serde.codec import StreamCodec
from pipeline.serde.confluent import ConfluentCodec

#: Bytes of Confluent's framing before the body: the magic byte 0 and the schema id
#: (4 bytes, big-endian), as confluent-kafka's ``SchemaId`` writes them for
#: ``_MAGIC_BYTE_V0`` (and the JVM source's ``ConfluentDecoder.FRAMING_SIZE``).
FRAMING_SIZE = 5


def block_decoder(codec: StreamCodec) -> BlockDecoder:
    """The block decoder of a stream's encoding.

    Returns:
        A :class:`ConfluentBlockDecoder` for a :class:`~pipeline.serde.confluent.ConfluentCodec`,
        else a :class:`~pipeline.serde.block.BlockDecoder` (single-object encoding).
    """
    if isinstance(codec, ConfluentCodec):
        return ConfluentBlockDecoder(codec)
    return BlockDecoder(codec)


class ConfluentBlockDecoder(BlockDecoder):
    """Decode many Confluent-framed tuples of one stream at once, into Arrow columns.

    The per-tuple path (:meth:`ConfluentCodec.decode`, confluent-kafka's
    ``AvroDeserializer``) builds a Python dict per tuple and resolves it to the stream's
    schema. Here the tuples are grouped by the schema id of their framing; each group
    whose writer schema *encodes as the stream's schema does* -- the same Parsing
    Canonical Form (Avro specification, "Parsing Canonical Form for Schemas": two
    schemas with the same form read the same bytes the same way) and the same logical
    types -- is decoded as one container block by the single-object block decoder's
    reader (bodies end to end, a check field after each), and the groups' rows are put
    back in the tuples' order. A registry that registered the stream's schema twice
    (a new version that changed a ``doc``, another subject) gives two such ids.

    The answer is ``None`` -- decode the micro-batch tuple by tuple, which names each
    bad tuple (``bad-magic-byte``, ``unknown-schema-id``, ``bad-body``) for the
    dead-letter topic, and raises :class:`~pipeline.errors.SchemaRegistryError` for an
    outage -- when any tuple is not framed with magic byte 0 and a body, when the
    registry does not give the schema of an id (unknown, or not asked: an outage is
    then met again by the per-tuple path), when a writer schema differs from the
    stream's (an older schema: Avro's resolution is the per-tuple path's), or when a
    group's block is not vouched for. So the rows, their order and the dead letters are
    those of the per-tuple path, as the single-object :class:`BlockDecoder` guarantees
    (with its one leniency, a union branch index polars reads as ``T``).

    Args:
        codec: the stream's Confluent codec (its registry client and reader schema).
    """

    def __init__(self, codec: ConfluentCodec) -> None:
        super().__init__(codec)
        self.codec: ConfluentCodec = codec
        self.enabled = True
        self._form = _encoding_form(codec.schema.schema)
        #: Schema id -> whether its writer schema encodes as the stream's (only ids the
        #: registry answered for; "not found" is never cached, as confluent-kafka's client).
        self._same: dict[int, bool] = {}

    def decode(self, values: Sequence[bytes | None]) -> Any | None:
        """Decode ``values`` (Confluent-framed tuples) into one Arrow table.

        Args:
            values: the tuples' bytes, e.g. Kafka record values.

        Returns:
            A ``pyarrow.Table`` with one row per value, in order, the schema's fields as
            columns, logical types stripped (``timestamp-millis`` as int64 epoch ms,
            ``date`` as int32 epoch days); or ``None`` (see the class): decode tuple by
            tuple then.
        """
        if not self.enabled or not values:
            return None
        groups: dict[bytes, tuple[list[int], list[bytes]]] = {}
        for index, value in enumerate(values):
            if value is None or len(value) <= FRAMING_SIZE or value[0] != 0:
                return None
            group = groups.get(value[1:FRAMING_SIZE])
            if group is None:
                group = groups[value[1:FRAMING_SIZE]] = ([], [])
            group[0].append(index)
            group[1].append(value[FRAMING_SIZE:])
        tables = []
        for framed_id, (_, bodies) in groups.items():
            if not self._encodes_as_stream(int.from_bytes(framed_id, "big")):
                return None
            table = self.decode_bodies(bodies)
            if table is None:
                return None
            tables.append(table)
        if len(tables) == 1:
            return tables[0]
        import numpy as np
        import pyarrow as pa

        # Row j of the concatenation is the tuple at order[j]; take puts each back.
        order = np.concatenate([np.asarray(indices) for indices, _ in groups.values()])
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return pa.concat_tables(tables).take(pa.array(inverse)).combine_chunks()

    def _encodes_as_stream(self, schema_id: int) -> bool:
        """Whether the registry's schema of ``schema_id`` encodes as the stream's schema;
        ``False`` when the registry does not answer with one (not cached then)."""
        known = self._same.get(schema_id)
        if known is not None:
            return known
        try:
            registered = self.codec.client.get_schema(schema_id)
            form = _encoding_form(json.loads(registered.schema_str or "null"))
        except Exception:  # unknown id, an outage, not Avro: the per-tuple path names it
            return False
        same = self._same[schema_id] = form == self._form
        return same


def _encoding_form(schema: Any) -> tuple[str, list[str]]:
    """What decides how a schema reads bytes: its Parsing Canonical Form, and its logical
    types in order (the form drops them, but ``timestamp-micros`` and ``timestamp-millis``
    give different values from one ``long``).

    Raises:
        fastavro.schema.SchemaParseException, ValueError, TypeError: not an Avro schema.
    """
    return to_parsing_canonical_form(parse_schema(schema)), _logical_types(schema)


def _logical_types(schema: Any) -> list[str]:
    """The ``logicalType`` values of a schema's JSON, depth first in document order."""
    found: list[str] = []
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("logicalType"), str):
                found.append(node["logicalType"])
            stack.extend(reversed([v for k, v in node.items() if k != "logicalType"]))
        elif isinstance(node, list):
            stack.extend(reversed(node))
    return found
