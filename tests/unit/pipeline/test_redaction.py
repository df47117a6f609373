"""Unit tests of :mod:`pipeline.redaction`: which settings hold a secret (Spark's
``spark.redaction.regex`` and Floodgate's extension), URL passwords, and a property:
a value under a secret key never appears in what is shown."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipeline.errors import ConfigError
from pipeline.redaction import (
    FLOODGATE_REDACTION_REGEX,
    REDACTED,
    SESSION_REDACTION_REGEX,
    SPARK_REDACTION_REGEX,
    Redactor,
    is_secret,
    redact_any,
    redact_settings,
    redact_text,
    redact_url,
)

#: Secret-bearing keys of Spark, Hadoop's object stores, Kafka (Java and librdkafka),
#: the Schema Registry and Floodgate.
SECRET_KEYS = [
    # Spark's default spark.redaction.regex
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.authenticate.secret",
    "spark.ssl.keyStorePassword",
    "sasl.password",
    "admission.token",
    # Floodgate's extension
    "kafka.sasl.jaas.config",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "spark.hadoop.fs.s3a.encryption.key",
    "spark.hadoop.fs.s3a.bucket.logs.server-side-encryption.key",
    "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net",
    "spark.hadoop.fs.azure.sas.container.acct",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.hadoop.fs.gs.encryption.key",
    "basic.auth.user.info",
    "admission.intake_key",
]

#: Settings that hold no secret, shown as they are.
PLAIN_SETTINGS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.master": "local[2]",
    "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000",
    "spark.hadoop.fs.s3a.aws.credentials.provider": (
        "com.amazonaws.auth.EnvironmentVariableCredentialsProvider"
    ),
    "spark.hadoop.hadoop.security.credential.provider.path": "jceks://file/etc/s3.jceks",
    "spark.hadoop.fs.azure.account.keyprovider.acct": "org.example.KeyProvider",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "security.protocol": "SASL_SSL",
    "ssl.truststore.location": "/etc/kafka/truststore.p12",
    "bootstrap.servers": "127.0.0.1:9092",
}


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_secret_bearing_key_is_redacted(key: str) -> None:
    assert is_secret(key)
    assert redact_settings({key: "s3cr3t-value"}) == {key: REDACTED}


def test_spark_s_default_alone_misses_what_floodgate_adds() -> None:
    spark_only = re.compile(SPARK_REDACTION_REGEX)
    missed = [k for k in SECRET_KEYS if not spark_only.search(k)]
    assert "kafka.sasl.jaas.config" in missed and "ssl.keystore.key" in missed
    assert all(re.search(FLOODGATE_REDACTION_REGEX, k) for k in missed)
    assert all(re.search(SESSION_REDACTION_REGEX, k) for k in SECRET_KEYS)


def test_settings_without_a_secret_are_shown_as_they_are() -> None:
    assert redact_settings(PLAIN_SETTINGS) == PLAIN_SETTINGS


def test_a_value_that_names_a_secret_is_redacted_as_spark_does() -> None:
    """Spark's ``Utils.redact`` matches the value as well as the key; a URL with a
    password (the source's ``sweepCatalog`` option) is one too."""
    shown = redact_settings(
        {
            "spark.app.opts": "-Dpassword=hunter2-hunter2",
            "sweepCatalog": "postgresql+psycopg://u:pw-7@h/catalog",
            "spark.app.endpoint": "http://127.0.0.1:8080/x",
        }
    )
    assert shown == {
        "spark.app.opts": REDACTED,
        "sweepCatalog": REDACTED,
        "spark.app.endpoint": "http://127.0.0.1:8080/x",
    }


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://user:pw@host/db", "postgresql://user:***@host/db"),
        ("postgresql+psycopg://u:p/w@h:5432/db", "postgresql+psycopg://u:***@h:5432/db"),
        ("redis://:pw@host:6379", "redis://:***@host:6379"),
        ("http://reg:pw@127.0.0.1:8081", "http://reg:***@127.0.0.1:8081"),
        (
            "postgresql://h/db?sslmode=require&password=pw",
            "postgresql://h/db?sslmode=require&password=***",
        ),
        ("postgresql://user@host/db", "postgresql://user@host/db"),
        ("sqlite:////var/lib/floodgate/catalog.db", "sqlite:////var/lib/floodgate/catalog.db"),
        ("http://127.0.0.1:8787/status", "http://127.0.0.1:8787/status"),
    ],
)
def test_a_url_s_password_is_hidden_and_the_rest_shown(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_password_in_a_jaas_line_or_a_message_is_hidden() -> None:
    jaas = 'PlainLoginModule required username="alice" password="pw-1";'
    assert redact_text(jaas) == 'PlainLoginModule required username="alice" password="***";'
    message = "catalog 'postgresql://a:pw-2@h/x', not 'postgresql://b:pw-3@h/y'"
    assert redact_text(message) == "catalog 'postgresql://a:***@h/x', not 'postgresql://b:***@h/y'"


def test_a_custom_spark_redaction_regex_adds_to_the_default() -> None:
    own = Redactor.from_spark_regex("(?i)internal[.]id")
    assert own.is_secret("spark.app.internal.id")
    assert own.is_secret("spark.hadoop.fs.s3a.secret.key")  # Spark's default still holds
    assert own.is_secret("kafka.sasl.jaas.config")  # and Floodgate's extension


def test_a_spark_regex_python_cannot_read_leaves_the_default_in_force() -> None:
    own = Redactor.from_spark_regex("(?<name>[)")
    assert own.is_secret("spark.hadoop.fs.s3a.access.key")


def test_a_config_error_never_carries_a_secret_value() -> None:
    error = ConfigError(
        "kafka.client may not set 'sasl.password'",
        key="kafka.client.sasl.password",
        value="pw-4",
        allowed="postgresql://u:pw-5@h/db",
    )
    assert error.value == REDACTED
    assert error.allowed == "postgresql://u:***@h/db"
    url = ConfigError("catalog postgresql://u:pw-6@h/db refused", key="catalog", value="x")
    assert "pw-6" not in str(url) and "postgresql://u:***@h/db" in str(url)


def test_a_structure_under_a_secret_key_is_redacted_whole() -> None:
    assert redact_any("spark.conf.spark.hadoop.fs.s3a.secret.key", ["a", "b"]) == REDACTED
    assert redact_any("hosts", ("a", "postgresql://u:pw@h/db")) == ("a", "postgresql://u:***@h/db")
    assert redact_any("kafka.client", {"sasl.password": "pw", "sasl.username": "u"}) == {
        "sasl.password": REDACTED,
        "sasl.username": "u",
    }


_secret_keys = st.builds(
    lambda prefix, key: prefix + key,
    st.sampled_from(["", "spark.hadoop.", "spark.kafka.clusters.c1.", "kafka.", "spark.conf."]),
    st.sampled_from(SECRET_KEYS),
)
_values = st.text(alphabet=string.printable, min_size=1, max_size=40)
#: What a URL's password can be: no ``@`` (the first one ends it), no blank or quote.
_passwords = st.text(
    alphabet=string.ascii_letters + string.digits + "!#$%&()*+,-./:;<=>?[]^_{|}~",
    min_size=1,
    max_size=30,
)


@given(key=_secret_keys, value=_values, plain=st.sampled_from(sorted(PLAIN_SETTINGS)))
def test_a_value_under_a_secret_key_never_appears_in_what_is_shown(
    key: str, value: str, plain: str
) -> None:
    shown = redact_settings({plain: PLAIN_SETTINGS[plain], key: value})
    assert shown == {plain: PLAIN_SETTINGS[plain], key: REDACTED}
    error = ConfigError(f"refused: {redact_any(key, value)!r}", key=key, value=value)
    assert error.value == REDACTED
    assume(value not in f"refused: {REDACTED!r}")  # else it is read in the text itself
    assert value not in str(error)


@given(user=st.from_regex(r"[a-z]{1,8}", fullmatch=True), password=_passwords)
def test_a_url_password_never_appears_in_what_is_shown(user: str, password: str) -> None:
    url = f"postgresql+psycopg://{user}:{password}@db.example:5432/catalog"
    assert redact_url(url) == f"postgresql+psycopg://{user}:***@db.example:5432/catalog"
    assert redact_text(f"catalog {url!r} refused") == (
        f"catalog 'postgresql+psycopg://{user}:***@db.example:5432/catalog' refused"
    )
