"""Creating the topics of a query group's streams, idempotently."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from pipeline.errors import BrokerError, ConfigError
from pipeline.kafka.clients import kafka_settings
from pipeline.kafka.retries import broker_retrying, transient_kafka_error

log = logging.getLogger(__name__)


def ensure_topics(
    bootstrap_servers: str,
    topics: Mapping[str, tuple[int, int | None]],
    *,
    client: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
    wait_s: float = 0.0,
) -> None:
    """Create topics that do not exist yet.

    Args:
        bootstrap_servers: the cluster.
        topics: ``{topic: (partitions, replication_factor)}``; a replication factor
            of ``None`` is the broker's ``default.replication.factor`` (KIP-464).
        client: extra librdkafka properties.
        timeout_s: how long to wait for the topics to appear in metadata.
        wait_s: how long the first metadata read is asked again, with backoff, while
            the broker answers a transient error (a broker restarting answers
            ``_TRANSPORT``: :func:`~pipeline.kafka.retries.transient_kafka_error`),
            logging ``FG-BROKER-002`` before each new try; 0: not asked again. The
            query group's start waits 60 s: a driver started while its broker
            restarted failed at once with "Failed to get metadata: Local: Broker
            transport failure" (the soak, with Apache Kafka killed by SIGKILL).

    An existing topic is never changed (Kafka cannot shrink a topic, and growing one
    re-maps keys to partitions, so the tuples of a key written before and after would
    lose their order). One with *more* partitions than configured is kept, with the
    warning ``FG-BROKER-001``; one with *fewer* is refused (a topic a broker
    auto-created with its default of 1 partition must not pass for the configured 4).

    Raises:
        ConfigError: a topic exists with fewer partitions than configured; names the
            topic and both counts (``key`` ``partitions``). Nothing is created.
        BrokerError: a topic could not be created, or did not appear in time.
        KafkaException: the metadata could not be read (after ``wait_s`` when the
            error is transient).
    """
    admin = AdminClient(kafka_settings(bootstrap_servers, client))
    started = time.monotonic()
    retrying = broker_retrying(
        transient_kafka_error,
        wait_s,
        lambda attempt, error: log.warning(
            "FG-BROKER-002 broker %s not answering, retrying its metadata "
            "(attempt %d, %.1f s so far): %s",
            bootstrap_servers,
            attempt,
            time.monotonic() - started,
            error,
        ),
    )
    existing = retrying(lambda: admin.list_topics(timeout=timeout_s).topics)
    new = [
        NewTopic(name, num_partitions=parts, replication_factor=-1 if repl is None else repl)
        for name, (parts, repl) in topics.items()
        if name not in existing
    ]
    for name, (parts, _) in topics.items():
        found = len(existing[name].partitions) if name in existing else parts
        if found < parts:
            raise ConfigError(
                f"topic {name!r} exists with {found} partition{'s' if found != 1 else ''}; the "
                f"config asks for {parts}. Floodgate does not add partitions (that re-maps "
                "keys to partitions, so a key's tuples would lose their order): set the "
                f"stream's partitions = {found}, or delete the topic (or grow it by hand, "
                "kafka-topics --alter --partitions, accepting the re-mapping)",
                key="partitions",
                value=parts,
                allowed=f"at most {found}, the topic's partitions",
            )
        if found > parts:
            log.warning(
                "FG-BROKER-001 topic %s exists with %d partitions; config asks for %d; kept as is",
                name,
                found,
                parts,
            )
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
            try:
                future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {name!r}: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=timeout_s).topics
        missing = [
            name
            for name, (parts, _) in topics.items()
            if name not in metadata or len(metadata[name].partitions) < min(parts, 1)
        ]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {missing} did not appear within {timeout_s:.0f} s")
        time.sleep(0.05)
