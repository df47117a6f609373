"""Failpoints are armed by name and key, exactly (``pipeline.failpoints``)."""

from __future__ import annotations

import pytest

from pipeline.failpoints import FAILPOINT_ENV, armed


@pytest.mark.parametrize(
    ("spec", "name", "key", "action"),
    [
        (None, "after-commit", 1, None),
        ("after-commit:1", "after-commit", 1, ""),
        ("after-commit:12", "after-commit", 1, None),
        ("after-commit:1", "after-commit", 12, None),
        ("after-commit:1", "before-commit", 1, None),
        ("records-sent:2:stop", "records-sent", 2, "stop"),
        ("before-commit:3:wait=/tmp/a:b", "before-commit", 3, "wait=/tmp/a:b"),
        ("claimed:7", "claimed", 7, ""),
    ],
)
def test_a_failpoint_is_armed_for_its_name_and_key_only(
    monkeypatch: pytest.MonkeyPatch, spec: str | None, name: str, key: int, action: str | None
) -> None:
    if spec is None:
        monkeypatch.delenv(FAILPOINT_ENV, raising=False)
    else:
        monkeypatch.setenv(FAILPOINT_ENV, spec)
    assert armed(name, key) == action
