"""Secrets and the process that holds them.

* :mod:`~pipeline.security.credentials`: how strong a token or a key must be, one value
  per role, comparison in constant time, secret files only their owner reads;
* :mod:`~pipeline.security.privacy`: a service process other processes of its user
  cannot read (not dumpable).

May import: pipeline.errors.
"""
