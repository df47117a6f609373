"""The sweeper service (docs/architecture.md, "The sweeper"; the slow-queue sweeper's rule:
sweep only a serviced queue whose backlog grows past twice its service rate): moves the
backlog of slow-but-serviced queues out of the broker into BLOBs, and frees the broker
once the consumer is past the front buffer. The data path reads swept tuples back
through :mod:`pipeline.swept`.

* :mod:`~sweeper.policy`: when to sweep, which range, when to free (pure);
* :mod:`~sweeper.service`: the sweep cycle over every partition of every queue
  (:class:`~sweeper.service.Sweeper`), the tuple ledger's export, ``/status``;
* :mod:`~sweeper.sweep`: one range moved from the broker into a BLOB;
* :mod:`~sweeper.unsweep`: the broker truncated and BLOBs deleted behind the consumers;
* :mod:`~sweeper.recovery`: what a new leader finishes and checks;
* :mod:`~sweeper.blobs`: the files the sweeper owns, damaged BLOBs, the store's room;
* :mod:`~sweeper.lock`, :mod:`~sweeper.config`, :mod:`~sweeper.metrics`,
  :mod:`~sweeper.cli`.

May import: pipeline.config, pipeline.errors, pipeline.names, pipeline.metrics,
pipeline.logs, pipeline.redaction, pipeline.security, pipeline.state, pipeline.http,
pipeline.kafka, pipeline.offsets, pipeline.queues, pipeline.swept and
pipeline.cli.conventions (what every command line shares); never pipeline.spark, nor
admission.
"""
