"""No secret is ever shown: known random secrets are set everywhere a deployment puts
them, the services run as real processes, every endpoint and refusal is called, and
nothing they answered, printed or wrote holds one of the secrets.

The secrets: the admission token and intake key, a query group's control token, the
S3A access and secret keys in the group's ``[spark] conf``, a SASL password in its
``[kafka] client``, a job's ``env`` value, and PostgreSQL passwords in the URLs of a
sweeper config that is refused at start. Each is ``secrets.token_hex(16)`` (128 bits),
one per role.

One ``floodgate run`` driver serves the module (a Spark driver JVM costs 10 s or
more): :func:`test_the_query_group_status_shows_spark_secrets_redacted` reads its
``/status``; :func:`test_no_secret_appears_in_any_answer_log_or_error` calls every
endpoint of it, of ``floodgate admission serve`` and of ``floodgate sweeper serve``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import tomli_w

from pipeline.redaction import REDACTED
from tests.integration.admission_service import Service, intake_settings, wait_for
from tests.integration.helpers import flights_raw_config, write_query_group
from tests.integration.spark.drivers import DRIVER_TIMEOUT_S, kill_group, start_driver

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Secrets:
    """One known secret per role (32 hex characters each)."""

    admission_token: str
    intake_key: str
    control_token: str
    s3a_access_key: str
    s3a_secret_key: str
    sasl_password: str
    job_env_value: str
    catalog_password: str
    group_catalog_password: str

    def values(self) -> dict[str, str]:
        return dict(vars(self))


@dataclass
class Driver:
    """The module's ``floodgate run`` driver."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    config_path: Path
    root: Path


@pytest.fixture(scope="module")
def known() -> Secrets:
    return Secrets(*(secrets.token_hex(16) for _ in range(9)))


def _private(path: Path, text: str) -> Path:
    """``text`` written to ``path``, 0600 (a file that holds a secret)."""
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


@pytest.fixture(scope="module")
def driver(
    known: Secrets, bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Driver]:
    """``floodgate run`` of a pass-through group whose ``[spark] conf`` holds S3A keys
    and whose ``[kafka] client`` holds a SASL password (the broker is PLAINTEXT, so
    neither is used), its control token from ``FLOODGATE_CONTROL_TOKEN``."""
    root = tmp_path_factory.mktemp("no-secret")
    run_id = secrets.token_hex(5)
    raw = flights_raw_config(run_id, root / "checkpoints", only_passthrough=True)
    raw["query_group"].update(
        control_dir=str(root / "run"), sweep_catalog_url=f"sqlite:///{root / 'catalog.db'}"
    )
    raw["spark"] = {
        "conf": {
            "spark.hadoop.fs.s3a.access.key": known.s3a_access_key,
            "spark.hadoop.fs.s3a.secret.key": known.s3a_secret_key,
            "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9",
        }
    }
    raw["kafka"] = {"client": {"sasl.username": "floodgate", "sasl.password": known.sasl_password}}
    config_path = root / "group.toml"
    config = write_query_group(raw, config_path)
    os.chmod(config_path, 0o600)
    log_path = root / "driver.log"
    process = start_driver(
        config_path, bootstrap, log_path, FLOODGATE_CONTROL_TOKEN=known.control_token
    )
    try:
        control_file = root / "run" / f"{config.name}.json"
        wait_for(
            lambda: _alive(process, log_path) and control_file.exists(),
            "the driver's control file",
            timeout_s=DRIVER_TIMEOUT_S,
        )
        url = str(json.loads(control_file.read_text())["url"]).rstrip("/")
        bearer = {"Authorization": f"Bearer {known.control_token}"}
        wait_for(
            lambda: (
                _alive(process, log_path)
                and httpx.get(f"{url}/status", headers=bearer, timeout=10).json()["spark"]
                is not None
            ),
            "the driver's SparkSession",
            timeout_s=DRIVER_TIMEOUT_S,
        )
        yield Driver(process, url, log_path, config_path, root)
    finally:
        if process.poll() is None:
            kill_group(process)


def _alive(process: subprocess.Popen[bytes], log_path: Path) -> bool:
    assert process.poll() is None, log_path.read_text(errors="replace")[-4000:]
    return True


def test_the_query_group_status_shows_spark_secrets_redacted(
    driver: Driver, known: Secrets
) -> None:
    """``GET /status`` is open to anyone who reaches the port; and a
    holder of the control token sees no secret either."""
    open_read = httpx.get(f"{driver.url}/status", timeout=10)
    assert open_read.status_code == 200
    assert known.s3a_access_key not in open_read.text
    assert known.s3a_secret_key not in open_read.text
    bearer = {"Authorization": f"Bearer {known.control_token}"}
    response = httpx.get(f"{driver.url}/status", headers=bearer, timeout=10)
    assert response.status_code == 200
    settings = response.json()["spark"]["settings"]
    assert settings["spark.hadoop.fs.s3a.access.key"] == {
        "value": REDACTED,
        "source": "query group",
    }
    assert settings["spark.hadoop.fs.s3a.secret.key"]["value"] == REDACTED
    assert settings["spark.hadoop.fs.s3a.endpoint"]["value"] == "http://127.0.0.1:9"
    assert known.s3a_access_key not in response.text
    assert known.s3a_secret_key not in response.text


# --------------------------------------------------------------------------- the suite-level test


@dataclass
class Seen:
    """Everything the services answered and printed, to grep for the secrets."""

    texts: list[tuple[str, str]]

    def answer(self, what: str, response: httpx.Response) -> httpx.Response:
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        self.texts.append((f"{what} -> {response.status_code}", f"{headers}\n{response.text}"))
        return response


def _get(seen: Seen, base: str, *paths: str) -> None:
    for path in paths:
        seen.answer(f"GET {base}{path}", httpx.get(f"{base}{path}", timeout=30))


def _sweeper_command(config: Path, bootstrap: str) -> list[str]:
    """``floodgate sweeper serve`` of ``config`` on ``bootstrap``."""
    serve = ["sweeper", "serve", "--config", str(config), "--bootstrap", bootstrap]
    return [sys.executable, "-m", "pipeline.cli", *serve]


def _start_sweeper(config: Path, bootstrap: str, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            _sweeper_command(config, bootstrap),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def test_no_secret_appears_in_any_answer_log_or_error(
    driver: Driver,
    known: Secrets,
    bootstrap: str,
    serve: Callable[..., Service],
    run_id: str,
    tmp_path: Path,
) -> None:
    seen = Seen([])
    # The query group's endpoint: reads, refusals, and a stop with the token.
    _get(seen, driver.url, "/status", "/metrics", "/openapi.json", "/no-such-path")
    right = {"Authorization": f"Bearer {known.control_token}"}
    seen.answer("GET /status, token", httpx.get(f"{driver.url}/status", headers=right))
    seen.answer("POST /stop, no token", httpx.post(f"{driver.url}/stop", timeout=10))
    wrong = {"Authorization": f"Bearer {secrets.token_hex(16)}"}
    seen.answer("POST /stop, wrong token", httpx.post(f"{driver.url}/stop", headers=wrong))
    seen.answer("POST /release", httpx.post(f"{driver.url}/release", headers=right, timeout=10))

    # The admission service, its token and intake key from the environment.
    service = serve(
        service_env={
            "FLOODGATE__ADMISSION__TOKEN": known.admission_token,
            "FLOODGATE__ADMISSION__INTAKE_KEY": known.intake_key,
        },
        **{k: v for k, v in intake_settings(bootstrap, run_id).items() if k != "intake_key"},
    )
    token = known.admission_token
    job = service.call(
        "POST",
        "/jobs",
        token=token,
        json={"argv": ["true"], "env": {"DB_PASSWORD": known.job_env_value}},
    )
    seen.answer("POST /jobs", job)
    assert job.status_code == 201, job.text
    job_id = job.json()["id"]
    wait_for(
        lambda: service.call("GET", f"/jobs/{job_id}", token=None).json()["state"] == "FINISHED_OK",
        "the job's end",
    )
    for path in (f"/jobs/{job_id}", "/jobs", "/status", "/metrics", "/stalls", "/openapi.json"):
        seen.answer(f"admission GET {path}", service.call("GET", path, token=None))
    seen.answer("admission GET /jobs/999999", service.call("GET", "/jobs/999999", token=None))
    seen.answer(
        "admission POST /jobs, no token", service.call("POST", "/jobs", token=None, json={})
    )
    seen.answer(
        "admission POST /jobs, wrong token",
        service.call("POST", "/jobs", token=secrets.token_hex(16), json={"argv": ["true"]}),
    )
    seen.answer(
        "admission POST /jobs, 422",
        service.call("POST", "/jobs", token=token, json={"argv": ["true"], "env": {"A=B": "x"}}),
    )

    # The sweeper of the group's catalog: its endpoint.
    sweeper_config = _private(
        tmp_path / "sweeper.toml",
        tomli_w.dumps(
            {
                "sweeper": {
                    "query_groups": [str(driver.config_path)],
                    "catalog_url": f"sqlite:///{driver.root / 'catalog.db'}",
                    "blob_dir": str(tmp_path / "blobs"),
                    "port": 0,
                }
            }
        ),
    )
    sweeper_log = tmp_path / "sweeper.log"
    sweeper = _start_sweeper(sweeper_config, bootstrap, sweeper_log)
    try:
        announced = "FLOODGATE_SWEEPER_URL="
        wait_for(
            lambda: _alive(sweeper, sweeper_log) and announced in sweeper_log.read_text(),
            "the sweeper's endpoint",
        )
        line = next(x for x in sweeper_log.read_text().splitlines() if x.startswith(announced))
        _get(seen, line.removeprefix(announced), "/status", "/metrics", "/openapi.json", "/x")
    finally:
        if sweeper.poll() is None:
            os.killpg(sweeper.pid, signal.SIGTERM)
            sweeper.wait(timeout=60)

    # Refused at start: a sweeper whose catalog is not its query group's (both URLs
    # hold a password), and an admission service whose intake key is too short.
    mismatch = tmp_path / "group-elsewhere.toml"
    elsewhere = tomllib.loads(driver.config_path.read_text())
    elsewhere["query_group"]["sweep_catalog_url"] = (
        f"postgresql+psycopg://reader:{known.group_catalog_password}@127.0.0.1:9/catalog"
    )
    _private(mismatch, tomli_w.dumps(elsewhere))
    refused_config = _private(
        tmp_path / "sweeper-refused.toml",
        tomli_w.dumps(
            {
                "sweeper": {
                    "query_groups": [str(mismatch)],
                    "catalog_url": (
                        f"postgresql+psycopg://sweeper:{known.catalog_password}@127.0.0.1:9/c"
                    ),
                }
            }
        ),
    )
    refused = subprocess.run(
        _sweeper_command(refused_config, bootstrap),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "sweep_catalog_url" in refused.stderr, refused.stderr
    seen.texts.append(("sweeper refused at start", refused.stdout + refused.stderr))
    short_key = secrets.token_hex(10)  # 20 characters: refused, whatever the rule's minimum
    with pytest.raises(AssertionError) as not_started:
        serve(
            service_env={
                "FLOODGATE__ADMISSION__TOKEN": secrets.token_hex(16),
                "FLOODGATE__ADMISSION__INTAKE_KEY": short_key,
            },
            **{k: v for k, v in intake_settings(bootstrap, run_id).items() if k != "intake_key"},
        )
    assert "intake_key" in str(not_started.value)
    seen.texts.append(("admission refused at start", str(not_started.value)))

    # The driver stops with its token; then every log and file the services wrote.
    seen.answer("POST /stop", httpx.post(f"{driver.url}/stop", headers=right, timeout=10))
    assert driver.process.wait(timeout=120) == 0, driver.log_path.read_text()[-4000:]
    service.process.send_signal(signal.SIGTERM)
    service.process.wait(timeout=60)
    written = {driver.log_path, service.log_path, sweeper_log}
    for root in (driver.root, tmp_path):
        written |= {p for p in root.rglob("*") if p.is_file() and not p.is_symlink()}
    # What holds a secret by design: the config files the test wrote (0600), and
    # admission's job database, which keeps each job's env (docs/security.md, Files).
    holders = {driver.config_path, sweeper_config, mismatch, refused_config}
    for file in sorted(written - holders):
        if file.suffix == ".db" or file.name.endswith((".db-wal", ".db-shm", ".db-journal")):
            continue
        seen.texts.append((str(file), file.read_bytes().decode(errors="replace")))

    found = [
        f"{role} in {what}"
        for what, text in seen.texts
        for role, value in known.values().items()
        if value in text
    ]
    assert not found, found
    assert len(seen.texts) > 30  # every answer and file above was read
