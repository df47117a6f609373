"""One connection to a query group's streams: inputs and outputs by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry

from pipeline.client.input import PutResult, StreamInput
from pipeline.client.reception import StreamOutput
from pipeline.config import QueryGroupConfig, bootstrap_from, load_query_group
from pipeline.errors import (
    ConfigError,
)
from pipeline.metrics import ClientMetrics
from pipeline.queues.probe import SweptCounter
from pipeline.resources import query_group_file
from pipeline.serde.schemas import SchemaRepository


class Connector:
    """A connection to Floodgate for data transmission and reception applications.

    Made by :func:`connect`. Holds the query group configs, the schema repository and
    a metrics registry; opens :class:`StreamInput` and :class:`StreamOutput` objects.
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        configs: Sequence[QueryGroupConfig],
        schemas: SchemaRepository,
        registry: CollectorRegistry,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.configs = {c.name: c for c in configs}
        self.schemas = schemas
        self.registry = registry
        self.metrics = ClientMetrics(registry)
        self._inputs: list[StreamInput] = []
        self._outputs: list[StreamOutput] = []

    def config(self, query_group: str) -> QueryGroupConfig:
        """The config of a query group.

        Raises:
            ConfigError: no such query group; names the known ones.
        """
        try:
            return self.configs[query_group]
        except KeyError:
            raise ConfigError(
                f"no query group {query_group!r}; this connector knows {sorted(self.configs)}",
                key="query_group.name",
                value=query_group,
                allowed=", ".join(sorted(self.configs)),
            ) from None

    def open_stream_input(
        self,
        query_group: str,
        stream: str,
        *,
        on_threshold: Callable[[PutResult], None] | None = None,
        raise_on_threshold: bool = False,
        swept: SweptCounter | None = None,
    ) -> StreamInput:
        """Open an input stream of a query group for writing.

        Raises:
            ConfigError: no such query group or stream, or a key field the stream's
                schema does not have.
        """
        stream_input = StreamInput(
            config=self.config(query_group),
            stream=stream,
            bootstrap_servers=self.bootstrap_servers,
            schemas=self.schemas,
            metrics=self.metrics,
            swept=swept,
            on_threshold=on_threshold,
            raise_on_threshold=raise_on_threshold,
        )
        self._inputs.append(stream_input)
        return stream_input

    def open_stream_output(
        self, query_group: str, stream: str, *, group: str | None = None
    ) -> StreamOutput:
        """Open an output stream of a query group for reading (data reception API).

        Raises:
            ConfigError: no such query group or stream.
        """
        stream_output = StreamOutput(
            config=self.config(query_group),
            stream=stream,
            bootstrap_servers=self.bootstrap_servers,
            schemas=self.schemas,
            group=group,
        )
        self._outputs.append(stream_output)
        return stream_output

    def close(self) -> None:
        """Close every stream opened here."""
        for stream_input in self._inputs:
            stream_input.close()
        self._inputs.clear()
        for stream_output in self._outputs:
            stream_output.close()
        self._outputs.clear()

    def __enter__(self) -> Connector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    *,
    config: str | Path | QueryGroupConfig | Sequence[str | Path | QueryGroupConfig],
    bootstrap_servers: str | None = None,
    registry: CollectorRegistry | None = None,
    schemas: SchemaRepository | None = None,
) -> Connector:
    """Connect a data transmission application to Floodgate.

    Args:
        config: one or more query group files, or names of shipped ones (``flights``),
            as the command line takes them, or loaded configs.
        bootstrap_servers: the cluster; default: ``FLOODGATE_KAFKA_BOOTSTRAP``, then the
            first config's ``[kafka] bootstrap_servers``.
        registry: where the client's metrics go (default: a new registry).
        schemas: the schema repository (default: the first config's ``schema_dir``).

    Raises:
        ConfigError: a config is refused, or no cluster is named anywhere.
    """
    items = [config] if isinstance(config, str | Path | QueryGroupConfig) else list(config)
    configs = [
        c if isinstance(c, QueryGroupConfig) else load_query_group(query_group_file(c))
        for c in items
    ]
    if not configs:
        raise ConfigError("connect() needs at least one query group config", key="config")
    servers = bootstrap_servers or bootstrap_from(configs[0].kafka)
    if not servers:
        raise ConfigError(
            "no Kafka cluster: pass bootstrap_servers=, set FLOODGATE_KAFKA_BOOTSTRAP, "
            "or set [kafka] bootstrap_servers",
            key="kafka.bootstrap_servers",
        )
    return Connector(
        bootstrap_servers=servers,
        configs=configs,
        schemas=schemas or SchemaRepository.load(configs[0].schema_dir),
        registry=registry or CollectorRegistry(),
    )
