"""Secrets that mean something: how strong a bearer token or a key must be, one value
per role, comparison in constant time, and files of secrets only their owner reads.

* **Strength.** A secret is refused when :func:`entropy_bits` estimates it below
  :data:`MIN_SECRET_BITS` (128 bits: NIST SP 800-131A's floor for a symmetric key, and
  what ``openssl rand -hex 16`` or :func:`secrets.token_urlsafe` of 16 bytes gives), or
  when it has fewer than :data:`MIN_DISTINCT_CHARS` distinct characters (``aaaa...``).
* **One role each.** The admission token, the intake key and a control token are given
  to different people: :func:`check_distinct` refuses one value in two settings.
* **Constant time.** Every comparison of a secret goes through :func:`same_secret`
  (:func:`hmac.compare_digest`), so the time of an answer says nothing of how much of
  a guess was right; ``tests/unit/pipeline/security/test_credentials.py`` scans the
  code for any other comparison of a secret.
* **Private files.** A file that holds a secret (``--token-file``, a config file with
  a secret key in it) that group or others may read is refused, naming the path and its
  mode, as OpenSSH refuses a private key file others can read ("UNPROTECTED PRIVATE KEY
  FILE", ``sshkey_perm_ok``).
"""

from __future__ import annotations

import hmac
import math
import os
import stat
import string
from collections.abc import Mapping
from pathlib import Path

from pipeline.errors import ConfigError

#: Fewest bits of entropy a bearer token or a key must have (NIST SP 800-131A).
MIN_SECRET_BITS = 128

#: Fewest distinct characters a secret must have: random 32 hex characters have 14 on
#: average (fewer than 8 once in about 10^11), a repeated pattern far fewer.
MIN_DISTINCT_CHARS = 8

#: How to make a secret that passes, for refusals.
HOW_TO_MAKE = "openssl rand -hex 16 makes one: 32 hex characters"

#: The alphabets a secret's characters may imply, smallest first: a secret is counted
#: as drawn from the smallest one that holds all its characters. Each is a subset of
#: every later one it is not a sibling of, so adding characters never lowers the
#: estimate.
ALPHABETS: tuple[tuple[str, frozenset[str]], ...] = (
    ("decimal", frozenset(string.digits)),
    ("hex", frozenset(string.digits + "abcdef")),
    ("hex", frozenset(string.digits + "ABCDEF")),
    ("alphanumeric", frozenset(string.ascii_letters + string.digits)),
    # base64 (RFC 4648 section 4) and base64url (section 5), padding included: 64
    # symbols carry the information, '=' none.
    ("base64", frozenset(string.ascii_letters + string.digits + "+/-_=")),
    ("printable ASCII", frozenset(string.printable) - frozenset(string.whitespace) | {" "}),
)

#: The number of symbols each alphabet carries information in.
_SYMBOLS = {"decimal": 10, "hex": 16, "alphanumeric": 62, "base64": 64, "printable ASCII": 95}


def alphabet_of(value: str) -> tuple[str, int]:
    """The smallest alphabet of :data:`ALPHABETS` holding every character of ``value``,
    and its number of symbols; ``("printable ASCII", 95)`` for one with other
    characters (non-ASCII ones are counted as printable ASCII: a floor, not a bonus)."""
    chars = set(value)
    for name, alphabet in ALPHABETS:
        if chars <= alphabet:
            return name, _SYMBOLS[name]
    return "printable ASCII", _SYMBOLS["printable ASCII"]


def entropy_bits(value: str) -> float:
    """An estimate of ``value``'s entropy, in bits: its length times log2 of the size
    of the alphabet its characters imply (:func:`alphabet_of`), as if each character
    were drawn uniformly from it. It is an upper bound for a random secret and says
    nothing of one a person chose: it catches short and narrow values, not a pass
    phrase's predictability."""
    return len(value) * math.log2(alphabet_of(value)[1]) if value else 0.0


def weakness(value: str) -> str | None:
    """Why ``value`` is too weak to be a secret, in words that do not show it; ``None``
    when it is strong enough (at least :data:`MIN_SECRET_BITS` by :func:`entropy_bits`
    and :data:`MIN_DISTINCT_CHARS` distinct characters)."""
    bits = entropy_bits(value)
    name, size = alphabet_of(value)
    if bits < MIN_SECRET_BITS:
        return (
            f"{len(value)} characters of the {name} alphabet ({size} symbols) carry at "
            f"most {bits:.0f} bits, fewer than {MIN_SECRET_BITS}"
        )
    distinct = len(set(value))
    if distinct < MIN_DISTINCT_CHARS:
        return (
            f"it has {distinct} distinct characters, fewer than {MIN_DISTINCT_CHARS}: "
            "not a random value"
        )
    return None


def check_secret(value: str, *, setting: str) -> str:
    """Return ``value`` when it is strong enough to be the secret ``setting``.

    Raises:
        ConfigError: it is not (:func:`weakness`); names ``setting`` and how to make
            one, never the value.
    """
    reason = weakness(value)
    if reason is not None:
        raise ConfigError(
            f"{setting} is too weak to be a secret: {reason}; give a random value of at "
            f"least {MIN_SECRET_BITS} bits ({HOW_TO_MAKE})",
            key=setting,
            allowed=f"a random secret of at least {MIN_SECRET_BITS} bits ({HOW_TO_MAKE})",
        )
    return value


def check_distinct(secrets: Mapping[str, str | None]) -> None:
    """Refuse one value given to two settings (``{setting: value}``; ``None`` or empty
    values are not given and are skipped).

    Raises:
        ConfigError: two settings hold the same value; names both, never the value.
    """
    given = [(setting, value) for setting, value in secrets.items() if value]
    for i, (first, value) in enumerate(given):
        for second, other in given[i + 1 :]:
            if same_secret(value, other):
                raise ConfigError(
                    f"{first} and {second} hold the same value: each role needs a secret "
                    f"of its own, so that one can be given out or rotated alone ({HOW_TO_MAKE})",
                    key=second,
                    allowed=f"a secret other than {first}'s",
                )


def same_secret(given: str | bytes, expected: str | bytes) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time
    (:func:`hmac.compare_digest`; text as UTF-8): every comparison of a secret is
    made here."""
    a = given.encode() if isinstance(given, str) else given
    b = expected.encode() if isinstance(expected, str) else expected
    return hmac.compare_digest(a, b)


def carries_bearer(authorization: str | None, token: str) -> bool:
    """Whether an HTTP ``Authorization`` header value is ``Bearer <token>`` (RFC 6750
    section 2.1; the scheme's case ignored, the credentials' surrounding blanks
    dropped), compared in constant time (:func:`same_secret`). ``None`` or another
    scheme: ``False``. The one reading of a bearer token, for the gate in front of a
    service's API and for the open reads that show more to a token holder."""
    scheme, _, credentials = (authorization or "").partition(" ")
    given = credentials.strip() if scheme.lower() == "bearer" else ""
    return same_secret(given, token)


def check_private_mode(
    path: str | Path, st: os.stat_result, *, what: str, holds: str = "a secret"
) -> None:
    """Refuse a file holding a secret that group or others may read or write.

    Args:
        path: the file, for the message.
        st: its status (of the opened file: ``os.fstat``).
        what: the setting or option it is given as (``--token-file``).
        holds: the secret it holds, in words (``admission.token``), never its value.

    Raises:
        ConfigError: ``st_mode & 0o077`` is not 0; names ``what``, the path and mode.
    """
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise ConfigError(
            f"{what} {path} holds {holds} but group or others may read it (mode "
            f"{mode:04o}); make it its owner's alone (chmod 600 {path}) or give the "
            "secret in the environment",
            key=what,
            value=str(path),
            allowed="a file of mode 0600 or 0400",
        )


def read_secret_file(path: str | Path, *, what: str) -> str:
    """The secret in ``path``: its text, one trailing line break dropped (as a Docker or
    Kubernetes secret is mounted). Symbolic links are followed (Kubernetes mounts
    secrets through them); the opened file is checked.

    Args:
        what: the option or setting naming the file (``--token-file``), for errors.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 or is empty, or group or
            others may read it (:func:`check_private_mode`); names ``what`` and the path.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror}", key=what, value=str(path)) from exc
    with os.fdopen(fd, "rb") as file:
        check_private_mode(path, os.fstat(file.fileno()), what=what)
        data = file.read(64 * 1024)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text", key=what, value=str(path)) from exc
    text = text.removesuffix("\n").removesuffix("\r")
    if not text:
        raise ConfigError(f"{what} {path} is empty", key=what, value=str(path))
    return text
