"""The producer and consumer side of Floodgate; never imports PySpark.

:func:`connect` opens a query group's streams by name; a
:class:`~pipeline.client.input.StreamInput` writes tuples to an input stream queue
under back-pressure (:class:`~pipeline.client.input.PutResult` says what happened),
a :class:`~pipeline.client.reception.StreamOutput` reads an output stream queue,
its swept backlog first. A stream input's parts: the tuples checked and encoded
(:mod:`~pipeline.client.encoding`), the queue's free space and thresholds
(:mod:`~pipeline.client.backpressure`), the producer that sends them
(:mod:`~pipeline.client.producer`).

May import: pipeline.config, pipeline.errors, pipeline.kafka, pipeline.metrics,
pipeline.queues, pipeline.resources, pipeline.serde and pipeline.swept; never
pipeline.spark.
"""

from pipeline.client.connector import Connector, connect
from pipeline.client.input import PutResult, StreamInput
from pipeline.client.reception import StreamOutput

__all__ = ["Connector", "PutResult", "StreamInput", "StreamOutput", "connect"]
