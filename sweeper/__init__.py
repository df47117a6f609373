"""The sweeper service (DESIGN.md section 4.3; seed 001_ba86cf144862657d.txt, the slow
queue sweeper): moves the backlog of slow-but-serviced queues out of the broker into
BLOBs, and frees the broker once the consumer is past the front buffer. The data path
reads swept tuples back through :mod:`pipeline.swept`."""
