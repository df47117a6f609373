"""Which settings and URLs hold a secret, and how they are shown: the one rule for
``/status``, logs and errors.

The rule is Spark's own: ``spark.redaction.regex`` (default
:data:`SPARK_REDACTION_REGEX`), matched against a setting's key and its value as
Spark's ``Utils.redact`` does, a match shown as :data:`REDACTED`, Spark's replacement
text. Spark's default misses secret-bearing settings of Kafka and of Hadoop's object
stores, so :data:`FLOODGATE_REDACTION_REGEX` is matched as well. In text (an error's
message, a URL), a URL's password (``postgresql://user:pw@host/db``) is shown as
``***``, as SQLAlchemy's ``URL.render_as_string(hide_password=True)`` shows it, and
so is the value of a ``name=value`` pair whose name is a secret's (``password=...``
in a URL's query or a JAAS line), as Spark's ``spark.redaction.string.regex`` would.

Nothing here imports PySpark: the services that do not run Spark use the same rule
with Spark's default; a query group's driver passes its session's
``spark.redaction.regex`` (:meth:`Redactor.from_spark_regex`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, TypeVar

#: What a secret value is shown as: Spark's ``Utils.REDACTION_REPLACEMENT_TEXT``.
REDACTED = "*********(redacted)"

#: What a URL's password is shown as: SQLAlchemy's ``hide_password`` text.
HIDDEN_PASSWORD = "***"

#: The default of Spark's ``spark.redaction.regex`` (``SECRET_REDACTION_PATTERN`` in
#: Spark's ``org/apache/spark/internal/config/package.scala``).
SPARK_REDACTION_REGEX = "(?i)secret|password|token|access[.]?key"

#: Secret-bearing keys that :data:`SPARK_REDACTION_REGEX` misses, matched as well:
#: Kafka's ``sasl.jaas.config`` (its ``password="..."``) and ``ssl.keystore.*``
#: (``ssl.keystore.key``, a PEM private key), librdkafka's ``ssl.key.*``
#: (``ssl.key.pem``), Schema Registry's ``basic.auth.user.info`` (``user:password``),
#: a ``private.key``/``private_key`` (GCS's ``fs.gs.auth.service.account.private.key``),
#: and any ``key`` component of Hadoop's object store settings: ``fs.s3a.*.key``
#: (``fs.s3a.encryption.key``), ``fs.gs.*.key``, ``fs.azure.account.key.<account>``,
#: with Azure's ``fs.azure.sas.*`` tokens; Floodgate's own ``admission.intake_key``;
#: and a value holding a URL with a password (``postgresql://user:pw@host/db``, the
#: source's ``sweepCatalog`` option), which Spark would show in plans and its UI.
FLOODGATE_REDACTION_REGEX = (
    r"(?i)sasl[.]jaas[.]config|ssl[.]key(?:store)?[.]|user[.]?info|private[._-]?key"
    r"|intake[._-]?key"
    r"|fs[.](?:s3a|gs|azure)[.](?:.+[.])?key(?:[.]|$)|fs[.]azure[.]sas[.]"
    r"|[a-z][a-z0-9+.-]*://[^\s:/@]*:[^\s@]*@"
)

#: Spark's default ``spark.redaction.regex`` extended with
#: :data:`FLOODGATE_REDACTION_REGEX`, one Java (and Python) regular expression: what a
#: query group's session sets when nothing else set ``spark.redaction.regex``, so that
#: Spark's own UI, event log and plans hide these settings too.
SESSION_REDACTION_REGEX = (
    f"{SPARK_REDACTION_REGEX}|{FLOODGATE_REDACTION_REGEX.removeprefix('(?i)')}"
)

#: A URL's ``scheme://user:password@``; the password runs to the first ``@``, as
#: SQLAlchemy's ``make_url`` and libpq read it (a ``/`` in it included).
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"]*):(?P<password>[^@\s'\"]*)@"
)

#: ``name=value`` or ``name="value"`` whose name is a secret's (a URL's query, a
#: libpq keyword string, a JAAS line).
_SECRET_PAIR = re.compile(
    r"(?P<head>\b[\w.\-]*(?:secret|password|passwd|pwd|token|access[.]?key)[\w.\-]*\s*=\s*)"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s&;,'\")]*)",
    re.IGNORECASE,
)

_V = TypeVar("_V")


class Redactor:
    """Tells secret-bearing settings by key (and value) and shows them redacted.

    Args:
        spark_regex: the ``spark.redaction.regex`` in force (Java regex syntax, as far
            as Python's ``re`` reads it); default :data:`SPARK_REDACTION_REGEX`.

    Raises:
        re.error: ``spark_regex`` is not a regular expression Python can read.
    """

    def __init__(self, spark_regex: str = SPARK_REDACTION_REGEX) -> None:
        self.spark_regex = spark_regex
        self._patterns: tuple[re.Pattern[str], ...] = (
            re.compile(spark_regex),  # Java's syntax, as far as Python's reads it
            re.compile(FLOODGATE_REDACTION_REGEX),
        )

    @classmethod
    def from_spark_regex(cls, spark_regex: str | None) -> Redactor:
        """The redactor of a session whose ``spark.redaction.regex`` is
        ``spark_regex`` (``None``: unset, Spark's default); one Python cannot read
        leaves Spark's default in force beside it, so nothing the default hides is
        shown."""
        if not spark_regex or spark_regex == SPARK_REDACTION_REGEX:
            return default_redactor()
        try:
            own = cls(spark_regex)
        except re.error:
            return default_redactor()
        own._patterns = (*own._patterns, *default_redactor()._patterns)
        return own

    def is_secret(self, key: str, value: object = None) -> bool:
        """Whether the setting ``key`` (a Spark, Hadoop, Kafka or Floodgate key, dotted)
        holds a secret: its key, or its value as text, matches a pattern (Spark's
        ``Utils.redact`` checks both)."""
        texts = [key] if value is None else [key, str(value)]
        return any(p.search(t) for p in self._patterns for t in texts)

    def value(self, key: str, value: _V) -> _V | str:
        """``value`` as it may be shown under ``key``: :data:`REDACTED` when the
        setting is secret, a string with its URL passwords hidden (:func:`redact_text`),
        anything else as it is."""
        if self.is_secret(key, value):
            return REDACTED
        if isinstance(value, str):
            return redact_text(value)
        return value

    def settings(self, settings: Mapping[str, _V]) -> dict[str, _V | str]:
        """``settings`` (key to value) with every secret value redacted (:meth:`value`)."""
        return {key: self.value(key, value) for key, value in settings.items()}


@functools.cache
def default_redactor() -> Redactor:
    """The redactor of Spark's default ``spark.redaction.regex``: what the services
    that run no Spark, and a driver before its session, use."""
    return Redactor()


def is_secret(key: str, value: object = None) -> bool:
    """:meth:`Redactor.is_secret` with Spark's default ``spark.redaction.regex``."""
    return default_redactor().is_secret(key, value)


def redact_value(key: str, value: _V) -> _V | str:
    """:meth:`Redactor.value` with Spark's default ``spark.redaction.regex``."""
    return default_redactor().value(key, value)


def redact_settings(settings: Mapping[str, _V]) -> dict[str, _V | str]:
    """:meth:`Redactor.settings` with Spark's default ``spark.redaction.regex``."""
    return default_redactor().settings(settings)


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (``postgresql://user:***@host/db``),
    and the values of secret query parameters (``?password=...``) as well; a URL
    without them is returned as it is."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` (a message, a URL, a command line) with every URL password and every
    ``name=value`` whose name is a secret's (``password=``, ``token=``,
    ``secret.key=``) shown as ``***``."""
    text = _URL_PASSWORD.sub(rf"\g<head>:{HIDDEN_PASSWORD}@", text)
    return _SECRET_PAIR.sub(_hide_pair, text)


def _hide_pair(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group('head')}{quote}{HIDDEN_PASSWORD}{quote}"


def redact_any(key: str, value: Any) -> Any:
    """A value of any shape under ``key`` as an error may show it: :data:`REDACTED`
    when ``key`` is a secret's (by key alone: a refused value is shown unless its key
    is secret); a mapping's items and a list's elements one by one (a mapping's keys
    extend ``key``); a string with its URL passwords hidden (:func:`redact_text`)."""
    if is_secret(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact_any(f"{key}.{k}", v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_any(key, v) for v in value)
    if isinstance(value, str):
        return redact_text(value)
    return value
