"""The states of a query group."""

from __future__ import annotations

import enum


class QueryGroupState(enum.StrEnum):
    """States of a query group (docs: "Bounded output stream queues").

    STARTING and EXECUTING are the normal life; SLEEPING: a query waits for room in
    a full output stream queue; HELD: the sleeps ran out and every query is stopped,
    its micro-batch uncommitted, until released; STOPPED; FAILED: a query failed.
    """

    STARTING = "STARTING"
    EXECUTING = "EXECUTING"
    SLEEPING = "SLEEPING"
    HELD = "HELD"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
