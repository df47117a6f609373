"""A job's environment is built from a base set and the job's own ``env``, minus a
deny-list: nothing of the service's own environment leaks into it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from admission.config import AdmissionSettings
from admission.environment import (
    DENIED_NAMES,
    DENIED_PREFIXES,
    JOB_ID_VARIABLE,
    allowlist_entry_reason,
    base_environment,
    denied_reason,
    env_allowed,
    invalid_reason,
    job_environment,
)

SERVICE_ENV = {
    "PATH": "/home/op/bin:/usr/bin",
    "HOME": "/home/op",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "JAVA_HOME": "/usr/lib/jvm/java-17",
    "FLOODGATE__ADMISSION__TOKEN": "s3cr3t",
    "FLOODGATE_KAFKA_BOOTSTRAP": "broker:9092",
    "LD_PRELOAD": "/tmp/evil.so",
    "PYTHONPATH": "/tmp/evil",
    "AWS_SECRET_ACCESS_KEY": "cloud-secret",
    "SPARK_HOME": "/opt/other-spark",
}


def test_the_base_set_takes_only_the_documented_names_from_the_service() -> None:
    base = base_environment(job_path="/usr/bin:/bin", job_env={}, service_env=SERVICE_ENV)
    assert base == {
        "PATH": "/usr/bin:/bin",  # from the config, not the service's PATH
        "HOME": "/home/op",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "JAVA_HOME": "/usr/lib/jvm/java-17",
    }


def test_the_operators_job_env_is_set_even_for_names_a_job_may_not_set() -> None:
    base = base_environment(
        job_path="/usr/bin", job_env={"SPARK_HOME": "/opt/spark"}, service_env=SERVICE_ENV
    )
    assert base["SPARK_HOME"] == "/opt/spark"
    assert denied_reason("SPARK_HOME") is not None


def test_the_job_id_variable_is_set_last_and_a_job_cannot_set_it() -> None:
    env = job_environment({"PATH": "/usr/bin"}, {"MINE": "1"}, job_id=7)
    assert env == {"PATH": "/usr/bin", "MINE": "1", JOB_ID_VARIABLE: "7"}
    assert denied_reason(JOB_ID_VARIABLE) is not None


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "ld_preload",  # matched without regard to case
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYSPARK_PYTHON",
        "SPARK_HOME",
        "SPARK_CONF_DIR",
        "SPARK_SUBMIT_OPTS",
        "JAVA_TOOL_OPTIONS",
        "JAVA_HOME",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_ls%%",
        "IFS",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "NODE_OPTIONS",
        "GCONV_PATH",
        "HOME",
        "HADOOP_CONF_DIR",
        "FLOODGATE__ADMISSION__TOKEN",
    ],
)
def test_loader_interpreter_and_launcher_variables_are_denied(name: str) -> None:
    assert denied_reason(name) is not None


@pytest.mark.parametrize(
    "name", ["MARK", "KAFKA_TOPIC", "FLOODGATE_KAFKA_BOOTSTRAP", "FLOODGATE__QUERY_GROUP__NAME"]
)
def test_a_jobs_own_variables_are_allowed(name: str) -> None:
    assert denied_reason(name) is None


@given(
    prefix=st.sampled_from(sorted(DENIED_PREFIXES)),
    rest=st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789"),
    lower=st.booleans(),
)
def test_every_name_under_a_denied_prefix_is_denied_in_any_case(
    prefix: str, rest: str, lower: bool
) -> None:
    name = prefix + rest
    assert denied_reason(name.lower() if lower else name) is not None


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("", "x", "needs a name"),
        ("A=B", "x", "holds '='"),
        ("A\0B", "x", "NUL byte"),
        ("A", "x\0y", "NUL byte"),
    ],
)
def test_what_execve_cannot_carry_is_invalid(name: str, value: str, words: str) -> None:
    reason = invalid_reason(name, value)
    assert reason is not None and words in reason


def test_job_path_must_be_absolute_folders_and_job_env_not_the_services_own() -> None:
    with pytest.raises(ValueError, match="job_path entry 'bin' is not an absolute folder"):
        AdmissionSettings(job_path="bin:/usr/bin")
    with pytest.raises(ValueError, match="job_path entry '' is not an absolute folder"):
        AdmissionSettings(job_path="/usr/bin::/bin")
    with pytest.raises(ValueError, match="FLOODGATE__ADMISSION__TOKEN"):
        AdmissionSettings(job_env={"FLOODGATE__ADMISSION__TOKEN": "x"})
    with pytest.raises(ValueError, match="holds '='"):
        AdmissionSettings(job_env={"A=B": "x"})


def test_docs_admission_lists_every_denied_name_and_prefix() -> None:
    page = (Path(__file__).resolve().parents[3] / "docs" / "admission.md").read_text()
    for prefix in DENIED_PREFIXES:
        assert f"| `{prefix}*` |" in page, prefix
    for name in DENIED_NAMES:
        assert f"| `{name}` |" in page, name


#: glibc's list of variables unsafe for a privileged program (unsecvars.h), and the
#: variables that make Kerberos or SASL load plug-ins: eight of them were once accepted.
GLIBC_UNSAFE = (
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_DYNAMIC_WEAK",
    "LD_HWCAP_MASK",
    "LD_LIBRARY_PATH",
    "LD_ORIGIN_PATH",
    "LD_PRELOAD",
    "LD_PROFILE",
    "LD_SHOW_AUXV",
    "LD_USE_LOAD_BIAS",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TMPDIR",
    "TZDIR",
)


@pytest.mark.parametrize("name", [*GLIBC_UNSAFE, "KRB5_CONFIG", "KRB5CCNAME", "SASL_PATH"])
def test_glibcs_unsafe_variables_and_plug_in_loaders_are_denied(name: str) -> None:
    assert denied_reason(name) is not None


@pytest.mark.parametrize(
    ("entry", "name", "allowed"),
    [
        ("MARK", "MARK", True),
        ("MARK", "mark", False),  # names are case-sensitive
        ("MARK", "MARKER", False),
        ("APP_*", "APP_MODE", True),
        ("APP_*", "APPMODE", False),
        ("*", "ANYTHING", True),
    ],
)
def test_the_env_allowlist_names_names_and_prefixes(entry: str, name: str, allowed: bool) -> None:
    assert env_allowed(name, [entry]) is allowed
    assert not env_allowed(name, [])


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("LD_PRELOAD", "on the deny-list"),
        ("SPARK_*", "every name 'SPARK_*' allows is on the deny-list"),
        ("ld_*", "every name"),
        ("A*B", "may only end an entry"),
        ("A=B", "holds '='"),
    ],
)
def test_an_env_allowlist_entry_the_deny_list_covers_is_refused_at_start(
    entry: str, words: str
) -> None:
    assert words in (allowlist_entry_reason(entry) or "")
    with pytest.raises(ValueError, match="job_env_allowlist"):
        AdmissionSettings(job_env_allowlist=[entry])


@pytest.mark.parametrize("entry", ["MARK", "APP_*", "*", "S*"])
def test_an_env_allowlist_entry_wider_than_the_deny_list_is_taken(entry: str) -> None:
    assert allowlist_entry_reason(entry) is None
