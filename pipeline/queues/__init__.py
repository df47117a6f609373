"""Queue accounting: length, max and free space of input and output stream queues.

An *input stream queue* (docs/tutorials/producer.md) is the
tuples of an input stream that its query group has not processed yet. On Kafka, per partition:

    length_p = high_watermark_p - position_p - swept_p

where ``position_p`` is the slowest reading query's committed offset (each query
commits to its own consumer group, ``floodgate.<group>.<query>``; before its first
commit, a query is at the log start), and ``swept_p`` is what the sweeper moved
out of the broker into BLOBs (the sweep catalog's count; zero until a sweeper
registers one). The queue length is the sum over partitions; the free queue size
is ``max_queue_size - length`` (the back-pressure rule of the input stream queues:
``StreamInput.free_queue_size()``, docs/tutorials/producer.md).

:class:`~pipeline.queues.probe.QueueProbe` reads a queue from the broker (and the sweep
catalog); :class:`~pipeline.queues.budget.QueueBudget` is the client side of the bound;
:class:`~pipeline.queues.age.QueueAge` tells how old the oldest tuple is. From those
reads, :mod:`~pipeline.queues.ledger` accounts for every tuple of an input stream queue
(processed, queued, swept, dead-lettered: ``floodgate audit``), and
:mod:`~pipeline.queues.replays` for what an at-least-once query wrote twice.

May import: pipeline.config, pipeline.deadletter, pipeline.errors, pipeline.kafka,
pipeline.names, pipeline.offsets and pipeline.swept.
"""
