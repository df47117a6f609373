"""The admission service's Kafka side: job commands from a request topic, job events out.

* **Requests**: Avro ``job_request`` tuples (``schemas/job_request.avsc``, single-object
  encoding as every Floodgate stream) on ``request_topic``, read through
  ``consumer_group``. Each goes through :meth:`AdmissionService.submit`, so the
  allowlist and the queue's limits hold as for the REST API. The message key, if
  any, is kept as the job's ``client_key``.
* **Refused or undecodable requests** go to ``dead_letter_topic`` with the original
  key and value and headers ``floodgate.reason`` (``bad-request``, ``not-allowed``,
  ``queue-full``, ``refused``), ``floodgate.error``, ``floodgate.topic``,
  ``floodgate.partition``, ``floodgate.offset``: nothing is dropped silently.
* **Events**: every change of a job's state, as Avro ``job_event`` tuples keyed by
  job id, on ``events_topic``.

Offsets are committed after a batch of requests was handled: a crash in between
submits those requests again (at least once). A requester that must not run a job
twice gives each request a key and watches the events for it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer

from admission.config import AdmissionSettings
from admission.errors import AdmissionError, AdmissionQueueFull, CommandNotAllowed
from admission.jobs import JobSpec
from admission.service import AdmissionService
from admission.store import Job
from pipeline.errors import DeserializationError
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
    CommandNotAllowed: "not-allowed",
    AdmissionQueueFull: "queue-full",
}


class KafkaIntake:
    """Reads the request topic into the service and publishes its job events.

    Args:
        service: the admission service.
        bootstrap_servers: the Kafka cluster.
        schemas: the schema repository (``job_request``, ``job_event``).

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
        self.events = StreamCodec("job_event", schemas.get("job_event"), schemas)
        #: ``admission.kafka_client`` (``security.protocol``, ``sasl.*``, ``ssl.*``...):
        #: every client of the intake takes it (issue 26).
        self.client: dict[str, Any] = dict(self.settings.kafka_client)
        self._producer = Producer(
            {
                **self.client,
                "bootstrap.servers": bootstrap_servers,
                "enable.idempotence": True,
                "acks": "all",
                "allow.auto.create.topics": False,  # issue 26: never a broker-default topic
            }
        )
        self._consumer: Consumer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Requests taken and dead-lettered so far (tests and logs).
        self.taken = 0
        self.dead_lettered = 0

    def start(self) -> KafkaIntake:
        """Create the topics if missing, subscribe, publish events, read in a thread."""
        s = self.settings
        ensure_topics(
            self.bootstrap_servers,
            {t: (1, 1) for t in (s.request_topic, s.events_topic, s.dead_letter_topic)},
            client=self.client,
        )
        self._consumer = Consumer(
            {
                **self.client,
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": s.consumer_group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "allow.auto.create.topics": False,  # issue 26: never a broker-default topic
            }
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
                    self._handle(message)
                    handled = True
                if handled:
                    self._producer.flush(30)  # dead letters and events before the commit
                    self._consumer.commit(asynchronous=False)
            except Exception:
                log.exception("admission intake: a batch failed; retrying")
                time.sleep(1.0)

    def _handle(self, message: Message) -> None:
        key = message.key()
        client_key = key.decode("utf-8", "replace") if key is not None else None
        try:
            record = self.requests.decode(message.value() or b"")
            spec = JobSpec.from_fields(record)
            job = self.service.submit(spec, client_key=client_key)
        except DeserializationError as exc:
            self._dead_letter(message, "bad-request", str(exc))
            return
        except AdmissionError as exc:
            self._dead_letter(message, _REASONS.get(type(exc), "refused"), str(exc))
            return
        self.taken += 1
        log.info("request %s/%s: job %d", message.partition(), message.offset(), job.id)

    def _dead_letter(self, message: Message, reason: str, error: str) -> None:
        self.dead_lettered += 1
        log.warning(
            "FG-ADM-004 request %s/%d/%d dead-lettered (%s): %s",
            message.topic(),
            message.partition() or 0,
            message.offset() or 0,
            reason,
            error,
        )
        headers: list[tuple[str, Any]] = [
            ("floodgate.reason", reason),
            ("floodgate.error", error[:2000]),
            ("floodgate.topic", message.topic() or ""),
            ("floodgate.partition", str(message.partition())),
            ("floodgate.offset", str(message.offset())),
        ]
        self._producer.produce(
            self.settings.dead_letter_topic,
            key=message.key(),
            value=message.value(),
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
