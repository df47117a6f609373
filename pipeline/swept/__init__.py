"""The swept backlog: BLOB files, their catalog, and reading a partition back in order.

* :mod:`~pipeline.swept.blob`: the BLOB file format (Avro container files of column
  batches), written and read, sealed;
* :mod:`~pipeline.swept.store`: where BLOBs are kept, a folder or an object store;
* :mod:`~pipeline.swept.tables`: the sweep catalog's tables and rows;
* :mod:`~pipeline.swept.registered`: a registered BLOB checked against its row as it
  is read, and the files of a row the sweeper may remove;
* :mod:`~pipeline.swept.journal`: the sweeper's journal of BLOB files being written or
  removed;
* :mod:`~pipeline.swept.catalog`: the catalog, which BLOB holds which offsets;
* :mod:`~pipeline.swept.reading`: a partition read back in order, BLOBs then broker.

May import: pipeline.errors, pipeline.resources and pipeline.state.
"""
