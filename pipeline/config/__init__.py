"""Typed configuration of a query group, loaded from TOML, with environment overrides.

A query group file declares input streams, output streams, Spark SQL queries over
the input streams, and the settings that bound them. Everything is validated with
pydantic at start: an unknown key or a bad value is refused with a
:class:`~pipeline.errors.ConfigError` that names the key, the value and what is
allowed. Nothing is validated lazily at run time.

Settings that bound a stream resolve in three levels, as in the stream data
platforms Floodgate follows ("system definition file" -> "query group file" ->
"stream definition"): the system defaults below, overridden by the
``[query_group]`` section, overridden by the stream's own section. See
:meth:`QueryGroupConfig.input_settings`.

Environment overrides:

* ``FLOODGATE_KAFKA_BOOTSTRAP`` -- the Kafka bootstrap servers; wins over
  ``[kafka] bootstrap_servers`` (:func:`pipeline.brokers.local.resolve_broker`).
* ``FLOODGATE__<SECTION>__<KEY>[__<KEY>...]`` -- any key of the file, e.g.
  ``FLOODGATE__QUERY_GROUP__TRIGGER_INTERVAL_MS=500`` or
  ``FLOODGATE__INPUT_STREAMS__FLIGHTS__TOPIC=flights-test``. Values are parsed
  as TOML scalars when they parse (``500``, ``true``, ``"x"``), else taken as
  strings, then validated like the file. Only the file's own sections are
  overridden: ``FLOODGATE__ADMISSION__*`` and ``FLOODGATE__SWEEPER__*`` are the
  services' (one environment may serve them all, as in docker-compose.yml).

*The stream data platform* cited below is the stream data processing product whose
queue rules Floodgate follows, and whose parameter names it keeps (docs/glossary.md).

Where each part lives, a module per thing it configures (every name below is also
importable from ``pipeline.config``):

* :mod:`~pipeline.config.query_group` -- the query group file's model,
  :class:`QueryGroupConfig`: its ``[query_group]`` and ``[queries.<name>]`` sections,
  each stream's resolved settings, its derived names and each stream's codec;
* :mod:`~pipeline.config.streams` -- the stream settings and their system defaults,
  the ``[input_streams.<name>]`` and ``[output_streams.<name>]`` sections;
* :mod:`~pipeline.config.clusters` -- ``[kafka]`` (and :func:`bootstrap_from`),
  ``[schema_registry]``, ``[spark]``;
* :mod:`~pipeline.config.hosts` -- :data:`BindHost`, the interface an endpoint
  listens on;
* :mod:`~pipeline.config.loading` -- loading a query group file and a service's file;
* :mod:`~pipeline.config.overrides` -- the ``FLOODGATE__...`` environment overrides;
* :mod:`~pipeline.config.refusals` -- a refused file as a
  :class:`~pipeline.errors.ConfigError` naming the key, the value and what is allowed;
* :mod:`~pipeline.config.section` -- the strict base of every section, and the name
  types.

May import: pipeline.errors, pipeline.kafka, pipeline.names, pipeline.redaction,
pipeline.security and pipeline.serde.
"""

from __future__ import annotations

from pipeline.config.clusters import (
    BOOTSTRAP_ENV,
    KafkaConfig,
    SchemaRegistryConfig,
    SparkConfig,
    bootstrap_from,
)
from pipeline.config.hosts import BindHost, HostName, check_bind_host, check_host_name
from pipeline.config.loading import (
    ServiceConfig,
    load_query_group,
    load_service_config,
    parse_query_group,
    read_toml,
)
from pipeline.config.overrides import OVERRIDE_ENV_PREFIX, apply_env_overrides, secret_keys
from pipeline.config.query_group import (
    DEFAULT_CONTROL_DIR,
    QueryConfig,
    QueryGroupConfig,
    QueryGroupSection,
)
from pipeline.config.refusals import config_error
from pipeline.config.section import Identifier, TopicName
from pipeline.config.streams import (
    SYSTEM_DEFAULTS,
    Encoding,
    InputStreamConfig,
    KeyEncoding,
    OutputStreamConfig,
    ResolvedStreamSettings,
    StreamSettings,
)
from pipeline.errors import ConfigError

# Every public name pipeline/config.py had (ConfigError among them, which it imported),
# so no import of pipeline.config breaks.
__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_CONTROL_DIR",
    "OVERRIDE_ENV_PREFIX",
    "SYSTEM_DEFAULTS",
    "BindHost",
    "ConfigError",
    "Encoding",
    "HostName",
    "Identifier",
    "InputStreamConfig",
    "KafkaConfig",
    "KeyEncoding",
    "OutputStreamConfig",
    "QueryConfig",
    "QueryGroupConfig",
    "QueryGroupSection",
    "ResolvedStreamSettings",
    "SchemaRegistryConfig",
    "ServiceConfig",
    "SparkConfig",
    "StreamSettings",
    "TopicName",
    "apply_env_overrides",
    "bootstrap_from",
    "check_bind_host",
    "check_host_name",
    "config_error",
    "load_query_group",
    "load_service_config",
    "parse_query_group",
    "read_toml",
    "secret_keys",
]
