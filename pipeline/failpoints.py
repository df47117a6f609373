"""Failpoints: named steps where a crash test makes a Floodgate process die, stop or
wait, armed by one environment variable (as FoundationDB's buggify and Kafka's system
tests arm theirs from outside the process).

``FLOODGATE_FAILPOINT=<name>:<key>[:<action>]`` arms the failpoint ``name`` for ``key``
(a micro-batch id in the query group's sink, a job id in the admission service); the
component that owns the step says what it does there and what actions it takes
(:data:`pipeline.spark.sink.FAILPOINTS`, :data:`admission.scheduler.FAILPOINTS`). Unset
in production, where :func:`armed` is one dictionary lookup.
"""

from __future__ import annotations

import os

#: The environment variable that arms a failpoint.
FAILPOINT_ENV = "FLOODGATE_FAILPOINT"


def armed(name: str, key: int | str) -> str | None:
    """What failpoint ``name`` is armed to do for ``key``.

    Returns:
        None when it is not armed; ``""`` when armed with no action (the owner's
        default: a kill); else the action, what follows ``<name>:<key>:`` (for example
        ``stop`` or ``wait=/tmp/release``).
    """
    spec = os.environ.get(FAILPOINT_ENV)
    point = f"{name}:{key}"
    if not spec or not spec.startswith(point):
        return None
    if spec == point:
        return ""
    if spec[len(point)] != ":":
        return None  # "after-commit:12" is not "after-commit:1"
    return spec[len(point) + 1 :]
