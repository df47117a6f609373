"""What a query of a query group ending with an exception means for the group: a write
task giving up on a full output stream queue holds it (``FG-QG-002``); a full disk under
its checkpoint fails it naming the checkpoint and the room left (``FG-QG-010``); a batch
larger than its output queue fails it naming both; anything else fails it with Spark's
error, without Java stacks. A query ending while the group is held or stopping is no
failure.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Protocol

from pipeline.config import QueryGroupConfig
from pipeline.errors import (
    NO_SPACE,
    CheckpointDiskFullError,
    QueryGroupError,
    compact_error,
    java_causes,
)
from pipeline.spark.hold import HeldGroup, Hold
from pipeline.spark.runs import QueryRuns
from pipeline.spark.sink import held_from, oversized_from
from pipeline.spark.states import QueryGroupState

log = logging.getLogger(__name__)


class FailingGroup(HeldGroup, Protocol):
    """What :class:`QueryFailures` needs of its query group: what its hold needs
    (:class:`~pipeline.spark.hold.HeldGroup`), its hold and its running queries."""

    hold: Hold
    runs: QueryRuns

    def queries(self) -> dict[str, Any]:
        """The group's Spark streaming queries by name."""


class QueryFailures:
    """The failures of ``group``'s queries, and the holds they stand for.

    Args:
        group: the query group (:class:`FailingGroup`).
    """

    def __init__(self, group: FailingGroup) -> None:
        self.group = group

    def on_terminated(self, query_id: str, run_id: str, exception: str | None) -> None:
        """A query ended (from Spark's listener bus): a run a hold stopped, or a write task
        giving up on a full output queue, holds the group; any other exception, unless the
        group is held or stopping, fails it, the error kept on the query's sink."""
        if run_id in self.group.hold.retired_runs:
            return  # stopped by a hold; its end may be reported after the release
        if exception and self.held_by(exception):
            return
        if exception and not self.expected():
            running = self.group.runs.by_id(query_id)
            if running is None:
                log.error(
                    "query group %s: query %s failed: %s", self.group.name, query_id, exception
                )
            else:
                # Recorded on the sink before the state changes: whoever sees FAILED
                # finds the error there.
                self.failure_of(running.name, RuntimeError(exception))
            self.group.state = QueryGroupState.FAILED

    def check(self) -> None:
        """Raise the first failure of any query (a held or stopping group is no failure).

        Raises:
            QueryGroupError: a query terminated with an exception.
        """
        if self.expected():
            return
        for name, query in self.group.queries().items():
            if str(query.runId) in self.group.hold.retired_runs:
                continue  # ended by a hold, and not restarted yet: no failure
            exc = query.exception()
            if exc is not None and self.held_by(str(exc)):
                return
            if exc is not None and not self.expected():
                self.group.state = QueryGroupState.FAILED
                raise self.failure_of(name, exc)

    def held_by(self, failure: str) -> bool:
        """Hold the group when a query's ``failure`` (its exception's text) is a write
        task giving up on a full output stream queue (``FG-QG-002``,
        :func:`~pipeline.spark.sink.held_from`); whether it was one."""
        held = held_from(failure, query_group=self.group.name)
        if held is None:
            return False
        if self.group.state != QueryGroupState.HELD:
            log.error("%s", held)
            self.group.metrics.sleeps.labels(self.group.name, held.stream).inc(held.sleeps)
            self.group.hold.on_hold(held)
        return True

    def failure_of(self, name: str, exc: BaseException) -> QueryGroupError:
        """The error a failed query ends the group with: the hold it stands for
        (``FG-QG-002``), a full disk's, else Spark's, without Java stacks
        (:func:`~pipeline.errors.compact_error`); the full text is in the log."""
        running = self.group.runs.get(name)
        if self.held_by(str(exc)):
            self.group.hold.join()
            assert self.group.hold.held is not None
            return self.group.hold.held
        error: QueryGroupError
        if full_disk_line(exc) is not None:
            error = disk_full(self.group.config, name, exc)
            log.error("%s", error)
        elif (oversized := oversized_from(str(exc), query_group=self.group.name)) is not None:
            error = oversized
            log.error("%s", error)
        else:
            log.error("query group %s query %s failed: %s", self.group.name, name, exc)
            error = QueryGroupError(compact_error(exc), query_group=self.group.name, query=name)
        if running is not None:
            running.sink.last_error = error
        return error

    def expected(self) -> bool:
        """Queries end with an exception on purpose while the group is held or stopping."""
        return self.group.stopping or self.group.state == QueryGroupState.HELD

    def raise_for(self, name: str, exc: BaseException) -> QueryGroupError:
        """The error to raise for query ``name`` having raised ``exc`` while the caller
        waited on it: the hold it stands for, raised here (``QueryGroupHeld``), else the
        group is FAILED and this returns the query's error."""
        self.held_by(str(exc))
        self.group.hold.raise_held()
        self.group.state = QueryGroupState.FAILED
        return self.failure_of(name, exc)


def free_bytes(location: str) -> int | None:
    """Bytes an unprivileged writer may still write on the file system of ``location``
    (a local path or a ``file:`` URI; ``statvfs`` of its nearest existing folder),
    ``None`` for another scheme (``hdfs://``, ``s3a://``) or when it cannot be read."""
    if location.startswith("file:"):
        location = "/" + location.removeprefix("file:").lstrip("/")
    elif "://" in location:
        return None
    path = os.path.abspath(location)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def full_disk_line(exc: BaseException) -> str | None:
    """The deepest line of ``exc``'s text or of its Java causes
    (:func:`~pipeline.errors.java_causes`) that names a full disk (``ENOSPC``), without
    a ``Caused by:`` prefix; ``None`` when none does."""
    lines = [line.strip().removeprefix("Caused by:").strip() for line in str(exc).splitlines()]
    return next((line for line in reversed(lines + java_causes(exc)) if NO_SPACE in line), None)


def disk_full(
    config: QueryGroupConfig, query: str, cause: BaseException | str
) -> CheckpointDiskFullError:
    """The error of a query that failed on a full disk (``ENOSPC``): its checkpoint and
    the bytes free there now (``FG-QG-010``); ``cause``: the query's own error or
    Spark's (an exception, or the listener's text of one)."""
    checkpoint = config.checkpoint(query)
    exc = cause if isinstance(cause, BaseException) else RuntimeError(cause)
    text = compact_error(exc)
    if NO_SPACE not in text:
        # Spark's error names a cause of the full disk (a state store's failed commit,
        # a task's failure), the file system's error a cause or more below it.
        text = f"{text[:400]} | caused by {full_disk_line(exc) or NO_SPACE}"
    return CheckpointDiskFullError(
        query_group=config.name,
        query=query,
        checkpoint=checkpoint,
        free_bytes=free_bytes(checkpoint),
        cause=text,
    )
