"""What the query group, the admission service and the sweeper share as services.

Leader election, the tuple ledger, serving HTTP apps and metrics, calling them,
the private databases they keep, and their private files and folders
(:mod:`pipeline.services.files`).
"""
