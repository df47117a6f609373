"""The sweeper service (docs/architecture.md, "The sweeper"; the slow-queue sweeper's rule:
sweep only a serviced queue whose backlog grows past twice its service rate): moves the
backlog of slow-but-serviced queues out of the broker into BLOBs, and frees the broker
once the consumer is past the front buffer. The data path reads swept tuples back
through :mod:`pipeline.swept`.

May import: pipeline.config, pipeline.errors, pipeline.names, pipeline.metrics,
pipeline.logs, pipeline.redaction, pipeline.security, pipeline.state, pipeline.http,
pipeline.kafka, pipeline.offsets, pipeline.queues, pipeline.swept and
pipeline.cli.conventions (what every command line shares); never pipeline.spark, nor
admission.
"""
