"""The sections naming the clusters a query group talks to: ``[kafka]`` (and the
bootstrap servers, which the environment's ``FLOODGATE_KAFKA_BOOTSTRAP`` overrides),
``[schema_registry]`` and ``[spark]``."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from pydantic import Field, SecretStr, field_validator

from pipeline.config.section import Section
from pipeline.errors import ConfigError
from pipeline.kafka.clients import check_pass_through

#: Spark settings whose value is a secret, refused in ``[spark] conf``: Spark's RPC
#: authentication secret (Spark's security guide, "Spark RPC").
SECRET_SPARK_KEYS = frozenset({"spark.authenticate.secret"})

#: Environment variable naming the Kafka bootstrap servers
#: (:func:`pipeline.brokers.local.resolve_broker`).
BOOTSTRAP_ENV = "FLOODGATE_KAFKA_BOOTSTRAP"


class KafkaConfig(Section):
    """The ``[kafka]`` section."""

    bootstrap_servers: str | None = None
    """``host:port[,host:port...]``; ``FLOODGATE_KAFKA_BOOTSTRAP`` wins over it. Unset:
    the broker is resolved by :func:`pipeline.brokers.local.resolve_broker` (an engine named by
    ``FLOODGATE_KAFKA_ENGINE``, else Docker, else the embedded one)."""
    client: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra librdkafka properties for every client (``security.protocol``, ``sasl.*``...);
    not those Floodgate sets itself (:data:`pipeline.kafka.clients.RESERVED_KAFKA_KEYS`)."""

    @field_validator("client")
    @classmethod
    def _check_client(
        cls, value: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        check_pass_through(value)
        return value


class SchemaRegistryConfig(Section):
    """The ``[schema_registry]`` section: the Schema Registry of the streams with
    ``encoding = "confluent"`` (any registry with Confluent's REST API: Confluent's
    own, Karapace, Apicurio Registry's ``/apis/ccompat/v7``)."""

    url: str | None = None
    """The registry's base URL, e.g. ``http://registry:8081``; required when a stream's
    ``encoding`` is ``confluent``."""
    basic_auth_user_info: SecretStr | None = None
    """``user:password`` for HTTP basic authentication (confluent-kafka's
    ``basic.auth.user.info``); never shown in errors or logs."""

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL, e.g. 'http://registry:8081'")
        return value

    def client_config(self) -> dict[str, str]:
        """confluent-kafka's ``SchemaRegistryClient`` configuration (``url``, and
        ``basic.auth.user.info`` when set); empty when no URL is set."""
        if self.url is None:
            return {}
        conf = {"url": self.url}
        if self.basic_auth_user_info is not None:
            conf["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        return conf


class SparkConfig(Section):
    """The ``[spark]`` section."""

    master: str = "local[2]"
    """Used only when not already set (e.g. by ``spark-submit --master``)."""
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra Spark configuration, e.g. ``{"spark.sql.shuffle.partitions" = 2}``; not
    ``spark.authenticate.secret`` (:data:`SECRET_SPARK_KEYS`), which belongs in
    ``spark-defaults.conf`` or a secret file (docs/spark-cluster.md)."""

    @field_validator("conf")
    @classmethod
    def _check_conf(
        cls, value: dict[str, str | int | float | bool]
    ) -> dict[str, str | int | float | bool]:
        for name in value:
            if name in SECRET_SPARK_KEYS:
                raise ConfigError(
                    f"spark.conf may not set {name!r}: a secret in a query group file is "
                    "read by whoever reads the file; give it in spark-defaults.conf "
                    "(mode 0600, SPARK_CONF_DIR), or on Kubernetes in a file named by "
                    "spark.authenticate.secret.file",
                    key=f"spark.conf.{name}",
                    allowed="spark.authenticate.secret in spark-defaults.conf, or "
                    "spark.authenticate.secret.file / .driver.file and .executor.file",
                )
        return value


def bootstrap_from(config: KafkaConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The bootstrap servers named by the environment or the config, if any."""
    env = os.environ if env is None else env
    return env.get(BOOTSTRAP_ENV) or config.bootstrap_servers
