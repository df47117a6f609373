"""The sweeper service's config: one ``[sweeper]`` section of a TOML file, with
``FLOODGATE__SWEEPER__<KEY>=value`` environment overrides (as the other services).

Refused at start, naming the key, the value and what is allowed: an unknown key, a
bad value, a query group file that does not load, or a query group whose
``query_group.sweep_catalog_url`` is not this sweeper's catalog (its sources could
not read swept tuples back: sweeping it would lose them).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.config import (
    BindHost,
    HostName,
    QueryGroupConfig,
    load_query_group,
    load_service_config,
)
from pipeline.errors import ConfigError
from pipeline.redaction import redact_url
from pipeline.swept.store import ALLOWED_STORES, OBJECT_SCHEMES, split_object_url


class SweeperSettings(BaseModel):
    """``[sweeper]``: which queues, where BLOBs go, how often (docs/architecture.md,
    "The sweeper", for the interval and the front buffer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_groups: list[str] = Field(default_factory=list)
    """Query group files whose input stream queues are swept (paths)."""
    catalog_url: str = "sqlite:///.floodgate/sweeper/catalog.db"
    """The sweep catalog (SQLAlchemy URL); each query group must name the same in
    ``query_group.sweep_catalog_url``."""
    blob_dir: str = ".floodgate/sweeper/blobs"
    """The BLOB store: a local directory (one Avro file per BLOB). The catalog records
    it, and readers read BLOBs only from inside it; the sweepers of one catalog share
    it, one of another catalog is refused (``<blob_dir>/.sweeper.lock``)."""
    blob_store: str | None = None
    """The BLOB store as a URL, instead of ``blob_dir``: ``file:///absolute/folder``,
    or ``s3://bucket/prefix`` for S3 and its API-compatibles (one object per BLOB;
    endpoint, region and credentials from the standard AWS environment:
    ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``). The
    bucket must exist. Setting both ``blob_store`` and ``blob_dir`` is refused."""
    blob_store_max_bytes: Annotated[int, Field(ge=1)] = 1 << 30
    """Capacity of the BLOB store; at or above it no new sweep starts (back-pressure
    takes over), logged when it fills and when it clears."""
    sweep_interval_s: Annotated[float, Field(gt=0, le=3_600)] = 5.0
    """Seconds between cycles (default every 5 s); the service rate is per interval."""
    front_extra: Annotated[int, Field(ge=0)] = 5
    """Tuples kept in the broker beyond one interval's service (default 5)."""
    bootstrap_servers: str | None = None
    """The Kafka cluster (default: ``FLOODGATE_KAFKA_BOOTSTRAP``, then each query
    group's ``kafka.bootstrap_servers``)."""
    host: BindHost = "127.0.0.1"
    """Interface of ``/metrics`` and ``/status`` (an empty or invalid one is refused)."""
    port: Annotated[int, Field(ge=0, le=65_535)] = 8788
    """Port of ``/metrics`` and ``/status``; 0 picks a free one."""
    allowed_hosts: list[HostName] = Field(default_factory=list)
    """Host names ``/metrics`` and ``/status`` answer to besides IP addresses and
    ``localhost`` (the compose stack's ``sweeper``); another ``Host`` is answered 400
    (DNS rebinding)."""
    leader_check_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    """Several sweepers on one catalog: one sweeps (:mod:`pipeline.state.leader`)."""

    @field_validator("blob_store")
    @classmethod
    def _known_store(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme = url.split("://", 1)[0] if "://" in url else ""
        if scheme in OBJECT_SCHEMES:
            split_object_url(url)  # ValueError: says what is wrong with it
        elif scheme != "file" or not url.startswith("file:///"):
            raise ValueError(f"{url!r} is not a BLOB store URL; allowed: {ALLOWED_STORES}")
        return url

    @model_validator(mode="after")
    def _one_store(self) -> SweeperSettings:
        if {"blob_store", "blob_dir"} <= self.model_fields_set and self.blob_store is not None:
            raise ValueError(
                "blob_store and blob_dir both name the BLOB store: set one "
                f"(blob_store={self.blob_store!r}, blob_dir={self.blob_dir!r})"
            )
        return self

    @property
    def blob_location(self) -> tuple[str, str]:
        """``(where the BLOB store is, the key that said so)``: ``blob_store`` when
        set, else ``blob_dir`` (for :func:`pipeline.swept.store.open_blob_store`)."""
        if self.blob_store is not None:
            return self.blob_store, "sweeper.blob_store"
        return self.blob_dir, "sweeper.blob_dir"


class SweeperConfig(BaseModel):
    """A config file of the sweeper: one ``[sweeper]`` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sweeper: SweeperSettings = Field(default_factory=SweeperSettings)


def load_sweeper_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> tuple[SweeperSettings, list[QueryGroupConfig]]:
    """Load and validate the sweeper's config and the query groups it sweeps.

    Raises:
        ConfigError: the file or a query group file is missing or refused, or a query
            group does not read from this sweeper's catalog (both URLs named, their
            passwords shown as ``***``).
    """
    loaded, _source = load_service_config(path, SweeperConfig, section="sweeper", env=env)
    settings = loaded.sweeper
    groups = [load_query_group(p, env=env) for p in settings.query_groups]
    for group_path, group in zip(settings.query_groups, groups, strict=True):
        if group.query_group.sweep_catalog_url != settings.catalog_url:
            theirs = redact_url(group.query_group.sweep_catalog_url or "")
            ours = redact_url(settings.catalog_url)
            raise ConfigError(
                f"{group_path}: query_group.sweep_catalog_url is {theirs!r}, not this "
                f"sweeper's catalog {ours!r}: its sources could not read swept tuples back",
                key="query_group.sweep_catalog_url",
                value=theirs,
                allowed=ours,
            )
    return settings, groups
