"""Every Kafka client's librdkafka properties, built in one place.

A Floodgate client (a producer, a consumer, an admin client) takes three layers, in
this order, later ones winning:

1. ``bootstrap.servers``;
2. the user's pass-through properties: a query group's ``[kafka] client``, the
   admission service's ``kafka_client``, a source's ``kafka.*`` options (security:
   ``security.protocol``, ``sasl.*``, ``ssl.*``; timeouts; fetch sizes);
3. the role's own properties (a queue probe's fetch settings, a reader's consumer
   group...), and ``allow.auto.create.topics = false`` for every client: a topic a
   broker creates with its default partition count must never pass for a configured
   one.

Each client plays one of four roles, each built by its function here and nowhere else:

* a **reader that never commits** (:func:`reader_settings`): it assigns partitions and
  reads (the ledger, a queue's age, the sweeper's ranges, the demo's readers); its
  ``group.id`` only names it to the broker;
* a **committed reader** (:func:`committed_reader_settings`): it commits its consumer
  group's offsets itself, once it has handled the tuples below them (a stream's
  reception, the admission intake), never on librdkafka's timer;
* an **idempotent producer** (:func:`idempotent_producer_settings`): every replica's
  ack, no duplicate on a retry (the input client, the admission intake's events);
* a **transactional producer**: the Java sink's, on the executors
  (``io.floodgate.spark.write.TransactionalProducers``); no Python client writes in
  transactions.

The pass-through may not set what Floodgate's guarantees rest on
(:data:`RESERVED_KAFKA_KEYS`): :func:`check_pass_through` refuses those at start, with
the reason, and :func:`kafka_settings` again for a client built without a config file.
As quix-streams' ``ConnectionConfig.as_librdkafka_dict()`` owns its connection settings,
this module owns the merge. One client builds its properties elsewhere, on purpose: the
Spark source's consumers, on the JVM (``io.floodgate.spark.kafka.KafkaClients``), whose
``kafka.*`` options follow Spark's Kafka source (a user's ``kafka.isolation.level`` is
honoured there, as in Spark; ``tests/golden/contract/source.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.errors import ConfigError

#: librdkafka properties a user's pass-through may not set, and why: Floodgate sets them
#: from other keys, or its exactly-once and back-pressure rules depend on them.
RESERVED_KAFKA_KEYS: dict[str, str] = {
    "bootstrap.servers": "set [kafka] bootstrap_servers (or FLOODGATE_KAFKA_BOOTSTRAP)",
    "group.id": "consumer groups are derived from the query group's names (pipeline.names)",
    "transactional.id": "a sink's transactional id is derived from its query's consumer group",
    "enable.idempotence": "Floodgate's producers are idempotent (exactly-once output, no "
    "duplicate on a retry)",
    "acks": "Floodgate's producers wait for every in-sync replica (acks=all)",
    "isolation.level": "Floodgate reads committed transactions only (read_committed)",
    "enable.auto.commit": "offsets are committed with a micro-batch's output, in its "
    "transaction, or by the reader once it has handled them",
    "enable.auto.offset.store": "offsets are stored by the reader once it has handled them",
    "auto.offset.reset": "where a reader starts is its own setting (startingOffsets); an "
    "offset the broker no longer holds is read from its BLOB or reported, never skipped",
    "allow.auto.create.topics": "topics are created with their configured partitions",
}


def check_pass_through(client: Mapping[str, Any], *, key: str = "kafka.client") -> None:
    """Refuse a pass-through that sets a :data:`RESERVED_KAFKA_KEYS` property.

    Args:
        client: the user's librdkafka properties.
        key: where they were given, for the error (``kafka.client``,
            ``admission.kafka_client``).

    Raises:
        ConfigError: naming the property, its value and why Floodgate sets it.
    """
    for name, value in client.items():
        if name in RESERVED_KAFKA_KEYS:
            raise ConfigError(
                f"{key} may not set {name!r}: {RESERVED_KAFKA_KEYS[name]}",
                key=f"{key}.{name}",
                value=value,
                allowed="any librdkafka property but " + ", ".join(sorted(RESERVED_KAFKA_KEYS)),
            )


def kafka_settings(
    bootstrap_servers: str,
    client: Mapping[str, Any] | None = None,
    own: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One client's librdkafka properties: ``bootstrap.servers``, then the user's
    ``client`` pass-through, then ``own`` (the role's), then
    ``allow.auto.create.topics = false`` (a metadata request must never
    create a topic with the broker's default partition count).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        client: the user's pass-through (security, timeouts, fetch sizes).
        own: the role's properties; they win over ``client``.

    Raises:
        ConfigError: ``client`` sets a :data:`RESERVED_KAFKA_KEYS` property.
    """
    check_pass_through(client or {})
    return {
        "bootstrap.servers": bootstrap_servers,
        **(client or {}),
        **(own or {}),
        "allow.auto.create.topics": False,
    }


#: Read-committed or not, as librdkafka spells it.
_ISOLATION = {True: "read_committed", False: "read_uncommitted"}


def reader_settings(
    bootstrap_servers: str,
    client: Mapping[str, Any] | None = None,
    *,
    group_id: str,
    committed_only: bool = True,
    own: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A reader that never commits: ``group_id`` (librdkafka wants one; a name from
    :mod:`pipeline.names`), no commit and no offset stored on librdkafka's timer, so
    the consumer group's committed offsets are never touched.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        client: the user's pass-through.
        group_id: the reader's ``group.id``.
        committed_only: ``read_committed`` (records of open or aborted transactions
            skipped) or ``read_uncommitted`` (a queue's age counts an open
            transaction's tuples).
        own: more of the reader's properties (fetch sizes, ``auto.offset.reset``).

    Raises:
        ConfigError: ``client`` sets a :data:`RESERVED_KAFKA_KEYS` property.
    """
    return _consumer_settings(
        bootstrap_servers,
        client,
        group_id,
        committed_only,
        {"enable.auto.offset.store": False, **(own or {})},
    )


def committed_reader_settings(
    bootstrap_servers: str,
    client: Mapping[str, Any] | None = None,
    *,
    group_id: str,
    own: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A committed reader: consumer group ``group_id``, ``read_committed``, and no
    commit on librdkafka's timer (``enable.auto.commit = false``): the reader commits
    with ``Consumer.commit`` once it has handled what it read, so a crash reads again
    what was not handled (at least once) rather than skipping it.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        client: the user's pass-through.
        group_id: the consumer group whose offsets it commits.
        own: more of the reader's properties (``auto.offset.reset``, fetch sizes).

    Raises:
        ConfigError: ``client`` sets a :data:`RESERVED_KAFKA_KEYS` property.
    """
    return _consumer_settings(bootstrap_servers, client, group_id, True, own or {})


def _consumer_settings(
    bootstrap_servers: str,
    client: Mapping[str, Any] | None,
    group_id: str,
    committed_only: bool,
    own: Mapping[str, Any],
) -> dict[str, Any]:
    """A consumer's properties: its ``group.id``, no commit on librdkafka's timer, its
    isolation level, then ``own``."""
    return kafka_settings(
        bootstrap_servers,
        client,
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "isolation.level": _ISOLATION[committed_only],
            **own,
        },
    )


def idempotent_producer_settings(
    bootstrap_servers: str,
    client: Mapping[str, Any] | None = None,
    own: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An idempotent producer: ``enable.idempotence`` (a retried batch is written once,
    in order, per partition) and ``acks = all`` (every in-sync replica has a tuple
    before it counts as sent).

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        client: the user's pass-through.
        own: more of the producer's properties (``delivery.report.only.error``).

    Raises:
        ConfigError: ``client`` sets a :data:`RESERVED_KAFKA_KEYS` property.
    """
    return kafka_settings(
        bootstrap_servers, client, {**(own or {}), "enable.idempotence": True, "acks": "all"}
    )
