"""The admission config is refused at start, naming the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.config import AdmissionSettings, load_admission_config, resolve_program
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "conf" / "admission.toml"
TOKEN = {"FLOODGATE__ADMISSION__TOKEN": "s3cr3t-t0ken-of-the-unit-tests-0a1b"}


def test_the_shipped_config_loads_with_a_token_from_the_environment() -> None:
    settings = load_admission_config(CONFIG, env=TOKEN)
    assert settings.system_cpu_limit == 0.85 and settings.max_queue_size == 100_000
    token = TOKEN["FLOODGATE__ADMISSION__TOKEN"]
    assert settings.token is not None and settings.token.get_secret_value() == token
    assert token not in str(settings) + repr(settings)  # the secret is not shown


def test_a_missing_token_is_refused_naming_the_key_and_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"admission\.token is required") as caught:
        load_admission_config(CONFIG, env={})
    assert "FLOODGATE__ADMISSION__TOKEN" in str(caught.value)


def test_an_unknown_key_is_refused_with_the_allowed_ones() -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__SYSTEM_CPU_LIMT": "0.5"}
    with pytest.raises(ConfigError, match=r"unknown key 'admission\.system_cpu_limt'") as caught:
        load_admission_config(CONFIG, env=env)
    assert "system_cpu_limit" in str(caught.value)


def test_a_value_out_of_range_is_refused_with_the_value() -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__SYSTEM_CPU_LIMIT": "1.5"}
    with pytest.raises(ConfigError, match=r"'admission.system_cpu_limit' = 1.5 is refused"):
        load_admission_config(CONFIG, env=env)


def test_load_steps_out_of_order_are_refused() -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__MIN_LOAD_STEP": "5"}
    with pytest.raises(ConfigError, match="min_load_step <= initial_load_step"):
        load_admission_config(CONFIG, env=env)


def test_an_allowlist_entry_that_is_no_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[admission]\nallowlist = ["no-such-program-anywhere"]\n')
    with pytest.raises(ConfigError, match="'no-such-program-anywhere' names no executable"):
        load_admission_config(path, env=TOKEN)


def test_other_sections_overrides_are_not_ours() -> None:
    env = {**TOKEN, "FLOODGATE__QUERY_GROUP__TRIGGER_INTERVAL_MS": "250"}
    assert load_admission_config(CONFIG, env=env).port == 8787


def test_kafka_client_settings_are_taken_for_the_intake_without_showing_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "admission.toml"
    path.write_text(
        "[admission.kafka_client]\n"
        '"security.protocol" = "SASL_PLAINTEXT"\n'
        '"sasl.mechanism" = "PLAIN"\n'
        '"sasl.username" = "intake"\n'
        '"sasl.password" = "pa55-w0rd"\n'
    )
    settings = load_admission_config(path, env=TOKEN)
    assert settings.kafka_client["security.protocol"] == "SASL_PLAINTEXT"
    assert settings.kafka_client["sasl.password"] == "pa55-w0rd"


@pytest.mark.parametrize("key", ["bootstrap.servers", "group.id", "enable.auto.commit"])
def test_kafka_client_may_not_set_what_the_intake_owns_naming_the_key(
    tmp_path: Path, key: str
) -> None:
    path = tmp_path / "admission.toml"
    path.write_text(f'[admission.kafka_client]\n"{key}" = "x"\n"sasl.password" = "pa55-w0rd"\n')
    with pytest.raises(ConfigError, match=f"kafka_client may not set '{key}'") as caught:
        load_admission_config(path, env=TOKEN)
    assert "pa55-w0rd" not in str(caught.value)


@pytest.mark.parametrize(
    "token",
    [
        '"quoted-3f9c0a7e1b5d"',
        "1234567890" * 4,
        "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]",
        "a = 0x5e1f9c2d7b3a4c",
    ],
)
def test_the_token_from_the_environment_is_taken_as_written(token: str) -> None:
    # The token was once parsed as TOML ('"quoted"' lost its quotes, '12345'
    # became an int and was refused).
    settings = load_admission_config(CONFIG, env={"FLOODGATE__ADMISSION__TOKEN": token})
    assert settings.token is not None and settings.token.get_secret_value() == token


def test_other_overrides_are_still_read_as_toml_values() -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__PORT": "9001", "FLOODGATE__ADMISSION__HOST": '"::x"'}
    with pytest.raises(ConfigError, match=r"'admission\.host' = '::x' is refused"):
        load_admission_config(CONFIG, env=env)
    del env["FLOODGATE__ADMISSION__HOST"]
    assert load_admission_config(CONFIG, env=env).port == 9001


@pytest.mark.parametrize("host", ["", "  ", "not a host", "999.1.1.1", "-bad-.example", "a_b"])
def test_an_empty_or_invalid_host_is_refused_naming_the_key_and_what_is_allowed(
    host: str,
) -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__HOST": host}
    with pytest.raises(ConfigError, match=r"'admission\.host'") as caught:
        load_admission_config(CONFIG, env=env)
    assert "an IPv4 address" in str(caught.value) and "host name" in str(caught.value)
    assert caught.value.key == "admission.host"


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "10.1.2.3", "localhost", "db-1.lan"])
def test_an_ipv4_address_or_a_host_name_is_taken(host: str) -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__HOST": host}
    assert load_admission_config(CONFIG, env=env).host == host


def test_the_request_body_limit_defaults_to_one_mib_and_must_be_positive() -> None:
    assert load_admission_config(CONFIG, env=TOKEN).max_request_body_bytes == 1 << 20
    env = {**TOKEN, "FLOODGATE__ADMISSION__MAX_REQUEST_BODY_BYTES": "0"}
    with pytest.raises(ConfigError, match=r"'admission\.max_request_body_bytes' = 0"):
        load_admission_config(CONFIG, env=env)


def test_the_request_intake_is_off_by_default_and_refused_on_without_its_key(
    tmp_path: Path,
) -> None:
    """With a cluster named, the intake once read unauthenticated requests."""
    env = {**TOKEN, "FLOODGATE_KAFKA_BOOTSTRAP": "127.0.0.1:9092"}
    assert load_admission_config(CONFIG, env=env).intake is False
    on = {**env, "FLOODGATE__ADMISSION__INTAKE": "true"}
    with pytest.raises(ConfigError, match=r"admission\.intake_key must be") as caught:
        load_admission_config(CONFIG, env=on)
    assert caught.value.key == "admission.intake_key"
    with pytest.raises(ConfigError, match=r"at least 32 characters \(got 5\)"):
        load_admission_config(CONFIG, env={**on, "FLOODGATE__ADMISSION__INTAKE_KEY": "short"})
    key = "0123456789abcdef" * 2
    settings = load_admission_config(CONFIG, env={**on, "FLOODGATE__ADMISSION__INTAKE_KEY": key})
    assert settings.intake and key not in str(settings) + repr(settings)


def write_program(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_an_allowlisted_symlink_admits_its_own_name_only(tmp_path: Path) -> None:
    """Every symlink to an allowlisted file was once admitted, and the job ran the
    file the symlink pointed to with that file's name as argv[0]."""
    wrapper = write_program(tmp_path / "lib" / "wrapper")
    (tmp_path / "bin").mkdir()
    for name in ("pg_isready", "pg_dump"):
        (tmp_path / "bin" / name).symlink_to(wrapper)
    (tmp_path / "link").symlink_to(tmp_path / "bin")  # a folder's symlink is resolved
    allowed = str(tmp_path / "bin" / "pg_isready")
    assert resolve_program(allowed) == allowed
    assert resolve_program(str(tmp_path / "link" / "pg_isready")) == allowed
    assert resolve_program(str(tmp_path / "bin" / "pg_dump")) != allowed
    assert resolve_program("tr\0ue") is None and resolve_program("") is None
    settings = AdmissionSettings(allowlist=[allowed])
    assert settings.resolved_allowlist() == {allowed: allowed}


@pytest.mark.parametrize("target", ["busybox", "pg_wrapper", "toybox"])
def test_a_known_multi_call_program_is_refused_as_an_allowlist_entry(
    tmp_path: Path, target: str
) -> None:
    program = write_program(tmp_path / "lib" / target)
    link = tmp_path / "bin" / "ls"
    link.parent.mkdir()
    link.symlink_to(program)
    for entry in (str(program), str(link)):
        with pytest.raises(ConfigError, match="would admit every program it can run") as caught:
            AdmissionSettings(allowlist=[entry]).resolved_allowlist()
        assert caught.value.key == "admission.allowlist" and target in str(caught.value)


@pytest.mark.parametrize("token", ["a", "s3cr3t", "a" * 40, "0123456789abcdef0123456789abcde"])
def test_a_token_weaker_than_128_bits_is_refused_naming_the_setting(token: str) -> None:
    """an admission token ``a`` was accepted."""
    with pytest.raises(ConfigError, match=r"admission\.token is too weak") as refused:
        load_admission_config(CONFIG, env={"FLOODGATE__ADMISSION__TOKEN": token})
    assert refused.value.key == "admission.token"
    assert "128 bits" in str(refused.value)


def test_an_intake_key_weaker_than_128_bits_is_refused_naming_the_setting() -> None:
    env = {**TOKEN, "FLOODGATE__ADMISSION__INTAKE_KEY": "k" * 40}
    with pytest.raises(ConfigError, match=r"admission\.intake_key is too weak") as refused:
        load_admission_config(CONFIG, env=env)
    assert refused.value.key == "admission.intake_key"


def test_one_value_as_token_and_intake_key_or_control_token_is_refused_naming_both() -> None:
    """an intake key equal to the admission token was accepted (a
    requester given the key could then call the REST API)."""
    token = TOKEN["FLOODGATE__ADMISSION__TOKEN"]
    on = {**TOKEN, "FLOODGATE__ADMISSION__INTAKE": "true", "FLOODGATE_KAFKA_BOOTSTRAP": "b:9092"}
    with pytest.raises(ConfigError) as refused:
        load_admission_config(CONFIG, env={**on, "FLOODGATE__ADMISSION__INTAKE_KEY": token})
    assert "admission.token and admission.intake_key hold the same value" in str(refused.value)
    assert token not in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        load_admission_config(CONFIG, env={**TOKEN, "FLOODGATE_CONTROL_TOKEN": token})
    assert "admission.token and FLOODGATE_CONTROL_TOKEN hold the same value" in str(refused.value)


def test_a_config_file_holding_a_secret_must_be_its_owners_alone(tmp_path: Path) -> None:
    """a 0644 config file holding ``token`` and ``intake_key`` was
    accepted."""
    path = tmp_path / "admission.toml"
    path.write_text(
        "[admission]\n"
        f'token = "{TOKEN["FLOODGATE__ADMISSION__TOKEN"]}"\n'
        'intake_key = "0f3c9a6e1b7d4c28a5e9f0b3d6c1a7e4"\n'
        f'database_url = "sqlite:///{tmp_path}/jobs.db"\n'
    )
    for mode in (0o644, 0o640, 0o604):
        path.chmod(mode)
        with pytest.raises(ConfigError) as refused:
            load_admission_config(path, env={})
        message = str(refused.value)
        assert f"admission config file {path} holds admission.intake_key, admission.token" in (
            message
        )
        assert f"(mode {mode:04o})" in message and "chmod 600" in message
        assert "0f3c9a6e" not in message
    path.chmod(0o600)
    assert load_admission_config(path, env={}).token is not None
    # A file without a secret may be read by others: the token then comes from the
    # environment.
    path.write_text(f'[admission]\ndatabase_url = "sqlite:///{tmp_path}/jobs.db"\n')
    path.chmod(0o644)
    assert load_admission_config(path, env=TOKEN).token is not None
