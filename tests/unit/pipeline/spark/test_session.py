"""Unit tests of :func:`pipeline.spark.session.check_cluster_security`: which cluster
drivers start (Spark's RPC authenticated, its secret from a file or
``spark-defaults.conf``), which are refused, and what is only warned about.

The same refusal on a real standalone master, through ``spark-submit``, is in
``tests/integration/deployment/test_spark_cluster.py``.
"""

from __future__ import annotations

import logging

import pytest

from pipeline.errors import ConfigError
from pipeline.spark.session import check_cluster_security

STANDALONE = "spark://10.0.0.1:7077"
AUTHENTICATED = {
    "spark.authenticate": "true",
    "spark.authenticate.secret": "from-spark-defaults",
    "spark.network.crypto.enabled": "true",
}


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*,3]", "local-cluster[2,1,1024]"])
def test_a_local_master_needs_no_authentication(master: str) -> None:
    check_cluster_security(master, {})


@pytest.mark.parametrize("value", [None, "false", "no"])
def test_a_cluster_without_spark_authenticate_is_refused(value: str | None) -> None:
    settings = {} if value is None else {"spark.authenticate": value}
    with pytest.raises(ConfigError) as refused:
        check_cluster_security(STANDALONE, settings)
    assert refused.value.key == "spark.authenticate"
    assert "query_group.allow_unauthenticated_spark" in str(refused.value)
    assert "query_group.allow_unauthenticated_spark = true" in str(refused.value.allowed)


def test_allow_unauthenticated_spark_starts_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.spark.session"):
        check_cluster_security(STANDALONE, {}, allow_unauthenticated=True)
    assert "allow_unauthenticated_spark" in caplog.text
    assert STANDALONE in caplog.text


def test_standalone_needs_the_secret_in_spark_defaults() -> None:
    with pytest.raises(ConfigError) as refused:
        check_cluster_security(
            STANDALONE,
            {"spark.authenticate": "true", "spark.authenticate.secret.file": "/run/s"},
        )
    assert refused.value.key == "spark.authenticate.secret"
    assert "spark-defaults.conf" in str(refused.value)


def test_an_authenticated_encrypted_cluster_starts_without_a_word(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="pipeline.spark.session"):
        check_cluster_security(STANDALONE, AUTHENTICATED)
    assert caplog.text == ""


def test_authentication_without_encryption_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = {**AUTHENTICATED, "spark.network.crypto.enabled": "false"}
    with caplog.at_level(logging.WARNING, logger="pipeline.spark.session"):
        check_cluster_security(STANDALONE, settings)
    assert "spark.network.crypto.enabled" in caplog.text


@pytest.mark.parametrize(
    "argument",
    ["spark.authenticate.secret=s3cr3t", "-Dspark.authenticate.secret=s3cr3t"],
)
@pytest.mark.parametrize("master", [STANDALONE, "local[2]"])
def test_a_secret_on_the_jvm_command_line_is_refused(argument: str, master: str) -> None:
    """``spark-submit --conf`` and ``-D`` put it in the JVM's argv, which ``ps`` shows."""
    with pytest.raises(ConfigError) as refused:
        check_cluster_security(
            master,
            AUTHENTICATED,
            jvm_arguments=["org.apache.spark.deploy.SparkSubmit", "--conf", argument],
        )
    assert refused.value.key == "spark.authenticate.secret"
    assert "s3cr3t" not in str(refused.value)


def test_a_secret_file_on_the_command_line_is_no_secret() -> None:
    check_cluster_security(
        "k8s://https://api:6443",
        {
            "spark.authenticate": "true",
            "spark.authenticate.secret.file": "/run/s",
            "spark.network.crypto.enabled": "true",
        },
        jvm_arguments=["--conf", "spark.authenticate.secret.file=/run/s"],
    )


@pytest.mark.parametrize(
    ("files", "starts"),
    [
        ({"spark.authenticate.secret.file": "/s"}, True),
        (
            {
                "spark.authenticate.secret.driver.file": "/d",
                "spark.authenticate.secret.executor.file": "/e",
            },
            True,
        ),
        ({"spark.authenticate.secret.driver.file": "/d"}, False),
        ({"spark.authenticate.secret": "in-spark-defaults"}, False),
        ({}, False),
    ],
)
def test_kubernetes_takes_the_secret_from_a_file(files: dict[str, str], starts: bool) -> None:
    settings = {"spark.authenticate": "true", "spark.network.crypto.enabled": "true", **files}
    if starts:
        check_cluster_security("k8s://https://api:6443", settings)
    else:
        with pytest.raises(ConfigError) as refused:
            check_cluster_security("k8s://https://api:6443", settings)
        assert refused.value.key == "spark.authenticate.secret.file"


def test_yarn_makes_its_own_secret() -> None:
    check_cluster_security(
        "yarn", {"spark.authenticate": "true", "spark.network.crypto.enabled": "true"}
    )


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("local", "local[1,4]"),
        ("local[2]", "local[2,4]"),
        ("local[*]", "local[*,4]"),
        ("local[2,3]", "local[2,3]"),
        ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),
        ("spark://master:7077", "spark://master:7077"),
    ],
)
def test_a_local_master_without_attempts_gets_a_cluster_s_four(master: str, expected: str) -> None:
    from pipeline.spark.session import with_task_retries

    assert with_task_retries(master) == expected
