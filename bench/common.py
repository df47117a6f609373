"""What the benchmark scripts share: the flights stream, set up on a topic of their own."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

from pipeline.config import QueryGroupConfig, parse_query_group
from pipeline.serde import TupleKey

ROOT = Path(__file__).resolve().parents[1]
FLIGHTS_TOML = ROOT / "conf" / "flights.toml"


def flights_config(topic: str, max_queue_size: int) -> QueryGroupConfig:
    """``conf/flights.toml`` under a fresh group name, reading ``topic``, its input queue
    bounded at ``max_queue_size`` (set it above the data to measure without waits)."""
    raw = tomllib.loads(FLIGHTS_TOML.read_text())
    raw["query_group"]["name"] = f"bench{uuid.uuid4().hex[:8]}"
    raw["query_group"]["max_queue_size"] = max_queue_size
    raw["input_streams"]["flights"]["topic"] = topic
    return parse_query_group(raw, env={})


def flights_key() -> TupleKey:
    """The flights stream's Kafka key, as the back-pressure client builds it."""
    config = parse_query_group(tomllib.loads(FLIGHTS_TOML.read_text()), env={})
    return TupleKey(config.input_streams["flights"].key)
