"""The control token of a query group's endpoint (FLOODGATE_CONTROL_TOKEN) must be a
secret of 128 bits or more, of its own."""

from __future__ import annotations

import secrets

import pytest

from pipeline.errors import ConfigError
from pipeline.spark.control import ADMISSION_TOKEN_ENV, resolve_token


@pytest.mark.parametrize("token", ["a", "not-the-token", "b" * 32])
def test_a_control_token_weaker_than_128_bits_is_refused_naming_the_variable(token: str) -> None:
    """a control token ``a`` was accepted."""
    with pytest.raises(ConfigError, match="FLOODGATE_CONTROL_TOKEN is too weak") as refused:
        resolve_token({"FLOODGATE_CONTROL_TOKEN": token})
    assert refused.value.key == "FLOODGATE_CONTROL_TOKEN"


def test_a_strong_token_is_taken_and_the_generated_one_is_256_bits() -> None:
    token = secrets.token_hex(16)
    assert resolve_token({"FLOODGATE_CONTROL_TOKEN": token}) == (token, False)
    generated, made = resolve_token({})
    assert made and len(generated) == 43


def test_the_admission_token_of_the_same_environment_is_refused_as_control_token() -> None:
    token = secrets.token_hex(16)
    with pytest.raises(ConfigError, match="hold the same value") as refused:
        resolve_token({"FLOODGATE_CONTROL_TOKEN": token, ADMISSION_TOKEN_ENV: token})
    assert token not in str(refused.value)
