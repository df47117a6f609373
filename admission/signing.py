"""Signed job requests: how the Kafka intake knows who may start a job.

A record on the request topic carries no proof of who wrote it: Kafka authenticates
the producer to the broker, but a consumer sees neither the principal nor whether the
broker checked one (the embedded broker checks none). So the intake takes only
requests **signed** with ``admission.intake_key``, as webhooks and AWS's Signature
Version 4 sign an HTTP request: HMAC-SHA256 (RFC 2104) over a canonical text that
binds every part the service acts on.

Two headers carry the signature (:func:`sign` makes them):

* ``floodgate.signed-at``: when it was signed, milliseconds since the epoch (text);
* ``floodgate.signature``: ``v1=`` and the lower-case hex HMAC of
  :func:`canonical_request`.

The canonical request is, joined with ``\\n``: the scheme ``floodgate-admission-v1``,
the topic, ``signed-at``, the hex SHA-256 of the record's key (``-`` for none) and
the hex SHA-256 of its value. Changing the topic, the key (the job's
``client_key``), the value (the command) or the time breaks the signature.

A signature is good for ``admission.intake_max_age_s`` either side of the intake's
clock (AWS allows 5 minutes); within that window the intake runs a signature once
(:mod:`admission.intake`: read again at its own offset it is not run again, written
again at another it is refused), so neither a reader of the topic who writes it
again nor a client who moves the consumer group back runs it twice. So two
identical requests (the same key and command) must be signed at different
milliseconds: signed in the same one, they carry one signature, and the second is
refused as ``replayed``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from admission.errors import RequestNotAuthenticated

#: The header that carries the signature: ``v1=<hex HMAC-SHA256>``.
SIGNATURE_HEADER = "floodgate.signature"
#: The header that carries when it was signed: milliseconds since the epoch, as text.
SIGNED_AT_HEADER = "floodgate.signed-at"
#: The first line of every canonical request (a new scheme gets a new name).
SCHEME = "floodgate-admission-v1"
_PREFIX = "v1="

#: A record's headers as confluent-kafka gives them: ``(name, value)`` pairs.
Headers = Sequence[tuple[str, bytes | str | None]]


def _digest(data: bytes | None) -> str:
    return "-" if data is None else hashlib.sha256(data).hexdigest()


def canonical_request(topic: str, signed_at_ms: int, key: bytes | None, value: bytes) -> bytes:
    """The bytes a request's signature is computed over (see the module docstring)."""
    return "\n".join((SCHEME, topic, str(signed_at_ms), _digest(key), _digest(value))).encode(
        "utf-8"
    )


def signature(secret: str, topic: str, signed_at_ms: int, key: bytes | None, value: bytes) -> str:
    """The lower-case hex HMAC-SHA256 of :func:`canonical_request` under ``secret``."""
    return hmac.new(
        secret.encode("utf-8"), canonical_request(topic, signed_at_ms, key, value), "sha256"
    ).hexdigest()


def sign(
    secret: str, *, topic: str, key: bytes | None, value: bytes, signed_at_ms: int
) -> list[tuple[str, bytes]]:
    """The headers that sign one request for the admission intake.

    Args:
        secret: ``admission.intake_key``.
        topic: the request topic the record is written to.
        key: the record's key (it becomes the job's ``client_key``), or ``None``.
        value: the encoded ``job_request`` tuple.
        signed_at_ms: now, milliseconds since the epoch; a later one than the last
            request with the same key and value (see the module docstring).

    Returns:
        ``[(SIGNED_AT_HEADER, ...), (SIGNATURE_HEADER, ...)]``, to pass as
        ``headers=`` to ``Producer.produce``.
    """
    mac = signature(secret, topic, signed_at_ms, key, value)
    return [
        (SIGNED_AT_HEADER, str(signed_at_ms).encode("ascii")),
        (SIGNATURE_HEADER, f"{_PREFIX}{mac}".encode("ascii")),
    ]


def _only(headers: Headers, name: str) -> str:
    found = [v for k, v in headers if k == name]
    if not found:
        raise RequestNotAuthenticated(f"the request is not signed: no {name} header")
    if len(found) > 1:
        raise RequestNotAuthenticated(f"the request has {len(found)} {name} headers, not one")
    raw = found[0]
    if raw is None:
        raise RequestNotAuthenticated(f"the {name} header is empty")
    try:
        return raw if isinstance(raw, str) else raw.decode("ascii")
    except UnicodeDecodeError:
        raise RequestNotAuthenticated(f"the {name} header is not ASCII text") from None


def verify(
    secret: str,
    *,
    topic: str,
    key: bytes | None,
    value: bytes,
    headers: Headers | None,
    now_ms: int,
    max_age_ms: int,
) -> str:
    """Check one request's signature.

    Args:
        secret: ``admission.intake_key``.
        topic, key, value, headers: the record as consumed.
        now_ms: the intake's clock, milliseconds since the epoch.
        max_age_ms: ``admission.intake_max_age_s`` in milliseconds: how far
            ``signed-at`` may be from ``now_ms``, either way.

    Returns:
        The signature (hex), which the intake records against replays.

    Raises:
        RequestNotAuthenticated: no signature, more than one, a malformed one, one
            made with another key or over other bytes, or one too old or too far
            ahead; the message says which (never the expected signature).
    """
    headers = headers or []
    signed_at_text = _only(headers, SIGNED_AT_HEADER)
    if not signed_at_text.isdigit() or len(signed_at_text) > 16:
        raise RequestNotAuthenticated(
            f"{SIGNED_AT_HEADER} {signed_at_text[:40]!r} is not milliseconds since the epoch"
        )
    signed_at = int(signed_at_text)
    if abs(now_ms - signed_at) > max_age_ms:
        raise RequestNotAuthenticated(
            f"the signature was made at {signed_at} ms, {(now_ms - signed_at) / 1000:.0f} s "
            f"from this host's clock; admission.intake_max_age_s allows "
            f"{max_age_ms / 1000:.0f} s either way"
        )
    given = _only(headers, SIGNATURE_HEADER)
    if not given.startswith(_PREFIX):
        raise RequestNotAuthenticated(f"{SIGNATURE_HEADER} does not start with {_PREFIX!r}")
    expected = signature(secret, topic, signed_at, key, value)
    if not hmac.compare_digest(given[len(_PREFIX) :].encode("ascii"), expected.encode("ascii")):
        raise RequestNotAuthenticated(
            "the signature does not match the request (another key, or the topic, key, "
            "value or signed-at changed after signing)"
        )
    return expected
