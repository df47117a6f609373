"""Local Kafka brokers for the demo and the tests: embedded (noida-db) or Apache Kafka."""
