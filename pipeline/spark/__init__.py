"""The Spark side: the ``floodgate_kafka`` source, the sink's Python side, query groups.

Everything that imports PySpark lives here (the control endpoint of a query group
too); the client, the sweeper and the admission service never import this package.

May import: pipeline.config, pipeline.errors, pipeline.failpoints, pipeline.http,
pipeline.kafka, pipeline.metrics, pipeline.names, pipeline.offsets, pipeline.queues,
pipeline.redaction, pipeline.security, pipeline.serde and pipeline.state.
"""
