"""Durable state on the local machine: what the services and the query group keep
across restarts, and keep to their own user.

* :mod:`~pipeline.state.files`: private files and folders (created 0600/0700, refused
  when another user could have written them);
* :mod:`~pipeline.state.database`: the SQL databases (admission's job queue, the sweep
  catalog), SQLAlchemy engines made one way;
* :mod:`~pipeline.state.leader`: leader election through a database lock, for
  services that run several instances on one database.

May import: pipeline.errors.
"""
