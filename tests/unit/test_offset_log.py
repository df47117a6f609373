"""Unit tests of reading Spark's offset log from a local checkpoint (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.output import read_offset_log

ENTRY = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"flights":{"0":12,"1":7}}\n-\n'


@pytest.mark.parametrize("scheme", ["", "file:", "file://"])
def test_a_local_checkpoint_is_read_from_disk_without_spark(tmp_path: Path, scheme: str) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text(ENTRY)
    # spark=None: any JVM call would fail, so the answer can only come from the disk.
    offsets = read_offset_log(None, f"{scheme}{tmp_path}", 3)
    assert offsets == [{"flights": {"0": 12, "1": 7}}]
