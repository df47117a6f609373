"""Floodgate: a back-pressured, Kafka-fronted stream processing pipeline on Spark.

The data path lives here (DESIGN.md section 2): config, serde, broker, queues,
the back-pressure client, the Spark source, the bounded output writer, and
query groups. ``admission/`` and ``sweeper/`` build on it; it never imports them.
"""

__version__ = "0.1.0"
