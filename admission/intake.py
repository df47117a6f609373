"""The admission service's Kafka side: signed job commands from a request topic, job
events out.

Off unless ``admission.intake`` is on, and then only with ``admission.intake_key``:
the request topic is a second door to the service, and it must be as shut as the
REST API's, whose every call needs the admission token.

* **Requests**: Avro ``job_request`` tuples (``schemas/job_request.avsc``, single-object
  encoding as every Floodgate stream) on ``request_topic``, read through
  ``consumer_group``, each signed with ``admission.intake_key``
  (:mod:`admission.signing`). :class:`RequestTaker` takes one at a time:

  1. it checks the signature before anything else (``not-authenticated``);
  2. it decodes the tuple and validates it with :class:`~admission.jobs.JobRequest`,
     the model of ``POST /jobs``, so what REST refuses (422) is refused here too
     (``bad-request``);
  3. it looks the signature up in the store's run-once record: a signed request is
     run at most once, whatever offset it is read at (below);
  4. it submits it through :meth:`AdmissionService.submit`: the allowlist, the env
     rules and the queue's limits hold as for REST (``not-allowed``, ``queue-full``,
     ``refused``). The signature is recorded with the job it creates, in the job's
     transaction, or with the reason it was refused.

  The message key, if any, is kept as the job's ``client_key``.
* **Refused requests** go to ``dead_letter_topic`` with the original key, value and
  headers and ``floodgate.reason`` (above; ``error`` for a failure of the service
  itself), ``floodgate.error``, ``floodgate.topic``, ``floodgate.partition``,
  ``floodgate.offset``. A request that fails, whatever the reason, is dead-lettered
  and the rest of its batch still runs: nothing is dropped or skipped silently.
* **Events**: every change of a job's state, as Avro ``job_event`` tuples keyed by
  job id, on ``events_topic``.

Offsets are committed after a batch of requests was handled, so a crash in between
delivers those records again (at least once). The run-once record is kept by
signature, not by offset, so whoever moves the consumer group's offsets back runs
nothing twice. A signature already recorded is, read again:

* at the offset it was first read from (a crash before the commit, or a rewound
  consumer group): not run again; one the service took is skipped with a warning
  (``FG-ADM-007``; its job stays the one job), one it refused is dead-lettered again
  with the same reason (the first dead letter may have been lost in the crash);
* at another offset (the same signed request written again): dead-lettered
  ``replayed``.

The record is kept at least until the last moment the signature's age check accepts
it (``2 * admission.intake_max_age_s`` and a second after it was taken); after that
the age check refuses the request (``not-authenticated``) before the record is looked
up. The store's primary key on the signature keeps two instances (leader election)
from both running it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from pydantic import ValidationError

from admission.config import AdmissionSettings
from admission.errors import (
    AdmissionError,
    AdmissionQueueFull,
    CommandNotAllowed,
    EnvNotAllowed,
    IntakeSignatureTaken,
    InvalidJob,
    RequestNotAuthenticated,
    RequestReplayed,
)
from admission.jobs import JobRequest
from admission.service import AdmissionService
from admission.signing import verify
from admission.store import IntakeSignature, Job, TakenSignature
from pipeline.errors import DeserializationError
from pipeline.kafka.clients import committed_reader_settings, idempotent_producer_settings
from pipeline.kafka.fetching import rest_until_records
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec
from pipeline.serde.schemas import SchemaRepository

log = logging.getLogger(__name__)
#: How long the intake stops fetching after a read that returned nothing, seconds (a
#: request waits at most this much longer to be seen).
IDLE_S = 0.25

#: ``floodgate.reason`` of a dead-lettered request, by the refusal (else ``refused``).
_REASONS: dict[type[AdmissionError], str] = {
    RequestNotAuthenticated: "not-authenticated",
    RequestReplayed: "replayed",
    InvalidJob: "bad-request",
    CommandNotAllowed: "not-allowed",
    EnvNotAllowed: "not-allowed",
    AdmissionQueueFull: "queue-full",
}


@dataclass(frozen=True)
class IntakeRecord:
    """One Kafka record of the request topic, as the intake takes it: a record, not a
    tuple, as its offset and headers (the signature's) are read with it; its ``value``
    is the tuple (docs/glossary.md).

    Attributes:
        topic, partition, offset: where it was read.
        key: the record's key (the job's ``client_key``), or ``None``.
        value: the encoded ``job_request`` tuple.
        headers: the record's headers, the signature's among them.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes | str | None]] = field(default_factory=list)

    @classmethod
    def of(cls, message: Message) -> IntakeRecord:
        """The record a consumed message holds."""
        headers = message.headers() or []
        return cls(
            message.topic() or "",
            message.partition() or 0,
            message.offset() or 0,
            message.key(),
            message.value() or b"",
            list(headers.items() if isinstance(headers, dict) else headers),
        )

    @property
    def where(self) -> str:
        """``topic/partition/offset``."""
        return f"{self.topic}/{self.partition}/{self.offset}"


@dataclass(frozen=True)
class Refused:
    """Why a request was not taken: its ``floodgate.reason`` and ``floodgate.error``."""

    reason: str
    error: str


@dataclass(frozen=True)
class Redelivered:
    """A signed request read again at the offset it was first taken from: not run again.

    Attributes:
        job_id: the job its first reading created.
    """

    job_id: int


def refusal_reason(exc: AdmissionError) -> str:
    """The ``floodgate.reason`` of a refusal (``refused`` when it has none of its own)."""
    return _REASONS.get(type(exc), "refused")


def validation_message(exc: ValidationError) -> str:
    """What a refused ``job_request`` got wrong, field by field, without its values
    (an ``env`` value may be a secret)."""
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'request'}: {error['msg']}"
        for error in exc.errors()
    )


class RequestTaker:
    """Takes one request of the request topic at a time: authenticated, validated as
    REST validates, recorded against replays, submitted (the module's steps 1-4).

    Args:
        service: the admission service.
        codec: the ``job_request`` codec.
        clock: epoch seconds (the signature's age is measured with it).
    """

    def __init__(
        self,
        service: AdmissionService,
        codec: StreamCodec,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = service.settings
        if settings.intake_key is None:
            raise ValueError("the request intake needs admission.intake_key")
        self.service = service
        self.codec = codec
        self.clock = clock
        self._key = settings.intake_key.get_secret_value()
        self._max_age_s = settings.intake_max_age_s

    def take(self, record: IntakeRecord) -> Job | Refused | Redelivered:
        """Submit one request, or say why not, or that it was taken already from the
        same offset; never raises for a request (a failure of the service itself is
        ``Refused("error", ...)``: the request is dead-lettered, and the next one is
        taken)."""
        try:
            return self._take(record)
        except AdmissionError as exc:
            return Refused(refusal_reason(exc), str(exc))
        except DeserializationError as exc:
            return Refused("bad-request", str(exc))
        except ValidationError as exc:
            return Refused("bad-request", validation_message(exc))
        except Exception as exc:  # the request fails alone; the batch goes on
            log.exception("admission intake: request %s failed", record.where)
            return Refused("error", f"{type(exc).__name__}: {exc}")

    def _take(self, record: IntakeRecord) -> Job | Refused | Redelivered:
        now = self.clock()
        signature = verify(
            self._key,
            topic=record.topic,
            key=record.key,
            value=record.value,
            headers=record.headers,
            now_ms=int(now * 1000),
            max_age_ms=int(self._max_age_s * 1000),
        )
        request = JobRequest.model_validate(self.codec.decode(record.value))
        # The age check accepts the signature until signed-at + max_age, and signed-at
        # is at most now + max_age: kept until now + 2 * max_age (and a second, as the
        # check counts whole milliseconds), the record outlives every time it accepts.
        taken = IntakeSignature(signature, record.where, now + 2 * self._max_age_s + 1.0)
        client_key = record.key.decode("utf-8", "replace") if record.key is not None else None
        store = self.service.store
        for _ in range(2):
            first = store.taken_signature(signature, now=now)
            if first is not None:
                return self._again(record, first)
            try:
                return self.service.submit(request.spec(), client_key=client_key, signature=taken)
            except IntakeSignatureTaken:
                continue  # another instance took it meanwhile: do what its record says
            except AdmissionError as exc:
                store.refuse_signature(taken, refusal_reason(exc))
                raise
        raise RuntimeError(f"request {record.where}: its signature could not be recorded")

    @staticmethod
    def _again(record: IntakeRecord, first: TakenSignature) -> Refused | Redelivered:
        """A signed request read again (the module's run-once rule).

        Raises:
            RequestReplayed: it was first read at another offset.
        """
        if first.taken_from != record.where:
            raise RequestReplayed(
                f"this signed request was taken from {first.taken_from} already; a "
                "requester signs each request anew"
            )
        if first.refused is not None:
            return Refused(
                first.refused,
                f"read again from {record.where}, where it was refused ({first.refused}) "
                "before; not tried again",
            )
        assert first.job_id is not None
        return Redelivered(first.job_id)


class KafkaIntake:
    """Reads the request topic into the service and publishes its job events.

    Args:
        service: the admission service.
        bootstrap_servers: the Kafka cluster.
        schemas: the schema repository (``job_request``, ``job_event``).

    Raises:
        ValueError: ``admission.intake_key`` is not set (:func:`load_admission_config
            <admission.config.load_admission_config>` refuses that at start).

    Every Kafka client of the intake (producer, consumer, the admin client that creates
    the topics) takes ``admission.kafka_client``, as every client of a query group
    takes its ``[kafka] client``.
    """

    def __init__(
        self,
        service: AdmissionService,
        *,
        bootstrap_servers: str,
        schemas: SchemaRepository | None = None,
    ) -> None:
        self.service = service
        self.settings: AdmissionSettings = service.settings
        self.bootstrap_servers = bootstrap_servers
        schemas = schemas or SchemaRepository.load()
        self.requests = StreamCodec("job_request", schemas.get("job_request"), schemas)
        self.taker = RequestTaker(service, self.requests)
        self.events = StreamCodec("job_event", schemas.get("job_event"), schemas)
        #: ``admission.kafka_client`` (``security.protocol``, ``sasl.*``, ``ssl.*``...):
        #: every client of the intake takes it (producer, consumer and admin client).
        self.client: dict[str, Any] = dict(self.settings.kafka_client)
        self._producer = Producer(idempotent_producer_settings(bootstrap_servers, self.client))
        self._consumer: Consumer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Requests taken, dead-lettered, and read again where they were taken, so far
        #: (tests and logs).
        self.taken = 0
        self.dead_lettered = 0
        self.redelivered = 0

    def start(self) -> KafkaIntake:
        """Create the topics if missing, subscribe, publish events, read in a thread."""
        s = self.settings
        ensure_topics(
            self.bootstrap_servers,
            {t: (1, 1) for t in (s.request_topic, s.events_topic, s.dead_letter_topic)},
            client=self.client,
        )
        self._consumer = Consumer(
            committed_reader_settings(
                self.bootstrap_servers,
                self.client,
                group_id=s.consumer_group,
                own={"auto.offset.reset": "earliest"},
            )
        )
        self._consumer.subscribe([s.request_topic])
        self.service.listeners.append(self.publish)
        self._thread = threading.Thread(target=self._run, name="admission-intake", daemon=True)
        self._thread.start()
        log.info("admission intake reading %s at %s", s.request_topic, self.bootstrap_servers)
        return self

    def _rest(self) -> None:
        """Nothing arrived: rest until a request does (at most :data:`IDLE_S` between
        looks at the broker; :func:`pipeline.kafka.fetching.rest_until_records`). librdkafka
        fetches an assigned partition all along, and a broker that answers a fetch at
        the log end at once instead of holding it for ``fetch.wait.max.ms`` (the
        embedded broker, docs/kafka-engines.md) made the idle intake a busy loop of about
        0.85 of a core, reader and broker together, on the 2-core development machine."""
        assert self._consumer is not None
        rest_until_records([self._consumer], stop=self._stop, poll_s=IDLE_S)

    def _run(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            try:
                messages = self._consumer.consume(num_messages=100, timeout=0.1)
                if not messages:
                    self._rest()
                    continue
                handled = False
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            log.warning("request topic: %s", error)
                        continue
                    self._handle(IntakeRecord.of(message))
                    handled = True
                if handled:
                    self._producer.flush(30)  # dead letters and events before the commit
                    self._consumer.commit(asynchronous=False)
            except Exception:
                log.exception("admission intake: a batch failed; retrying")
                time.sleep(1.0)

    def _handle(self, record: IntakeRecord) -> None:
        outcome = self.taker.take(record)
        if isinstance(outcome, Refused):
            self._dead_letter(record, outcome)
            return
        if isinstance(outcome, Redelivered):
            self.redelivered += 1
            log.warning(
                "FG-ADM-007 request %s read again: already taken as job %d there, not run "
                "again (a crash before the offset commit, or the consumer group's offsets "
                "moved back)",
                record.where,
                outcome.job_id,
            )
            return
        self.taken += 1
        log.info("request %s: job %d", record.where, outcome.id)

    def _dead_letter(self, record: IntakeRecord, refused: Refused) -> None:
        self.dead_lettered += 1
        log.warning(
            "FG-ADM-004 request %s dead-lettered (%s): %s",
            record.where,
            refused.reason,
            refused.error,
        )
        # The request's own headers are not copied: the dead letter's floodgate.* are
        # the intake's alone.
        headers: list[tuple[str, Any]] = [
            ("floodgate.reason", refused.reason),
            ("floodgate.error", refused.error[:2000]),
            ("floodgate.topic", record.topic),
            ("floodgate.partition", str(record.partition)),
            ("floodgate.offset", str(record.offset)),
        ]
        self._producer.produce(
            self.settings.dead_letter_topic,
            key=record.key,
            value=record.value,
            headers=headers,
        )

    def publish(self, job: Job) -> None:
        """A job's state as a ``job_event`` on the events topic (a service listener)."""
        self._producer.produce(
            self.settings.events_topic,
            key=str(job.id).encode(),
            value=self.events.encode(
                {
                    "job_id": job.id,
                    "state": job.state.value,
                    "time": int(time.time() * 1000),
                    "exit_code": job.exit_code,
                    "lane": job.lane,
                    "client_key": job.client_key,
                }
            ),
        )
        self._producer.poll(0)

    def stop(self) -> None:
        """Stop reading; flush events and dead letters; leave the consumer group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.publish in self.service.listeners:
            self.service.listeners.remove(self.publish)
        self._producer.flush(10)
        if self._consumer is not None:
            self._consumer.close()
