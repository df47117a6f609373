"""Network partitions on Apache Kafka: the driver, the producer and each broker on an
address of its own (``conftest.py``), a partition a silent blackhole of the network's
hub (``netns.py``), while the ``flights`` query group runs in the test session's
SparkSession and a producer writes through the back-pressure client.

The cases, on one 3-node cluster (replication factor 3,
``min.insync.replicas=2``):

(a) the driver cut from every broker for less than any timeout of its clients
    (:data:`SHORT_CUT_S`: under the consumer session timeout, 45 s, and the
    transaction timeout, 60 s), then healed;
(b) the same for longer than the transaction timeout, set short for the group
    (``[kafka] client`` ``transaction.timeout.ms``, :data:`TRANSACTION_TIMEOUT_MS`),
    while a micro-batch's transaction is open at its coordinator (held by the JVM sink's
    ``before-commit`` failpoint): the coordinator aborts it and the commit is fenced;
    Spark's retry of the write task writes its partition again with a new producer, so
    the group goes on (or, should every attempt fail, is FAILED and a restart on its
    checkpoint resumes), losing and duplicating nothing;
(c) one-sided: only the leader of the output partition unreachable from the driver
    (the rest of the cluster still reaches it, so nothing elects another leader);
(d) one broker cut from the other two: the cluster fences it and the ISR shrinks to
    ``min.insync.replicas``; healed, it catches up and rejoins the ISR.

Each checks: every tuple put is in the pass-through copy exactly once (by key and
record by record, ``read_committed``); the tuple ledger balances; every output
partition's last stable offset reaches its high watermark (no transaction left open);
the producer never had a put refused or a tuple unacknowledged; and the query group is
in the state ``docs/runbook.md`` ("Network partitions") promises.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from confluent_kafka.admin import AdminClient

from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.demo.reception import read_all
from pipeline.errors import QueryGroupError
from pipeline.failpoints import FAILPOINT_ENV
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.query_group import QueryGroup
from pipeline.spark.states import QueryGroupState
from tests.integration.faults.checks import SETTLE_S, check_exactly_once, committed_all, wait_until
from tests.integration.faults.network.conftest import Lab
from tests.integration.faults.network.producer import FIRST, read_state
from tests.integration.helpers import flights_raw_config

pytestmark = pytest.mark.apache_kafka

log = logging.getLogger(__name__)

#: Tuples each case puts (the first producer.FIRST at once, the rest paced).
TUPLES = 3_000

#: Seconds between the producer's paced puts of 100: the rest of TUPLES takes
#: 24 puts, so about 12 s of writing at 0.5 s.
PACE_S = 0.5

#: Case (a)'s partition, seconds: under every timeout of the driver's clients
#: (librdkafka's and the Java consumer's request and session timeouts, 30-60 s; the
#: transaction timeout, 60 s).
SHORT_CUT_S = 15.0


class Case:
    """One case's query group, producer and checks, on the lab's cluster.

    Args:
        lab: the network and cluster.
        spark: the session's SparkSession (the driver, in the root namespace).
        schemas: the schema repository.
        flights: the session's flights (the producer loads the same first TUPLES).
        run_id: names of this case's topics and consumer groups.
        tmp_path: its checkpoints, config and the producer's state and log.
        client: ``[kafka] client`` settings of the group (librdkafka properties).
    """

    def __init__(
        self,
        lab: Lab,
        spark: Any,
        schemas: SchemaRepository,
        flights: list[dict[str, Any]],
        run_id: str,
        tmp_path: Path,
        client: dict[str, Any] | None = None,
    ) -> None:
        self.lab, self.spark, self.schemas = lab, spark, schemas
        self.records = flights[:TUPLES]
        # The copy query alone: the partitions are the sink's and the source's business,
        # which every query has alike; the aggregations would triple a case's time.
        raw = flights_raw_config(
            run_id, tmp_path / "checkpoints", only_passthrough=True, max_tuples_per_trigger=300
        )
        # One output partition: "the output partition's leader" is one broker.
        raw["output_streams"]["flights_copy"]["partitions"] = 1
        if client:
            raw["kafka"] = {"client": client}
        self.config_path = tmp_path / "group.toml"
        self.config_path.write_text(tomli_w.dumps(raw))
        self.config: QueryGroupConfig = parse_query_group(raw, env={})
        self.state_path = tmp_path / "producer.json"
        self.producer_log = tmp_path / "producer.log"
        self.group: QueryGroup | None = None
        self.producer: subprocess.Popen[bytes] | None = None
        self.copy_topic = self.config.output_streams["flights_copy"].topic
        self.started = time.monotonic()
        #: ``(seconds since the case began, what)`` of each step, for the failures' text.
        self.marks: list[tuple[float, str]] = []

    def mark(self, what: str) -> None:
        """Note a step of the case (shown when a check fails, and in the log)."""
        self.marks.append((time.monotonic() - self.started, what))
        log.info("partition case %s: %.1f s: %s", self.config.name, *self.marks[-1])

    def timeline(self) -> str:
        """The steps so far, and the micro-batches that took over 5 s with where their
        time went (Spark's ``durationMs``)."""
        steps = "; ".join(f"{t:.1f} s {what}" for t, what in self.marks)
        slow = []
        for name, query in (self.group.queries() if self.group else {}).items():
            for progress in query.recentProgress:
                took = progress.get("durationMs", {})
                if took.get("triggerExecution", 0) > 5_000:
                    slow.append(f"{name} batch {progress.get('batchId')} at "
                                f"{progress.get('timestamp')}: {took}")  # fmt: skip
        return steps + "".join(f"\n  slow: {line}" for line in slow)

    @property
    def bootstrap(self) -> str:
        return self.lab.bootstrap

    def start(self) -> Case:
        """Create the topics (replication 3), start the group and the producer; return
        once the group wrote its first output, the producer paused after FIRST."""
        ensure_topics(self.bootstrap, self.config.topics())
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        wait_until(
            lambda: set(self.config.topics()) <= admin.list_topics(timeout=10).topics.keys(),
            60,
            "the new topics in the cluster's metadata",
        )
        self.group = QueryGroup(
            self.config, bootstrap_servers=self.bootstrap, spark=self.spark, schemas=self.schemas
        )
        self.group.start()
        self.mark("group started")
        with open(self.producer_log, "ab") as log:
            self.producer = subprocess.Popen(
                self.lab.producer_command(
                    str(self.config_path),
                    self.bootstrap,
                    str(self.state_path),
                    str(TUPLES),
                    "--pace-s",
                    str(PACE_S),
                ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: self.output_count() > 0 or self._producer_failed(), 180, "the first output"
        )
        self.mark("first output")
        return self

    def _producer_failed(self) -> bool:
        assert self.producer is not None
        if self.producer.poll() not in (None, 0):
            raise AssertionError(f"the producer failed:\n{self.producer_log.read_text()[-4000:]}")
        return False

    def go(self) -> None:
        """Let the producer put the rest, paced; return once it is under way."""
        self.state_path.with_suffix(".go").touch()
        wait_until(lambda: read_state(self.state_path)["put"] > FIRST, 60, "paced puts")
        self.mark("paced puts")

    def put(self) -> int:
        """Tuples put so far."""
        return int(read_state(self.state_path)["put"])

    def output_count(self) -> int:
        return len(read_all(self.bootstrap, self.copy_topic))

    # -- checks -----------------------------------------------------------------

    def wait_producer(self) -> None:
        """Wait for the producer to exit; it must have put every tuple, none again."""
        assert self.producer is not None
        try:
            code = self.producer.wait(timeout=SETTLE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the producer did not finish:\n{self.producer_log.read_text()[-4000:]}"
            ) from None
        assert code == 0, self.producer_log.read_text()[-4000:]
        state = read_state(self.state_path)
        assert state["done"], state
        assert not state["retries"], "\n\n".join(state["retries"])

    def check(self, *, state: QueryGroupState | None = None) -> None:
        """The case's checks, once the fault healed: the producer done, every tuple
        processed once, the ledger balanced, no transaction open, and the group in
        ``state`` (default: running, neither FAILED, HELD nor STOPPED)."""
        assert self.group is not None
        self.wait_producer()
        self.mark("producer done")
        wait_until(
            lambda: committed_all(self.bootstrap, self.config),
            SETTLE_S,
            "every query to commit the input's ends",
        )
        self.mark("input committed")
        if state is None:
            assert self.group.state not in (
                QueryGroupState.FAILED,
                QueryGroupState.HELD,
                QueryGroupState.STOPPED,
            ), self.group.state
        else:
            assert self.group.state is state, self.group.state
        check_exactly_once(self.bootstrap, self.config, self.schemas, self.records)
        self.mark("checked")
        log.info("partition case %s: %s", self.config.name, self.timeline())

    def restart(self) -> None:
        """Stop the group and start it again on its checkpoint (what the runbook says
        an operator does with a FAILED group)."""
        assert self.group is not None
        self.group.stop()
        self.group = QueryGroup(
            self.config, bootstrap_servers=self.bootstrap, spark=self.spark, schemas=self.schemas
        )
        self.group.start()
        self.mark("restarted")

    def close(self) -> None:
        """Heal, stop the group and the producer (by its PID)."""
        self.lab.network.heal()
        try:
            if self.group is not None:
                self.group.stop()
        finally:
            if self.producer is not None and self.producer.poll() is None:
                self.producer.kill()
                self.producer.wait(timeout=30)


@pytest.fixture
def case(
    lab: Lab,
    spark: Any,
    schemas: SchemaRepository,
    flights: list[dict[str, Any]],
    run_id: str,
    tmp_path: Path,
) -> Iterator[Callable[..., Case]]:
    made: list[Case] = []

    def make(**kwargs: Any) -> Case:
        one = Case(lab, spark, schemas, flights, run_id, tmp_path, **kwargs)
        made.append(one)
        return one

    yield make
    for one in made:
        one.close()


def cut_driver_from_every_broker(lab: Lab) -> None:
    for broker in lab.brokers.values():
        lab.network.cut(lab.driver, broker)


def test_a_driver_cut_from_every_broker_for_less_than_its_timeouts_goes_on(
    lab: Lab, case: Callable[..., Case]
) -> None:
    one = case().start()
    one.go()
    cut_driver_from_every_broker(lab)
    one.mark("cut")
    put_before = one.put()
    time.sleep(SHORT_CUT_S)
    assert one.put() > put_before, "the producer did not write during the partition"
    lab.network.heal()
    one.mark("healed")
    one.check()


#: Case (b)'s transaction timeout, ms (librdkafka's ``transaction.timeout.ms``; the
#: broker's coordinator aborts a transaction left open longer, and the lab's looks
#: every second).
TRANSACTION_TIMEOUT_MS = 10_000

#: Case (b)'s partition, seconds: over twice the transaction timeout.
LONG_CUT_S = 25.0

#: The micro-batch case (b) holds before its commit: one after the producer's first
#: tuples (batches 0 and 1 at 300 rows a trigger), while the paced puts go on.
HELD_BATCH = 3


def test_b_driver_cut_from_every_broker_for_longer_than_the_transaction_timeout(
    lab: Lab, case: Callable[..., Case], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The cut falls while a micro-batch's transaction is open at its coordinator: the
    # sink's failpoint holds the batch right before commit_transaction (its records
    # delivered, its offsets sent) until the partition has healed.
    release = tmp_path / "release"
    monkeypatch.setenv(FAILPOINT_ENV, f"before-commit:{HELD_BATCH}:wait={release}")
    one = case(client={"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}).start()
    one.go()
    wait_until(Path(f"{release}.reached").exists, SETTLE_S, f"batch {HELD_BATCH}'s commit")
    cut_driver_from_every_broker(lab)
    one.mark(f"batch {HELD_BATCH} held before its commit; cut")
    time.sleep(LONG_CUT_S)
    lab.network.heal()
    release.touch()
    one.mark("healed, batch released")
    assert one.group is not None
    group = one.group
    # The coordinator aborted the transaction past its timeout and bumped the
    # producer's epoch: the commit is fenced and the write task fails; Spark retries it
    # (a cluster's four attempts), and the retry's new producer writes the partition
    # again. Should every attempt fail, the group is FAILED, and a restart resumes from
    # the checkpoint, as docs/runbook.md says.
    sink = group.sinks()["copy"]
    wait_until(
        lambda: sink.batches_written > HELD_BATCH or group.state is QueryGroupState.FAILED,
        SETTLE_S,
        f"batch {HELD_BATCH} written again, or the group to fail",
    )
    monkeypatch.delenv(FAILPOINT_ENV)
    if group.state is QueryGroupState.FAILED:
        one.mark("FAILED")
        assert isinstance(sink.last_error, QueryGroupError), repr(sink.last_error)
        one.restart()
    else:
        one.mark(f"batch {HELD_BATCH} written by a retried task")
    one.check()


def test_c_only_the_output_partitions_leader_unreachable_from_the_driver(
    lab: Lab, case: Callable[..., Case]
) -> None:
    one = case().start()
    leader = lab.cluster.partition_leaders(one.copy_topic)[0]
    one.go()
    lab.network.cut(lab.driver, lab.brokers[leader], both_ways=False)
    one.mark(f"cut driver -> broker {leader}")
    time.sleep(LONG_CUT_S)
    lab.network.heal()
    one.mark("healed")
    one.check()


def in_sync_replicas(lab: Lab, topic: str, via: list[int]) -> set[int]:
    """The ISR of ``topic``'s partition 0, asked of the brokers ``via`` only."""
    admin = AdminClient(
        {
            "bootstrap.servers": ",".join(
                lab.cluster.address(lab.cluster.node_of_broker(i)) for i in via
            )
        }
    )
    return set(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def committed_records(lab: Lab, topic: str, via: list[int]) -> int:
    """How many records of ``topic`` a ``read_committed`` reader sees now, reading
    from the brokers ``via`` (control markers and aborted records are not counted)."""
    nodes = [lab.cluster.node_of_broker(i) for i in via]
    return len(read_all(",".join(lab.cluster.address(n) for n in nodes), topic, timeout_s=30))


def test_d_one_broker_cut_from_the_other_two(lab: Lab, case: Callable[..., Case]) -> None:
    one = case().start()
    controller = lab.cluster.active_controller()
    # The output partition's leader, unless it is the active controller (whose loss
    # means a controller election too: another case); then another broker.
    leader = lab.cluster.partition_leaders(one.copy_topic)[0]
    alone = leader if leader != controller else next(i for i in lab.brokers if i != controller)
    others = [i for i in lab.brokers if i != alone]
    one.go()
    for other in others:
        lab.network.cut(lab.brokers[alone], lab.brokers[other])
    one.mark(f"cut broker {alone} from {others} (controller {controller}, leader {leader})")
    wait_until(
        lambda: in_sync_replicas(lab, one.copy_topic, others) == set(others),
        120,
        f"the output partition's ISR to shrink to {others}",
    )
    one.mark("ISR shrank")
    # The group and the producer write on with the ISR at min.insync.replicas: the
    # output partition's committed records, read from the two, grow. (Not its high
    # watermark: an aborted transaction's marker moves that too.)
    seen: list[int] = []  # the first count, once the two have elected a leader

    def first_count() -> bool:
        seen.append(committed_records(lab, one.copy_topic, others))
        return True

    wait_until(first_count, SETTLE_S, "the output's committed records, read from the two")
    wait_until(
        lambda: committed_records(lab, one.copy_topic, others) > seen[0],
        SETTLE_S,
        "an output transaction committed with two in-sync replicas",
    )
    one.mark("output written with the ISR at 2")
    lab.network.heal()
    one.mark("healed")
    lab.cluster.wait_in_sync(lab.cluster.node_of_broker(alone))
    one.mark("back in sync")
    one.check()
