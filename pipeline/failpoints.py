"""Failpoints: named steps where a crash test makes a Floodgate process die, stop or
wait, armed by one environment variable (as FoundationDB's buggify and Kafka's system
tests arm theirs from outside the process).

``FLOODGATE_FAILPOINT=<name>:<key>[:<action>]`` arms the failpoint ``name`` for ``key``
(a micro-batch id in the query group's sink, a job id in the admission service); the
component that owns the step says what it does there and what actions it takes
(the JVM sink's ``io.floodgate.spark.write.SinkFailpoints``,
:data:`admission.scheduler.FAILPOINTS`). Unset in production, where :func:`armed` is one
dictionary lookup.

The JVM sink's failpoints run in the driver's JVM, whose environment was fixed when it
started: a query group hands them this process's variable each time it starts its
queries (:func:`arm_jvm`).
"""

from __future__ import annotations

import os
from typing import Any

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


def arm_jvm(jvm: Any) -> None:
    """Arm the JVM sink's failpoints (``SinkFailpoints``) in ``jvm``, a driver's, with
    this process's :data:`FAILPOINT_ENV` now (unset: disarmed). With a local master the
    executors are that JVM."""
    jvm.io.floodgate.spark.write.SinkFailpoints.arm(os.environ.get(FAILPOINT_ENV) or None)
