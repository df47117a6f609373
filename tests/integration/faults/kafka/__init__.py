"""Broker faults on Apache Kafka: kill -9 of the single broker, and of a 3-node cluster's
partition leaders, coordinators and active controller, mid-stream."""
