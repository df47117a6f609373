"""Loading config files: a query group file (read, overridden from the environment,
validated, and checked against its schemas) and a service's file (the admission
service's, the sweeper's)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pipeline.config.overrides import OVERRIDE_ENV_PREFIX, apply_env_overrides, secret_keys
from pipeline.config.query_group import QueryGroupConfig
from pipeline.config.refusals import config_error
from pipeline.config.streams import InputStreamConfig, OutputStreamConfig
from pipeline.errors import ConfigError
from pipeline.security.credentials import check_private_mode


def load_query_group(path: str | Path, *, env: Mapping[str, str] | None = None) -> QueryGroupConfig:
    """Load and validate a query group file.

    Args:
        path: the TOML file.
        env: environment for overrides (default ``os.environ``); see :mod:`pipeline.config`.

    Returns:
        The validated, frozen config.

    Raises:
        ConfigError: the file is missing or not TOML, or a key is unknown or its value
            refused. The message names the file, the dotted key, the value and what is
            allowed.
    """
    raw = read_toml(path, "query group file")
    schemas = raw.get("schema_dir")
    if isinstance(schemas, str) and not Path(schemas).is_absolute():
        raw["schema_dir"] = str(Path(path).parent / schemas)  # relative to the file
    return parse_query_group(raw, source=str(path), env=env)


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML config file, parsed.

    Raises:
        ConfigError: ``no such <what>``, or not valid TOML (with the parser's position).
    """
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: no such {what}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


ServiceConfig = TypeVar("ServiceConfig", bound=BaseModel)


def load_service_config(
    path: str | Path | None,
    model: type[ServiceConfig],
    *,
    section: str,
    env: Mapping[str, str] | None = None,
) -> tuple[ServiceConfig, str]:
    """A service's config file (one ``[<section>]``: the admission service, the
    sweeper): read, overridden by ``FLOODGATE__<SECTION>__KEY`` variables only (other
    sections' overrides are not the service's), and validated by ``model``.

    Args:
        path: the TOML file; ``None``: defaults and environment only.
        model: the file's pydantic model.
        section: the section's name.
        env: environment (default ``os.environ``).

    Returns:
        ``(the validated file, how to name it in errors)``.

    A file that holds a secret key of the section (a ``SecretStr`` field, such as
    ``admission.token``) is taken only when its owner alone may read it (mode 0600 or
    0400, :func:`~pipeline.security.credentials.check_private_mode`); the environment
    (``FLOODGATE__<SECTION>__<KEY>``) keeps secrets out of files altogether.

    Raises:
        ConfigError: the file is missing or not TOML, a key is unknown or refused
            (named with its value and what is allowed), or the file holds a secret and
            group or others may read it (named with its path and mode).
    """
    env = os.environ if env is None else env
    raw: dict[str, Any] = {}
    source = "<defaults>"
    secrets = secret_keys(model.model_fields[section].annotation)
    if path is not None:
        source = str(path)
        raw = read_toml(path, f"{section} config file")
        table = raw.get(section)
        held = sorted(secrets & set(table)) if isinstance(table, dict) else []
        if held:
            check_private_mode(
                path,
                os.stat(path),
                what=f"{section} config file",
                holds=", ".join(f"{section}.{key}" for key in held),
            )
    prefix = f"{OVERRIDE_ENV_PREFIX}{section.upper()}__"
    ours = {k: v for k, v in env.items() if k.upper().startswith(prefix)}
    verbatim = {f"{section}.{key}" for key in secrets}
    try:
        return model.model_validate(apply_env_overrides(raw, ours, verbatim=verbatim)), source
    except ValidationError as exc:
        raise config_error(exc, source, model=model, what=f"{section} config") from None


def parse_query_group(
    raw: Mapping[str, Any], *, source: str = "<config>", env: Mapping[str, str] | None = None
) -> QueryGroupConfig:
    """Validate a query group given as a mapping (the parsed TOML).

    Args:
        raw: the parsed file.
        source: how to name the file in errors.
        env: environment for overrides (default ``os.environ``).

    Raises:
        ConfigError: as :func:`load_query_group`.
    """
    env = os.environ if env is None else env
    sections = {name.upper() for name in QueryGroupConfig.model_fields}
    ours = {
        k: v
        for k, v in env.items()
        if k.upper().startswith(OVERRIDE_ENV_PREFIX)
        and k[len(OVERRIDE_ENV_PREFIX) :].upper().split("__")[0] in sections
    }
    data = apply_env_overrides(raw, ours)
    section = data.get("query_group")
    if isinstance(section, dict) and "source" in section:
        raise ConfigError(
            f"{source}: invalid query group file:\n  key 'query_group.source' = "
            f"{section['source']!r}: the setting was removed with the Python source; the "
            "floodgate_kafka source on the JVM is the only source: delete the line "
            "(docs/changelog.md)",
            key="query_group.source",
            value=section["source"],
            allowed="(none: delete the key)",
        )
    try:
        config = QueryGroupConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source) from None
    for name, query in config.queries.items():
        for stream in query.inputs or []:
            if stream not in config.input_streams:
                allowed = ", ".join(sorted(config.input_streams))
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key 'queries.{name}.inputs' names "
                    f"{stream!r}, which is no input stream; declared: {allowed}",
                    key=f"queries.{name}.inputs",
                    value=stream,
                    allowed=allowed,
                )
        if query.output not in config.output_streams:
            allowed = ", ".join(sorted(config.output_streams)) or "(no output streams declared)"
            raise ConfigError(
                f"{source}: invalid query group file:\n  key 'queries.{name}.output' = "
                f"{query.output!r} names no output stream; declared: {allowed}",
                key=f"queries.{name}.output",
                value=query.output,
                allowed=allowed,
            )
    if not config.query_group.sweep_catalog_url:
        for output_name, output in config.output_streams.items():
            if output.swept:
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key "
                    f"'output_streams.{output_name}.swept' "
                    "= true needs query_group.sweep_catalog_url (the sweep catalog its "
                    "readers read swept tuples back from); allowed: false, or set the catalog",
                    key=f"output_streams.{output_name}.swept",
                    value=True,
                    allowed="false, or set query_group.sweep_catalog_url",
                )
    if config.schema_registry.url is None:
        streams: list[tuple[str, str, InputStreamConfig | OutputStreamConfig]] = [
            *(("input_streams", name, s) for name, s in config.input_streams.items()),
            *(("output_streams", name, s) for name, s in config.output_streams.items()),
        ]
        for kind, stream_name, declared in streams:
            if declared.encoding == "confluent":
                key = f"{kind}.{stream_name}.encoding"
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} = 'confluent' "
                    "needs schema_registry.url (the Schema Registry the stream's schema "
                    "ids come from); allowed: 'single-object', or set schema_registry.url",
                    key=key,
                    value="confluent",
                    allowed="single-object, or confluent with schema_registry.url",
                )
        for stream_name, declared_input in config.input_streams.items():
            if declared_input.key_encoding == "confluent":
                key = f"input_streams.{stream_name}.key_encoding"
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} = 'confluent' "
                    "needs schema_registry.url (the Schema Registry the key schema's ids "
                    "come from); allowed: 'raw', or set schema_registry.url",
                    key=key,
                    value="confluent",
                    allowed="raw, or confluent with schema_registry.url",
                )
    _check_schema_fields(config, source)
    return config


def _check_schema_fields(config: QueryGroupConfig, source: str) -> None:
    """Refuse a stream whose ``key`` (or ``timestamp_field``) names a field its schema
    does not have: every put would otherwise fail with a ``NullKeyError`` that blames
    the tuples.

    The schemas are those of ``schema_dir``; a directory that does not load, or a schema
    it does not hold, is refused where the schemas are loaded (the query group's start,
    :func:`pipeline.client.connector.connect`), not here.

    Raises:
        ConfigError: names the key (``input_streams.<name>.key``), the field and the
            schema's fields.
    """
    from pipeline.errors import SchemaError
    from pipeline.serde.schemas import SchemaRepository  # fastavro: only once a file is loaded

    try:
        schemas = SchemaRepository.load(config.schema_dir)
    except SchemaError:
        return
    streams: list[tuple[str, str, InputStreamConfig | OutputStreamConfig]] = [
        *(("input_streams", name, s) for name, s in config.input_streams.items()),
        *(("output_streams", name, s) for name, s in config.output_streams.items()),
    ]
    for kind, name, stream in streams:
        if stream.schema_ not in schemas.names():
            continue
        fields = schemas.get(stream.schema_).field_names
        named = [("key", field) for field in stream.key]
        if isinstance(stream, InputStreamConfig) and stream.timestamp_field:
            named.append(("timestamp_field", stream.timestamp_field))
        for what, field in named:
            if field not in fields:
                key = f"{kind}.{name}.{what}"
                allowed = ", ".join(fields)
                raise ConfigError(
                    f"{source}: invalid query group file:\n  key {key!r} names {field!r}, "
                    f"which is no field of schema {stream.schema_!r}; its fields: {allowed}",
                    key=key,
                    value=field,
                    allowed=allowed,
                )
