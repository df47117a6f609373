"""Floodgate: a back-pressured, Kafka-fronted stream processing pipeline on Spark.

The data path lives here: config, serde, broker, queues,
the back-pressure client, the Spark source, the bounded output writer, and
query groups. ``admission/`` and ``sweeper/`` build on it; it never imports them.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and linters; at run time, __getattr__ below
    from pipeline.client import connect

__version__ = "0.1.0"
__all__ = ["connect"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing a part of pipeline does not load the client.
    if name == "connect":
        from pipeline.client import connect

        return connect
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
