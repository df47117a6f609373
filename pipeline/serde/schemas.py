"""The local schema registry: Avro schemas by name and fingerprint, single-object encoding.

A tuple on an input or output stream queue is an Avro record in Avro's single-object
encoding: the two marker bytes ``C3 01``, the schema's 8-byte CRC-64-AVRO fingerprint
(little-endian), then the binary body. :class:`SchemaRepository` holds the schemas of
``schemas/`` (or a query group's ``schema_dir``) by name and by fingerprint."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, cast

from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import parse_schema, to_parsing_canonical_form

from pipeline.errors import SchemaError
from pipeline.resources import schema_dir

#: The two marker bytes that open every single-object encoded tuple.
MAGIC = b"\xc3\x01"


#: Bytes before the Avro body: marker + 8-byte fingerprint.
HEADER_SIZE = 10


Schema = dict[str, Any]


def fingerprint(schema: Schema) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a schema, little-endian, as written in the header.

    Args:
        schema: a schema as a dict (parsed or not).

    Returns:
        8 bytes.
    """
    canonical = to_parsing_canonical_form(parse_schema(copy.deepcopy(schema)))
    # fastavro returns the fingerprint's bytes in little-endian order as hex.
    return bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))


def strip_logical_types(schema: Any) -> Any:
    """Return a copy of ``schema`` with every ``logicalType`` removed.

    The binary layout is unchanged (logical types only annotate); decoding with the
    stripped schema yields the underlying ints and longs (e.g. epoch milliseconds for
    ``timestamp-millis``), which is several times faster than building ``datetime``
    objects and is what the Spark source wants for Arrow anyway.
    """
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [strip_logical_types(v) for v in schema]
    return schema


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema of the repository.

    Attributes:
        name: the file stem (``flight`` for ``schemas/flight.avsc``).
        schema: the schema as written in the file.
        fingerprint: its 8-byte CRC-64-AVRO fingerprint.
    """

    name: str
    schema: Schema
    fingerprint: bytes
    _parsed: dict[bool, Schema] = field(default_factory=dict, repr=False, compare=False)

    def parsed(self, *, logical: bool = True) -> Schema:
        """The fastavro-parsed schema, with (default) or without logical types."""
        if logical not in self._parsed:
            raw = self.schema if logical else strip_logical_types(self.schema)
            self._parsed[logical] = cast(Schema, parse_schema(copy.deepcopy(raw)))
        return self._parsed[logical]

    @cached_property
    def field_names(self) -> list[str]:
        """Top-level field names, in order."""
        return [f["name"] for f in self.schema.get("fields", [])]


class SchemaRepository:
    """The Avro schemas Floodgate knows, by name and by fingerprint.

    Args:
        schemas: ``{name: schema dict}``.

    Raises:
        SchemaError: a schema does not parse.
    """

    def __init__(self, schemas: Mapping[str, Schema]) -> None:
        self._by_name: dict[str, RegisteredSchema] = {}
        self._by_fingerprint: dict[bytes, RegisteredSchema] = {}
        for name, schema in schemas.items():
            try:
                fp = fingerprint(schema)
            except Exception as exc:
                raise SchemaError(f"schema {name!r} does not parse: {exc}", stream=name) from exc
            registered = RegisteredSchema(name=name, schema=schema, fingerprint=fp)
            self._by_name[name] = registered
            self._by_fingerprint[fp] = registered

    @classmethod
    def load(cls, directory: str | Path | None = None) -> SchemaRepository:
        """Load every ``*.avsc`` file of a directory (default: the schemas Floodgate
        ships, :func:`pipeline.resources.schema_dir`).

        Raises:
            SchemaError: the directory is missing or a file is not a valid schema.
        """
        directory = Path(directory) if directory is not None else schema_dir()
        if not directory.is_dir():
            raise SchemaError(f"schema directory {str(directory)!r} does not exist", stream="*")
        schemas: dict[str, Schema] = {}
        for path in sorted(directory.glob("*.avsc")):
            try:
                schemas[path.stem] = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{path}: not JSON: {exc}", stream=path.stem) from exc
        return cls(schemas)

    def get(self, name: str) -> RegisteredSchema:
        """The schema named ``name``.

        Raises:
            SchemaError: no such schema; the message lists the known ones.
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise SchemaError(
                f"no schema named {name!r}; known: {sorted(self._by_name)}", stream=name
            ) from None

    def by_fingerprint(self, fp: bytes) -> RegisteredSchema | None:
        """The schema with this 8-byte fingerprint, or ``None``."""
        return self._by_fingerprint.get(fp)

    def names(self) -> list[str]:
        """Names of every schema, sorted."""
        return sorted(self._by_name)

    def as_json(self) -> str:
        """The whole repository as JSON (``{name: schema}``): the source's option
        ``schemas``, read on the JVM."""
        return json.dumps({name: r.schema for name, r in self._by_name.items()})
