"""The admission service's config: one ``[admission]`` section of a TOML file, with
``FLOODGATE__ADMISSION__<KEY>=value`` environment overrides (as query group files).

Refused at start, naming the key, the value and what is allowed: an unknown key, a
bad value, a missing token (``token``, or ``FLOODGATE__ADMISSION__TOKEN``), an
allowlist entry that names no executable or a multi-call program, a
``job_env_allowlist`` entry the deny-list covers, the request intake turned on
without its signing key.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from admission.environment import allowlist_entry_reason, invalid_reason
from pipeline.config import DEFAULT_CONTROL_DIR, BindHost, HostName, load_service_config
from pipeline.errors import ConfigError
from pipeline.http.client import CONTROL_TOKEN_ENV
from pipeline.http.gates import (
    DEFAULT_AUTH_WINDOW_S,
    DEFAULT_MAX_AUTH_FAILURES,
    DEFAULT_MAX_BODY_BYTES,
)
from pipeline.kafka.clients import RESERVED_KAFKA_KEYS
from pipeline.names import (
    ADMISSION_DEAD_LETTER_TOPIC,
    ADMISSION_EVENTS_TOPIC,
    ADMISSION_GROUP_ID,
    ADMISSION_REQUEST_TOPIC,
)
from pipeline.security.credentials import MIN_SECRET_BITS, check_distinct, check_secret

#: ``admission.job_path``'s default: the service's Python's folder, then the system's.
DEFAULT_JOB_PATH = ":".join(
    (
        os.path.dirname(os.path.abspath(sys.executable)),
        *("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"),
    )
)


#: The shortest ``admission.intake_key``: 32 characters (HMAC-SHA256 wants a key of at
#: least its output's 32 bytes, RFC 2104 section 3).
MIN_INTAKE_KEY_CHARS = 32

#: librdkafka properties ``admission.kafka_client`` may not set, and why: the intake
#: sets them from other keys, or its at-least-once reading depends on them (those of
#: every Floodgate client, :data:`pipeline.kafka.clients.RESERVED_KAFKA_KEYS`, with the
#: intake's own reasons where it has one).
INTAKE_OWNED_KAFKA_KEYS = {
    **RESERVED_KAFKA_KEYS,
    "bootstrap.servers": "set admission.bootstrap_servers (or FLOODGATE_KAFKA_BOOTSTRAP)",
    "group.id": "set admission.consumer_group",
}


class AdmissionSettings(BaseModel):
    """``[admission]``: where the service listens, what it may run, and the queue's limits
    (docs/how-to/operate-admission.md says how the limits are applied)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: BindHost = "127.0.0.1"
    """Interface of the REST API and metrics: an IPv4 address (``0.0.0.0`` is every
    interface) or a host name; loopback unless set (the service runs commands: it must
    not be reachable by everyone). Empty is refused: it would bind every interface."""
    port: Annotated[int, Field(ge=0, le=65_535)] = 8787
    """Port of the REST API (``/jobs``, ``/stalls``, ``/metrics``); 0 picks a free one."""
    token: SecretStr | None = None
    """Bearer token every mutating call must carry (required): a random secret of 128
    bits or more (``openssl rand -hex 16``), not the intake key; taken as written, also
    from ``FLOODGATE__ADMISSION__TOKEN`` (never parsed as TOML). In this file only when
    the file is mode 0600 or 0400."""
    allowed_hosts: list[HostName] = Field(default_factory=list)
    """Host names the API answers to besides IP addresses and ``localhost`` (the
    compose stack's ``admission``); a request with another ``Host`` is answered 400,
    so a web page cannot reach the API by DNS rebinding."""
    auth_max_failures: Annotated[int, Field(ge=1)] = DEFAULT_MAX_AUTH_FAILURES
    """Failed authentications (401) from one client address within
    ``auth_failure_window_s`` after which its mutating calls are answered 429, the
    token not checked, until the window ends (default 10)."""
    auth_failure_window_s: Annotated[float, Field(gt=0, le=86_400)] = DEFAULT_AUTH_WINDOW_S
    """The window failed authentications are counted in, seconds from an address's
    first failure (default 60)."""
    max_request_body_bytes: Annotated[int, Field(ge=1)] = DEFAULT_MAX_BODY_BYTES
    """Most bytes of a request body (default 1 MiB): a larger one is refused (413) before
    it is read further, let alone parsed."""
    allowlist: list[str] = Field(default_factory=list)
    """Executables jobs may run: paths (relative ones from the service's working
    directory), or names resolved on ``job_path``, at start. A job's program must be
    one of them exactly, after :func:`resolve_program` (the folder resolved, the
    file's own name kept: a symlink on the list admits nothing else), and runs by that
    path with ``argv[0]`` as the job gave it. A job whose program is not on it is
    refused (403) and nothing starts. Known multi-call programs (busybox, Debian's
    ``pg_wrapper``: they run whatever their arguments name) are refused as entries."""
    database_url: str = "sqlite:///.floodgate/admission/jobs.db"
    """The persistent job queue (SQLAlchemy URL)."""
    log_dir: str = ".floodgate/admission/logs"
    """Where each job's output goes (``<job id>.log``, mode 0600; the folder 0700)."""
    job_path: str = DEFAULT_JOB_PATH
    """``PATH`` of every job (a job's own ``env`` may not set it): absolute folders
    joined with ``:``. Default: the folder of the service's Python (its virtualenv's
    ``bin``, where ``floodgate`` and ``spark-submit`` are), then the system's."""
    job_env: dict[str, str] = Field(default_factory=dict)
    """Variables set for every job, by the operator (``SPARK_HOME``,
    ``HADOOP_CONF_DIR``, ...): they may name what a job's own ``env`` may not; not the
    service's own ``FLOODGATE__ADMISSION__*``."""
    job_env_allowlist: list[str] = Field(default_factory=list)
    """Variables a job's own ``env`` may set: names (matched exactly) and prefixes
    ending in ``*`` (``APP_*``); ``*`` alone allows any name. Empty (the default): a job
    sets none, only the base set and ``job_env`` reach it. The deny-list
    (:mod:`admission.environment`) still refuses what it names, and an entry it wholly
    covers (``LD_PRELOAD``, ``SPARK_*``) is refused at start."""
    system_cpu_limit: Annotated[float, Field(gt=0, le=1)] = 0.85
    """Low load: system CPU busy ratio at or below this (default 85 %)."""
    memory_usage_limit: Annotated[float, Field(gt=0, le=1)] = 0.90
    """Emergency mode above this memory usage ratio (default 90 %; the host's memory or a
    Spark driver's heap, whichever is fuller)."""
    check_interval_ms: Annotated[int, Field(ge=10, le=60_000)] = 100
    """How often load is sampled and enqueued jobs considered (default 10 times a second)."""
    initial_load_step: Annotated[int, Field(ge=1)] = 2
    """Enqueued jobs started at one check under low load, at start; the load step then
    grows by one while the load stays low after a batch and is halved when it rises."""
    min_load_step: Annotated[int, Field(ge=1)] = 1
    """Smallest load step (at most ``initial_load_step``)."""
    max_load_step: Annotated[int, Field(ge=1)] = 16
    """Largest load step (at least ``initial_load_step``)."""
    emergency_start_count: Annotated[int, Field(ge=0)] = 1
    """Most jobs started per check in emergency mode."""
    max_queue_size: Annotated[int, Field(ge=0)] = 100_000
    """Most jobs enqueued at once (default 100 000); a submit beyond it fails."""
    monitor_interval_s: Annotated[float, Field(gt=0, le=3_600)] = 5.0
    """How often the monitor looks for jobs running past their expected time."""
    driver_control_dir: str | None = DEFAULT_CONTROL_DIR
    """Where query groups of this host write their control files (``<name>.json`` with
    their metrics URL): their driver JVM heaps count in the memory usage (emergency
    mode). ``None``: none found this way."""
    driver_metrics_urls: list[str] = Field(default_factory=list)
    """More Spark driver endpoints (``http://host:port``, serving
    ``floodgate_query_group_jvm_heap_*`` at ``/metrics``; a URL ending in ``/metrics``
    names the same endpoint) whose heap counts in the memory usage."""
    driver_heap_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    """How often the drivers' heaps are read (in the background; the check never waits)."""
    leader_check_interval_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    """How often a follower tries the leader lock and the leader checks it holds it
    (several instances on one PostgreSQL database)."""
    intake: bool = False
    """Read job commands from ``request_topic`` too (off by default: the REST API only).
    Every request must then be signed with ``intake_key`` (:mod:`admission.signing`);
    turning it on without the key is refused at start. On a cluster with ACLs, grant
    WRITE on the topic only to the principals that may submit jobs."""
    intake_key: SecretStr | None = None
    """The key (at least 32 characters; ``openssl rand -hex 32`` makes one) that signs
    every request of the intake (HMAC-SHA256): required with ``intake``, also from
    ``FLOODGATE__ADMISSION__INTAKE_KEY``. Give it to the requesters, never to a job."""
    intake_max_age_s: Annotated[float, Field(ge=1, le=86_400)] = 300.0
    """How old (or how far ahead of this host's clock) a request's signature may be,
    seconds (default 5 minutes); an older one is dead-lettered, and a signature seen
    once is refused again within this window (a replay)."""
    bootstrap_servers: str | None = None
    """Kafka cluster of the request and events topics (default: ``FLOODGATE_KAFKA_BOOTSTRAP``);
    needed with ``intake``."""
    request_topic: str = ADMISSION_REQUEST_TOPIC
    """Job commands as Avro ``job_request`` tuples (``schemas/job_request.avsc``); the
    message key comes back in the job's events as ``client_key``."""
    events_topic: str = ADMISSION_EVENTS_TOPIC
    """Every change of a job's state, as Avro ``job_event`` tuples keyed by job id."""
    dead_letter_topic: str = ADMISSION_DEAD_LETTER_TOPIC
    """Requests that could not be taken (undecodable, refused), with the reason in headers."""
    consumer_group: str = ADMISSION_GROUP_ID
    """The consumer group of the request topic."""
    kafka_client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra librdkafka properties of the intake's producer, consumer and admin client,
    as a query group's ``[kafka] client``: ``security.protocol``, ``sasl.*``, ``ssl.*``
    to reach a TLS or SASL cluster. Not the ones the intake sets from other
    keys or relies on (:data:`INTAKE_OWNED_KAFKA_KEYS`)."""

    @field_validator("kafka_client")
    @classmethod
    def _check_kafka_client(
        cls, value: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        for key in value:
            if key in INTAKE_OWNED_KAFKA_KEYS:
                raise ValueError(
                    f"kafka_client may not set {key!r}: {INTAKE_OWNED_KAFKA_KEYS[key]}"
                )
        return value

    @field_validator("job_path")
    @classmethod
    def _check_job_path(cls, value: str) -> str:
        for entry in value.split(":"):
            if not entry or "\0" in entry or not os.path.isabs(entry):
                raise ValueError(
                    f"job_path entry {entry!r} is not an absolute folder; job_path is "
                    "absolute folders joined with ':' (an empty or relative entry would "
                    "run programs from the job's working directory)"
                )
        return value

    @field_validator("allowlist")
    @classmethod
    def _check_allowlist(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not entry or "\0" in entry:
                raise ValueError(f"allowlist entry {entry!r} is empty or holds a NUL byte")
        return value

    @field_validator("job_env_allowlist")
    @classmethod
    def _check_job_env_allowlist(cls, value: list[str]) -> list[str]:
        for entry in value:
            why = allowlist_entry_reason(entry)
            if why is not None:
                raise ValueError(f"job_env_allowlist: {why}")
        return value

    @field_validator("job_env")
    @classmethod
    def _check_job_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name, val in value.items():
            why = invalid_reason(name, val)
            if why is None and name.upper().startswith("FLOODGATE__ADMISSION__"):
                why = f"{name!r} is the admission service's own setting, never a job's"
            if why is not None:
                raise ValueError(f"job_env: {why}")
        return value

    @model_validator(mode="after")
    def _check_steps(self) -> AdmissionSettings:
        if not self.min_load_step <= self.initial_load_step <= self.max_load_step:
            raise ValueError(
                "load steps must satisfy min_load_step <= initial_load_step <= max_load_step; "
                f"got {self.min_load_step}, {self.initial_load_step}, {self.max_load_step}"
            )
        return self

    def resolved_allowlist(self) -> dict[str, str]:
        """``{absolute path: as configured}`` of every allowlist entry.

        Raises:
            ConfigError: an entry names no executable file, or a known multi-call
                program (:data:`MULTI_CALL_PROGRAMS`).
        """
        resolved: dict[str, str] = {}
        for entry in self.allowlist:
            path = resolve_program(entry, self.job_path)
            if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
                raise ConfigError(
                    f"admission.allowlist entry {entry!r} names no executable "
                    "(an absolute path, or a program on admission.job_path)",
                    key="admission.allowlist",
                    value=entry,
                    allowed="absolute paths or names of programs on admission.job_path",
                )
            target = os.path.basename(os.path.realpath(path))
            if target in MULTI_CALL_PROGRAMS:
                raise ConfigError(
                    f"admission.allowlist entry {entry!r} is {os.path.realpath(path)}, "
                    f"{MULTI_CALL_PROGRAMS[target]}: allowlisting it would admit every "
                    "program it can run; allowlist the real program instead",
                    key="admission.allowlist",
                    value=entry,
                    allowed="programs that run only themselves",
                )
            resolved[path] = entry
        return resolved


#: Programs that run another program named by their ``argv[0]`` or ``argv[1]`` (by the
#: name of the file they are run as: their symlinks), refused as allowlist entries.
MULTI_CALL_PROGRAMS: Mapping[str, str] = {
    "busybox": "BusyBox, which runs any of its applets its arguments name",
    "toybox": "Toybox, which runs any of its commands its arguments name",
    "coreutils": "the multi-call coreutils, which runs any utility its arguments name",
    "pg_wrapper": "Debian's PostgreSQL wrapper, which runs any program its arguments name",
}


def resolve_program(program: str, search_path: str | None = None) -> str | None:
    """The absolute path a program name stands for, as the allowlist and every job's
    ``argv[0]`` are compared: a path (with a ``/``) from the working directory, a bare
    name looked up on ``search_path`` (``admission.job_path``; default ``PATH``).

    The folder is resolved (``/bin`` and ``/usr/bin`` are one folder on merged-usr
    systems); the file's own name is kept, not followed when it is a symlink: a
    multi-call program dispatches on that name, so ``pg_isready`` and ``pg_dump``,
    two symlinks to one wrapper, stay two programs.

    Returns:
        The path, or ``None`` when a name is on no folder of the path, or ``program``
        is empty or holds a NUL byte (no process can be given it).
    """
    if not program or "\0" in program:
        return None
    path = (
        os.path.abspath(program) if os.sep in program else shutil.which(program, path=search_path)
    )
    if not path:
        return None
    folder, name = os.path.split(path)
    return os.path.join(os.path.realpath(folder), name)


class AdmissionConfig(BaseModel):
    """A config file of the admission service: one ``[admission]`` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)


def load_admission_config(
    path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> AdmissionSettings:
    """Load, override from the environment, and validate the admission config.

    Args:
        path: the TOML file; ``None``: defaults and environment only.
        env: environment (default ``os.environ``).

    Raises:
        ConfigError: the file is missing or not TOML, a key is unknown or refused (named
            with its value and what is allowed), the file holds a secret and group or
            others may read it, the token is missing or weaker than 128 bits
            (:func:`~pipeline.security.credentials.check_secret`), so is the intake
            key, the token, the intake key and ``FLOODGATE_CONTROL_TOKEN`` are not
            three different values, or an allowlist entry names no executable.
    """
    env = os.environ if env is None else env
    loaded, source = load_service_config(path, AdmissionConfig, section="admission", env=env)
    settings = loaded.admission
    if settings.token is None or not settings.token.get_secret_value():
        raise ConfigError(
            f"{source}: admission.token is required (every mutating call needs it as a "
            "bearer token); set it in [admission] or FLOODGATE__ADMISSION__TOKEN",
            key="admission.token",
            allowed=f"a random secret of at least {MIN_SECRET_BITS} bits",
        )
    token = settings.token.get_secret_value()
    intake_key = settings.intake_key.get_secret_value() if settings.intake_key else ""
    if settings.intake and len(intake_key) < MIN_INTAKE_KEY_CHARS:
        raise ConfigError(
            f"{source}: admission.intake is on, so every request on "
            f"{settings.request_topic} must be signed: admission.intake_key must be "
            f"a secret of at least {MIN_INTAKE_KEY_CHARS} characters (got "
            f"{len(intake_key)}); set it in [admission] or FLOODGATE__ADMISSION__INTAKE_KEY, "
            "or turn admission.intake off",
            key="admission.intake_key",
            allowed=f"a secret of at least {MIN_INTAKE_KEY_CHARS} characters",
        )
    try:
        check_secret(token, setting="admission.token")
        if intake_key:
            check_secret(intake_key, setting="admission.intake_key")
        check_distinct(
            {
                "admission.token": token,
                "admission.intake_key": intake_key,
                CONTROL_TOKEN_ENV: env.get(CONTROL_TOKEN_ENV),
            }
        )
    except ConfigError as exc:
        raise ConfigError(
            f"{source}: {exc}", key=exc.key, value=exc.value, allowed=exc.allowed
        ) from None
    settings.resolved_allowlist()
    return settings
