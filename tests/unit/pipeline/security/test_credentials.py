"""Secrets that mean something (pipeline.security.credentials): the strength estimate,
one value per role, private secret files, and every comparison of a secret in constant
time, checked over the code itself."""

from __future__ import annotations

import ast
import base64
import math
import os
import re
import secrets
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import ConfigError
from pipeline.security.credentials import (
    MIN_DISTINCT_CHARS,
    alphabet_of,
    check_distinct,
    check_secret,
    entropy_bits,
    read_secret_file,
    same_secret,
    weakness,
)

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.parametrize(
    ("value", "alphabet", "bits"),
    [
        ("0123456789", "decimal", 10 * math.log2(10)),
        ("deadbeef", "hex", 32),
        ("DEADBEEF", "hex", 32),
        ("DeadBeef", "alphanumeric", 8 * math.log2(62)),
        ("a-b_c", "base64", 30),
        ("a+b/c=", "base64", 36),
        ("a b!", "printable ASCII", 4 * math.log2(95)),
        ("caf\u00e9", "printable ASCII", 4 * math.log2(95)),
        ("", "decimal", 0),
    ],
)
def test_the_estimate_is_the_length_times_log2_of_the_implied_alphabet(
    value: str, alphabet: str, bits: float
) -> None:
    assert alphabet_of(value)[0] == alphabet
    assert entropy_bits(value) == pytest.approx(bits)


@pytest.mark.parametrize(
    "value",
    [
        "a",  # a token "a" was once accepted
        "t0ken-for-tests",
        "0123456789abcdef0123456789abcde",  # 31 hex characters: 124 bits
        "a" * 64,
        "ab" * 64,
        "0123456" * 10,  # 7 distinct characters, however long
    ],
)
def test_short_narrow_or_repetitive_values_are_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^admission\.token is too weak") as refused:
        check_secret(value, setting="admission.token")
    assert refused.value.key == "admission.token"
    assert len(value) < 4 or value not in str(refused.value)
    assert "openssl rand -hex 16" in str(refused.value)


def test_what_the_docs_tell_users_to_run_passes() -> None:
    """``openssl rand -hex 16`` (32 hex characters), ``secrets.token_urlsafe(16)``
    (22 base64url characters), ``openssl rand -base64 16`` and the control token the
    driver makes (``secrets.token_urlsafe(32)``), 50 draws of each."""
    for _ in range(50):
        for value in (
            secrets.token_hex(16),
            secrets.token_urlsafe(16),
            secrets.token_bytes(16).hex().upper(),
            base64.b64encode(secrets.token_bytes(16)).decode(),
            secrets.token_urlsafe(32),
        ):
            assert weakness(value) is None, value


@given(st.text(min_size=1), st.text(min_size=1))
def test_adding_characters_never_lowers_the_estimate(value: str, more: str) -> None:
    """The alphabets are nested: a longer value, or one with more kinds of characters,
    is never counted as weaker."""
    assert entropy_bits(value + more) >= entropy_bits(value)


@given(st.text(min_size=1, max_size=MIN_DISTINCT_CHARS - 1), st.integers(1, 50))
def test_a_value_of_few_distinct_characters_is_refused_however_long(
    alphabet: str, times: int
) -> None:
    value = alphabet * times
    assert weakness(value) is not None


@given(st.text(alphabet=string.hexdigits[:16], min_size=1, max_size=80))
def test_hex_passes_from_32_characters_on(value: str) -> None:
    """128 bits is 32 hex characters (39 decimal ones: 10^39 > 2^128), with at least
    :data:`MIN_DISTINCT_CHARS` distinct characters."""
    enough = 39 if value.isdigit() else 32
    expected = len(value) >= enough and len(set(value)) >= MIN_DISTINCT_CHARS
    assert (weakness(value) is None) == expected


def test_one_value_in_two_roles_is_refused_naming_both_never_the_value() -> None:
    shared = secrets.token_hex(16)
    with pytest.raises(ConfigError) as refused:
        check_distinct(
            {
                "admission.token": shared,
                "admission.intake_key": secrets.token_hex(16),
                "FLOODGATE_CONTROL_TOKEN": shared,
            }
        )
    assert "admission.token and FLOODGATE_CONTROL_TOKEN hold the same value" in str(refused.value)
    assert shared not in str(refused.value)
    check_distinct({"admission.token": shared, "admission.intake_key": None, "x": ""})


def test_same_secret_compares_text_and_bytes() -> None:
    assert same_secret("abc", b"abc") and not same_secret("abc", "abd")
    assert not same_secret("", "abc")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_secret_file_group_or_others_may_read_is_refused_with_path_and_mode(
    tmp_path: Path, mode: int
) -> None:
    path = tmp_path / "token"
    path.write_text("0f3c9a6e1b7d4c28a5e9f0b3d6c1a7e4\n")
    path.chmod(mode)
    with pytest.raises(ConfigError) as refused:
        read_secret_file(path, what="--token-file")
    assert f"--token-file {path}" in str(refused.value)
    assert f"mode {mode:04o}" in str(refused.value)
    assert "0f3c9a6e" not in str(refused.value)
    path.chmod(0o600)
    assert read_secret_file(path, what="--token-file") == "0f3c9a6e1b7d4c28a5e9f0b3d6c1a7e4"
    path.chmod(0o400)
    assert read_secret_file(path, what="--token-file") == "0f3c9a6e1b7d4c28a5e9f0b3d6c1a7e4"


#: Names that hold a secret, in the code's words.
SECRET_NAME = re.compile(
    r"token|secret|signature|nonce|passw(or)?d|credential|intake_key|signing_key|hmac",
    re.IGNORECASE,
)

#: ``file:line`` of ``==``/``!=`` comparisons of a secret-named value that are not a
#: comparison of two secrets, and why.
ALLOWED = {
    # A SQL WHERE clause (SQLAlchemy builds it, the database runs it): the replay
    # store looks up a request's signature, which its HMAC already authenticated.
    "admission/store.py": "signatures.c.signature == signature",
}


def _mentions_secret(node: ast.AST) -> bool:
    for part in ast.walk(node):
        name = (
            part.id
            if isinstance(part, ast.Name)
            else part.attr
            if isinstance(part, ast.Attribute)
            else ""
        )
        if SECRET_NAME.search(name) and not name.endswith(("_name", "_file", "_env", "_path")):
            return True
    return False


def secret_comparisons(root: Path) -> list[str]:
    """``==``/``!=`` comparisons in the code of ``pipeline``, ``admission`` and
    ``sweeper`` where an operand names a secret and none is a literal (comparing a
    setting's name with ``"topic"`` compares no secret)."""
    found = []
    for package in ("pipeline", "admission", "sweeper"):
        for path in sorted((root / package).rglob("*.py")):
            relative = str(path.relative_to(root))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                if not any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                    continue
                operands = [node.left, *node.comparators]
                if any(isinstance(o, ast.Constant) for o in operands):
                    continue
                if not any(_mentions_secret(o) for o in operands):
                    continue
                text = ast.unparse(node)
                if ALLOWED.get(relative) == text:
                    continue
                found.append(f"{relative}:{node.lineno}: {text}")
    return found


def test_every_comparison_of_a_secret_is_in_constant_time() -> None:
    """``==`` on two strings stops at the first difference, so its time tells a guesser
    how much of a token was right; :func:`same_secret` does not."""
    assert secret_comparisons(ROOT) == [], "compare secrets with same_secret()"


def test_the_scan_finds_a_comparison_of_a_secret(tmp_path: Path) -> None:
    """The scan itself: a plain ``==`` of a token is found, a literal is not."""
    package = tmp_path / "pipeline"
    package.mkdir()
    (package / "m.py").write_text(
        "def check(given, token):\n"
        "    if given != self_token:\n        pass\n"
        "    return given == token or token == 'x'\n"
    )
    for other in ("admission", "sweeper"):
        os.mkdir(tmp_path / other)
    assert secret_comparisons(tmp_path) == [
        "pipeline/m.py:2: given != self_token",
        "pipeline/m.py:4: given == token",
    ]
