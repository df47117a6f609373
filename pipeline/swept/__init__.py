"""The swept backlog: BLOB files, their catalog, and reading a partition back in order."""
