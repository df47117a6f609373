"""Local Kafka brokers for the demo and the tests: embedded (noida-db) or Apache Kafka.

May import: pipeline.config, pipeline.errors, pipeline.kafka and pipeline.state.
"""
