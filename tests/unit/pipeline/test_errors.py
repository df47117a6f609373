"""The errors' attributes: the bound of a queue is ``max_queue_size`` on every error
that names it."""

from __future__ import annotations

import pytest

from pipeline.errors import OversizedBatchError, QueryGroupHeld, QueueFullError


@pytest.mark.parametrize(
    "error",
    [
        QueueFullError(stream="s", requested=10, free=4, max_queue_size=100),
        QueryGroupHeld(
            query_group="g",
            query="q",
            stream="s",
            batch_id=3,
            required=10,
            free=4,
            max_queue_size=100,
            sleeps=2,
        ),
        OversizedBatchError(
            query_group="g", query="q", stream="s", batch_id=3, required=200, max_queue_size=100
        ),
    ],
    ids=lambda e: type(e).__name__,
)
def test_the_bound_is_max_queue_size(error: Exception) -> None:
    assert error.max_queue_size == 100  # type: ignore[attr-defined]
    assert "100" in str(error)
    assert not hasattr(error, "max_size")
