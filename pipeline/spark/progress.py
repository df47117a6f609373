"""What Spark's listener bus tells of a query group's queries: their progress.

:class:`ProgressListener` hands each completed micro-batch's progress and each
query's end to its group, which keeps them as :class:`QueryStats` and metrics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent


@dataclass
class QueryStats:
    """What the progress listener saw of one query (updated from listener events).

    Attributes:
        input_tuples: tuples read by the query's source, all batches (Spark's
            ``numInputRows``).
        batches: micro-batches completed.
        dropped_by_watermark: rows the stateful operators dropped as late.
        last_batch_id: id of the last completed micro-batch (-1: none yet).
        last_duration_ms: wall time of the last micro-batch.
        input_tuples_per_second / processed_tuples_per_second: from the last progress
            (Spark's ``inputRowsPerSecond``, ``processedRowsPerSecond``).
    """

    input_tuples: int = 0
    batches: int = 0
    dropped_by_watermark: int = 0
    last_batch_id: int = -1
    last_duration_ms: int = 0
    input_tuples_per_second: float = 0.0
    processed_tuples_per_second: float = 0.0


class _JsonProgressCallbacks(JStreamingQueryListener):
    """PySpark's Java-side listener callbacks, with each progress event read as one
    JSON string (``QueryProgressEvent.json``, as Spark Connect reads it).

    PySpark's own ``onQueryProgress`` builds the event field by field through py4j:
    some 40 calls back into the JVM per micro-batch, several of which resolve names by
    ``Class.forName`` over every jar of Spark's class path. In the flights demo at
    trigger 0 that was a third of the driver JVM's sampled CPU (measured with JFR).
    Started and idle events are not converted at all: the group ignores them.
    """

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        pass


class ProgressListener(StreamingQueryListener):
    """Copies query progress into :class:`QueryStats`; never blocks (Spark calls a
    StreamingQueryListener on its listener bus thread, which a slow callback stalls)."""

    def __init__(
        self,
        spark: SparkSession,
        *,
        on_progress: Callable[[str, Any], None],
        on_terminated: Callable[[str, str, str | None], None],
    ) -> None:
        self._spark = spark
        self._on_progress = on_progress
        self._on_terminated = on_terminated

    @property
    def _jlistener(self) -> Any:
        """The JVM listener ``StreamingQueryManager.addListener`` registers: PySpark's
        wrapper around :class:`_JsonProgressCallbacks`."""
        if not hasattr(self, "_jlistenerobj"):
            jvm: Any = self._spark._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(
                _JsonProgressCallbacks(self)
            )
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        self._on_progress(str(progress.id), progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._on_terminated(str(event.id), str(event.runId), event.exception)
