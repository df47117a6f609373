"""The sweeper service (docs/architecture.md, "The sweeper"; the slow-queue sweeper's rule:
sweep only a serviced queue whose backlog grows past twice its service rate): moves the
backlog of slow-but-serviced queues out of the broker into BLOBs, and frees the broker
once the consumer is past the front buffer. The data path reads swept tuples back
through :mod:`pipeline.swept`."""
