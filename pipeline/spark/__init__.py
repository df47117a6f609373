"""The Spark side: the ``floodgate_kafka`` source, the transactional sink, query groups.

Everything that imports PySpark lives here (the control endpoint of a query group
too); the client, the sweeper and the admission service never import this package.
"""
