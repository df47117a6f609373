"""A pipeline of the JVM source and the JVM sink through the test session's SparkSession,
outside any query group: an input topic of flights read by ``floodgate_kafka`` and
written, each tuple as it is, to an output topic by ``floodgate_kafka``
(``test_java_sink.py``, ``test_sink_broker_restart.py``)."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import StreamingQueryException

from pipeline.demo.reception import read_all
from pipeline.kafka.topics import ensure_topics
from pipeline.serde.codec import StreamCodec, TupleKey
from pipeline.serde.schemas import SchemaRepository
from pipeline.spark.options import SOURCE_NAME

FLIGHTS = 600
KEY = ["carrier", "flight"]


class Pipeline:
    """An input topic of flights read by the JVM source, written by the JVM sink."""

    def __init__(
        self, spark: Any, bootstrap: str, schemas: SchemaRepository, tmp_path: Path
    ) -> None:
        run = uuid.uuid4().hex[:8]
        self.spark, self.bootstrap, self.schemas = spark, bootstrap, schemas
        self.input, self.output = f"jsink.{run}.in", f"jsink.{run}.out"
        self.group = f"jsink-{run}"
        self.checkpoint = str(tmp_path / "checkpoint")
        self.codec = StreamCodec("flights", schemas.get("flight"), schemas)
        ensure_topics(bootstrap, {self.input: (2, None), self.output: (3, None)})

    def produce(self, flights: list[dict[str, Any]]) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for i, flight in enumerate(flights):
            producer.produce(self.input, value=self.codec.encode(flight), partition=i % 2)
        assert producer.flush(30) == 0

    def run(self, **sink: str) -> Any:
        """Write every input tuple (``availableNow``, 100 input tuples a micro-batch);
        return the finished query."""
        df = (
            self.spark.readStream.format(SOURCE_NAME)
            .options(
                **{
                    "kafka.bootstrap.servers": self.bootstrap,
                    "subscribe": self.input,
                    "startingOffsets": "earliest",
                    "schema": "flight",
                    "schemas": self.schemas.as_json(),
                    "maxOffsetsPerTrigger": "100",
                }
            )
            .load()
        )
        fields = self.schemas.get("flight").field_names
        options = {
            "kafka.bootstrap.servers": self.bootstrap,
            "topic": self.output,
            "stream": "flights-out",
            "schema": "flight",
            "schemas": self.schemas.as_json(),
            "key": ",".join(KEY),
            "transactionalIdPrefix": f"{self.group}.sink",
            "consumerGroup": self.group,
            "inputTopics": self.input,
            **sink,
        }
        query = (
            df.select(*fields)
            .writeStream.format(SOURCE_NAME)
            .options(**options)
            .option("checkpointLocation", self.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        with contextlib.suppress(StreamingQueryException):
            query.awaitTermination(180)  # raises the query's failure: query.exception()
        return query

    def output_records(self) -> list[Any]:
        return read_all(self.bootstrap, self.output)

    def committed(self) -> list[int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group})
        try:
            tps = [TopicPartition(self.input, p) for p in (0, 1)]
            return [tp.offset for tp in consumer.committed(tps, timeout=30)]
        finally:
            consumer.close()


def expected_records(
    codec: StreamCodec, flights: list[dict[str, Any]]
) -> Counter[tuple[bytes | None, bytes]]:
    key = TupleKey(KEY)
    return Counter((key(codec.normalise(f)), codec.encode(f)) for f in flights)


def written(records: list[Any]) -> Counter[tuple[bytes | None, bytes]]:
    return Counter((r.key(), r.value()) for r in records)
