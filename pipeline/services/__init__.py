"""What the query group, the admission service and the sweeper share as services.

Leader election, the tuple ledger, serving HTTP apps and metrics, calling them,
and the private databases they keep.
"""
