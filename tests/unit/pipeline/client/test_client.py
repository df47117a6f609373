"""The client's pure logic, no broker: which query group file ``connect(config=...)``
reads (a path, or a shipped group's name, from any directory), what a put's result
says, and the error for a stream the group does not declare."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.client import connect
from pipeline.client.input import PutResult, require_stream
from pipeline.config import load_query_group
from pipeline.errors import ConfigError
from pipeline.resources import query_group_file, shipped_configs


def test_a_shipped_group_is_found_by_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no conf/ here
    assert query_group_file("flights") == shipped_configs()["flights"]
    connector = connect(config="flights", bootstrap_servers="127.0.0.1:9")
    assert connector.config("flights").name == "flights"
    # A file of that name in the working directory is the user's, and wins.
    (tmp_path / "flights").write_text(shipped_configs()["flights"].read_text())
    assert query_group_file("flights") == Path("flights")


def test_an_unknown_group_names_what_is_shipped() -> None:
    with pytest.raises(ConfigError, match=r"nope: no such file.*shipped: flights\)") as info:
        connect(config="nope", bootstrap_servers="127.0.0.1:9")
    assert info.value.key == "config"


def test_a_stream_the_group_does_not_declare_is_refused_by_name() -> None:
    config = load_query_group(shipped_configs()["flights"], env={})
    require_stream(config, "input", "flights")
    with pytest.raises(ConfigError, match=r"no output stream 'flights'; it has \[") as info:
        require_stream(config, "output", "flights")
    assert info.value.key == "output_streams"
    assert info.value.allowed == ", ".join(sorted(config.output_streams))


@given(st.integers(1, 10**9), st.data())
def test_a_puts_free_ratio_is_its_free_share_of_the_bound(bound: int, data: st.DataObject) -> None:
    free = data.draw(st.integers(0, bound))
    result = PutResult(
        accepted=1, free_queue_size=free, max_queue_size=bound, threshold_exceeded=False
    )
    assert 0.0 <= result.free_ratio <= 1.0
    assert result.free_ratio == free / bound
