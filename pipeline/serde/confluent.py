"""The Confluent wire format: a stream's tuples framed for a Schema Registry.

A stream with ``encoding = "confluent"`` carries what Confluent's serializers write
and Kafka Connect, ksqlDB and the Confluent clients of other languages read: a zero
magic byte, the 4-byte schema id the Schema Registry gave the writer schema, then
the Avro body. The framing, the registration of the writer schema and the lookup
of a writer schema by id are all confluent-kafka's own
(``confluent_kafka.schema_registry``: :class:`SchemaRegistryClient`,
``AvroSerializer``, ``AvroDeserializer``); Floodgate writes none of those bytes
itself. Subjects follow Confluent's default ``TopicNameStrategy``: the value schema
of topic ``t`` is registered under ``t-value``, and registered on first use.

A stream's key may be in the wire format too (``key_encoding = "confluent"``,
:class:`ConfluentKey`): an Avro record of the stream's key fields
(:func:`key_schema`), registered under ``t-key``, as Confluent's serializers and
ABRiS write keys with ``TopicNameStrategy``.

Any registry with Confluent's REST API serves: Confluent's own, Karapace, or
Apicurio Registry's ``/apis/ccompat/v7``.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, Literal

from pipeline.errors import DeserializationError, SchemaError, SchemaRegistryError
from pipeline.redaction import redact_url
from pipeline.serde.codec import StreamCodec, epoch_ms, field_kind
from pipeline.serde.schemas import RegisteredSchema, SchemaRepository, fingerprint

#: The values of a stream's ``encoding`` key: Avro single-object encoding (the schema's
#: fingerprint, schemas found in the schema directory) or the Confluent wire format.
ENCODINGS = ("single-object", "confluent")

#: The values of a stream's ``key_encoding`` key: the key fields' values joined with
#: ``|`` (:class:`~pipeline.serde.codec.TupleKey`), or the Confluent wire format
#: (:class:`ConfluentKey`).
KEY_ENCODINGS = ("raw", "confluent")

#: HTTP status of the Schema Registry's "not found" answers (unknown schema id).
_NOT_FOUND = 404

_EPOCH_DATE = date(1970, 1, 1)


class ConfluentCodec(StreamCodec):
    """A stream's codec for the Confluent wire format (see the module docstring).

    Tuples are checked and normalised as with single-object encoding
    (:meth:`StreamCodec.normalise`), then written by confluent-kafka's
    ``AvroSerializer`` under the subject ``<topic>-value``; read by its
    ``AvroDeserializer``, which fetches the writer schema by the id in the framing
    and resolves it to the stream's schema (Avro schema resolution), so the
    stream's schema can evolve as the registry's compatibility rules allow.

    Tuples are encoded one by one, through confluent-kafka's serializer (the block
    encoder of :mod:`pipeline.serde.block` stays off); :meth:`decode` reads one
    (the client's reception, the demo). The Spark source decodes on the JVM.

    Args:
        stream: the stream's name (used in errors).
        schema: the stream's schema: the writer schema when encoding, the reader
            schema when decoding.
        repository: the schema repository (kept for :class:`StreamCodec`'s callers).
        topic: the stream's Kafka topic (its subject is ``<topic>-value``).
        registry: the ``SchemaRegistryClient`` configuration (``url``, optionally
            ``basic.auth.user.info`` as ``user:password``).
        field: ``value`` (default), or ``key`` for a Kafka record's key: subject
            ``<topic>-key`` (:class:`ConfluentKey`).
    """

    encoding = "confluent"

    def __init__(
        self,
        stream: str,
        schema: RegisteredSchema,
        repository: SchemaRepository,
        *,
        topic: str,
        registry: Mapping[str, Any],
        field: Literal["value", "key"] = "value",
    ) -> None:
        from confluent_kafka.schema_registry import (
            SchemaRegistryClient,
            topic_subject_name_strategy,
        )
        from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        super().__init__(stream, schema, repository)
        self.topic = topic
        self.field = field
        #: The registry's URL as errors show it (a password in it as ``***``).
        self.registry_url = redact_url(str(registry.get("url", "")))
        self.client = SchemaRegistryClient(dict(registry))
        schema_text = json.dumps(schema.schema)
        # TopicNameStrategy, named: confluent-kafka 2.16's default asks the registry for
        # the topic's associations first (a request Confluent's own registry answers).
        strategy = {"subject.name.strategy": topic_subject_name_strategy}
        self._serializer = AvroSerializer(
            self.client,
            schema_text,
            conf={
                "auto.register.schemas": True,
                "validate.strict.allow.default": True,
                **strategy,
            },
        )
        self._deserializer = AvroDeserializer(self.client, schema_text, conf=strategy)
        self._context = SerializationContext(
            topic, MessageField.KEY if field == "key" else MessageField.VALUE
        )
        self._logical_fields = [
            (name, kind)
            for name in schema.field_names
            if (kind := field_kind(schema.schema, name)) in ("timestamp-millis", "date")
        ]

    @property
    def subject(self) -> str:
        """The registry subject of the stream's values, or keys (``TopicNameStrategy``:
        ``<topic>-value``, ``<topic>-key``)."""
        return f"{self.topic}-{self.field}"

    def registered_id(self) -> int:
        """The registry's id of the stream's schema under :attr:`subject`, registering it
        as confluent-kafka's serializer would (``auto.register.schemas``): the id the
        JVM sink frames its tuples with.

        Raises:
            SchemaError: the registry refused the schema (an incompatible change).
            SchemaRegistryError: the registry could not be asked.
        """
        from confluent_kafka.schema_registry import Schema as RegistrySchema
        from confluent_kafka.schema_registry.error import SchemaRegistryError as _RegistryError

        try:
            return int(
                self.client.register_schema(
                    self.subject, RegistrySchema(json.dumps(self.schema.schema), "AVRO")
                )
            )
        except _RegistryError as exc:
            raise self._registry_error(exc) from exc
        except _outages() as exc:
            raise self._unreachable(exc) from exc

    def encode_normalised(self, record: Mapping[str, Any]) -> bytes:
        """Encode one normalised tuple in the Confluent wire format.

        Returns:
            confluent-kafka's framing (magic byte, schema id) + Avro body.

        Raises:
            SchemaError: the record does not match the schema (names the field), or
                the registry refused the schema under :attr:`subject` (an
                incompatible change).
            SchemaRegistryError: the registry could not be asked.
        """
        from confluent_kafka.schema_registry.error import SchemaRegistryError as _RegistryError
        from confluent_kafka.serialization import SerializationError

        outage = _outages()
        try:
            data = self._serializer(dict(record), self._context)
        except _RegistryError as exc:
            raise self._registry_error(exc) from exc
        except (ValueError, TypeError, KeyError, AttributeError, SerializationError) as exc:
            cause = exc.__cause__ if isinstance(exc, SerializationError) else exc
            if cause is not None and isinstance(cause, (_RegistryError, *outage)):
                raise self._unreachable(cause) from exc
            raise self._encode_error(record, exc) from exc
        except outage as exc:
            raise self._unreachable(exc) from exc
        if data is None:  # only for a None record, which normalise refuses
            raise SchemaError(f"stream {self.stream!r}: nothing to encode", stream=self.stream)
        return data

    def writer_schema_of(self, data: bytes) -> RegisteredSchema:
        """Not available: a Confluent-framed tuple names its writer schema by a registry
        id, not by a fingerprint of the schema directory.

        Raises:
            DeserializationError: always, reason ``bad-marker``.
        """
        raise DeserializationError(
            "a Confluent-framed tuple names its writer schema by a registry id; "
            "decode it with decode()",
            reason="bad-marker",
            stream=self.stream,
        )

    def decode(self, data: bytes, *, logical: bool = True) -> dict[str, Any]:
        """Decode one Confluent-framed tuple into the stream's schema.

        Args:
            data: the record value.
            logical: ``False`` gives ``timestamp-millis`` fields as epoch milliseconds
                and ``date`` fields as days since 1970-01-01 (top-level fields).

        Returns:
            ``{field: value}`` shaped by the stream's (reader) schema.

        Raises:
            DeserializationError: ``bad-magic-byte`` (not Confluent framing: too short,
                or a first byte other than 0), ``unknown-schema-id`` (the registry has
                no schema of that id), or ``bad-body`` (the body does not decode with
                the writer schema).
            SchemaRegistryError: the registry could not be asked (a task that fails
                here is retried: the tuple is not dead-lettered for an outage).
        """
        from confluent_kafka.schema_registry.error import SchemaRegistryError as _RegistryError
        from confluent_kafka.serialization import SerializationError

        outage = _outages()
        try:
            record = self._deserializer(bytes(data), self._context)
        except _RegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                raise DeserializationError(
                    f"the Schema Registry at {self.registry_url} knows no schema of the id "
                    f"this tuple names: {exc.error_message}",
                    reason="unknown-schema-id",
                    stream=self.stream,
                ) from exc
            raise self._unreachable(exc) from exc
        except SerializationError as exc:
            cause = exc.__cause__
            if cause is not None and isinstance(cause, (_RegistryError, *outage)):
                raise self._unreachable(cause) from exc
            framing = len(data) <= 5 or data[0] != 0
            raise DeserializationError(
                f"not the Confluent wire format (starts {bytes(data[:5]).hex() or 'empty'}): {exc}"
                if framing
                else f"Avro body does not decode: {exc}",
                reason="bad-magic-byte" if framing else "bad-body",
                stream=self.stream,
            ) from exc
        except outage as exc:
            raise self._unreachable(exc) from exc
        except Exception as exc:  # fastavro's errors while reading a body
            raise DeserializationError(
                f"Avro body does not decode: {type(exc).__name__}: {exc}",
                reason="bad-body",
                stream=self.stream,
            ) from exc
        record = self._record(record)
        if not logical:
            for name, kind in self._logical_fields:
                value = record.get(name)
                if kind == "timestamp-millis" and isinstance(value, datetime):
                    record[name] = epoch_ms(value)
                elif kind == "date" and isinstance(value, date):
                    record[name] = (value - _EPOCH_DATE).days
        return record

    def _registry_error(self, exc: Any) -> SchemaError | SchemaRegistryError:
        """What a registry's error answer means: a refusal of the schema under
        :attr:`subject` (an HTTP 4xx: an incompatible change) is a ``SchemaError``;
        anything else, the registry could not be asked."""
        if 400 <= exc.http_status_code < 500:
            return SchemaError(
                f"stream {self.stream!r}: the Schema Registry at {self.registry_url} "
                f"refused schema {self.schema.name!r} under subject {self.subject!r}: "
                f"{exc.error_message} (HTTP {exc.http_status_code})",
                stream=self.stream,
            )
        return self._unreachable(exc)

    def _unreachable(self, exc: BaseException) -> SchemaRegistryError:
        return SchemaRegistryError(
            f"stream {self.stream!r}: the Schema Registry at {self.registry_url} could not "
            f"be asked: {type(exc).__name__}: {exc}",
            url=self.registry_url,
        )


def key_schema(schema: RegisteredSchema, fields: Sequence[str]) -> RegisteredSchema:
    """The Avro schema of a stream's Confluent-encoded key: a record named
    ``<schema's record name>Key``, in the schema's namespace, whose fields are the
    stream schema's fields named in ``fields`` (the stream's ``key``), in that order,
    each exactly as the stream's schema declares it (type, default, doc).

    The JVM source builds the same schema (``io.floodgate.spark.serde.KeySchema``).

    Raises:
        SchemaError: no key fields, or a key field that is no field of ``schema``.
    """
    declared = {f["name"]: f for f in schema.schema.get("fields", [])}
    missing = [f for f in fields if f not in declared]
    if not fields or missing:
        raise SchemaError(
            f"schema {schema.name!r}: a Confluent key needs key fields of the schema; "
            f"given {list(fields)}, not fields: {missing}; its fields: {schema.field_names}",
            stream=schema.name,
        )
    namespace, _, name = str(schema.schema["name"]).rpartition(".")
    namespace = schema.schema.get("namespace") or namespace
    record: dict[str, Any] = {"type": "record", "name": f"{name}Key"}
    if namespace:
        record["namespace"] = namespace
    record["fields"] = [dict(declared[f]) for f in fields]
    return RegisteredSchema(
        name=f"{schema.name}-key", schema=record, fingerprint=fingerprint(record)
    )


class ConfluentKey:
    """A stream's Kafka key in the Confluent wire format (``key_encoding =
    "confluent"``): the tuple's key fields as an Avro record (:func:`key_schema`),
    framed with the registry id of that schema under the subject ``<topic>-key``
    (``TopicNameStrategy``, as Confluent's ``KafkaAvroSerializer`` with
    ``isKey = true`` and ABRiS's key config write it).

    A drop-in for :class:`~pipeline.serde.codec.TupleKey` on the producer side: called
    on a normalised tuple it gives the key bytes, and :attr:`fields` names the key
    fields. Tuples are partitioned by those bytes (librdkafka's partitioner hashes the
    key bytes as given), as every Confluent client partitions an Avro key.

    Args:
        stream: the stream's name (errors).
        schema: the stream's schema (the key fields' declarations come from it).
        repository: the schema repository.
        fields: the stream's key fields, in order (its ``key``).
        topic: the stream's topic.
        registry: the ``SchemaRegistryClient`` configuration.

    Raises:
        SchemaError: no key fields, or one that is no field of the schema.
    """

    def __init__(
        self,
        stream: str,
        schema: RegisteredSchema,
        repository: SchemaRepository,
        fields: Sequence[str],
        *,
        topic: str,
        registry: Mapping[str, Any],
    ) -> None:
        self.fields = list(fields)
        self.schema = key_schema(schema, self.fields)
        self.codec = ConfluentCodec(
            stream, self.schema, repository, topic=topic, registry=registry, field="key"
        )

    @property
    def subject(self) -> str:
        """The registry subject of the keys, ``<topic>-key``."""
        return self.codec.subject

    def __call__(self, record: Mapping[str, Any]) -> bytes:
        """The key of a normalised tuple (:meth:`StreamCodec.normalise`).

        Returns:
            Magic byte 0, the key schema's 4-byte registry id, the Avro body.

        Raises:
            SchemaError: a key field's value does not match its type, or the registry
                refused the key schema under :attr:`subject`.
            SchemaRegistryError: the registry could not be asked.
        """
        return self.codec.encode_normalised({f: record.get(f) for f in self.fields})

    def decode(self, data: bytes, *, logical: bool = True) -> dict[str, Any]:
        """Decode a Confluent-framed key into ``{key field: value}``.

        Args:
            data: the Kafka record's key.
            logical: as :meth:`ConfluentCodec.decode`.

        Raises:
            DeserializationError: as :meth:`ConfluentCodec.decode`, with reason
                ``bad-key`` (the message says what is wrong: framing, unknown schema
                id, or body).
            SchemaRegistryError: the registry could not be asked.
        """
        try:
            return self.codec.decode(data, logical=logical)
        except DeserializationError as exc:
            raise DeserializationError(
                f"the key does not decode ({exc.reason}): {exc.detail}",
                reason="bad-key",
                stream=self.codec.stream,
            ) from exc


def stream_key(
    stream: str,
    schema: RegisteredSchema,
    repository: SchemaRepository,
    fields: Sequence[str],
    *,
    key_encoding: str = "raw",
    topic: str | None = None,
    registry: Mapping[str, Any] | None = None,
) -> Any:
    """The key maker of a stream in its ``key_encoding``.

    Returns:
        ``raw``: a :class:`~pipeline.serde.codec.TupleKey` of ``fields``;
        ``confluent``: a :class:`ConfluentKey`.

    Raises:
        SchemaError: a key encoding other than :data:`KEY_ENCODINGS`, or ``confluent``
            without key fields, a topic or a registry URL.
    """
    from pipeline.serde.codec import TupleKey

    if key_encoding == "raw":
        return TupleKey(fields)
    if key_encoding != "confluent":
        raise SchemaError(
            f"stream {stream!r}: key_encoding {key_encoding!r} is unknown; allowed: "
            + ", ".join(KEY_ENCODINGS),
            stream=stream,
        )
    if not topic or not registry or not registry.get("url"):
        raise SchemaError(
            f"stream {stream!r}: key_encoding 'confluent' needs the stream's topic and the "
            "Schema Registry's URL ([schema_registry] url)",
            stream=stream,
        )
    return ConfluentKey(stream, schema, repository, fields, topic=topic, registry=registry)


def _outages() -> tuple[type[BaseException], ...]:
    """The errors of a registry that could not be asked (a network failure), as
    confluent-kafka's client raises them: ``OSError``, and the ``HTTPError`` of its HTTP
    client, ``httpx2`` where installed (Python 3.10 and later), else ``httpx`` (both
    are caught, so that whichever it chose is, without reading its private module)."""
    errors: list[type[BaseException]] = [OSError]
    for client in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            errors.append(importlib.import_module(client).HTTPError)
    return tuple(errors)


def stream_codec(
    stream: str,
    schema: RegisteredSchema,
    repository: SchemaRepository,
    *,
    encoding: str = "single-object",
    topic: str | None = None,
    registry: Mapping[str, Any] | None = None,
) -> StreamCodec:
    """The codec of a stream in its encoding.

    Args:
        stream: the stream's name.
        schema: the stream's schema.
        repository: the schema repository.
        encoding: one of :data:`ENCODINGS`.
        topic: the stream's topic (required for ``confluent``).
        registry: the ``SchemaRegistryClient`` configuration (required for
            ``confluent``; :meth:`pipeline.config.SchemaRegistryConfig.client_config`).

    Raises:
        SchemaError: an encoding other than :data:`ENCODINGS`, or ``confluent``
            without a topic or a registry URL.
    """
    if encoding == "single-object":
        return StreamCodec(stream, schema, repository)
    if encoding != "confluent":
        raise SchemaError(
            f"stream {stream!r}: encoding {encoding!r} is unknown; allowed: "
            + ", ".join(ENCODINGS),
            stream=stream,
        )
    if not topic or not registry or not registry.get("url"):
        raise SchemaError(
            f"stream {stream!r}: encoding 'confluent' needs the stream's topic and the "
            "Schema Registry's URL ([schema_registry] url)",
            stream=stream,
        )
    return ConfluentCodec(stream, schema, repository, topic=topic, registry=registry)
