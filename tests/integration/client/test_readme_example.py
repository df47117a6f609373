"""The README's producer example runs as written, from a directory that is not the
repository (``connect(config="flights")`` finds the shipped group), against a real
broker: one flight put, its free queue size printed, every tuple acknowledged."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from pipeline.config import load_query_group
from pipeline.kafka.topics import ensure_topics
from pipeline.resources import shipped_configs

ROOT = Path(__file__).resolve().parents[3]


def readme_example() -> str:
    """The README's first Python block that connects."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    return next(block for block in blocks if "connect(" in block)


def test_the_readme_producer_example_runs_from_any_directory(
    bootstrap: str, tmp_path: Path
) -> None:
    config = load_query_group(shipped_configs()["flights"], env={})
    ensure_topics(bootstrap, config.topics())
    code = readme_example()
    assert 'connect(config="flights", bootstrap_servers="127.0.0.1:9092")' in code
    code = code.replace("127.0.0.1:9092", bootstrap)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    accepted, free, exceeded = run.stdout.split()[-3:]
    assert accepted == "1"
    assert 0 <= int(free) < config.input_settings("flights").max_queue_size
    assert exceeded in ("True", "False")
