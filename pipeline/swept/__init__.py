"""The swept backlog: BLOB files, their catalog, and reading a partition back in order.

May import: pipeline.errors, pipeline.resources and pipeline.state.
"""
