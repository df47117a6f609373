"""A control folder others can write to was once used as is, and a
control file another user planted there was trusted: ``floodgate query-group stop``
sent the control token to the URL it named, and admission read "driver heaps" from it.

A control folder that others can write to, or that another user owns, is refused at
start, naming its path and mode. A control file is trusted only when it is a regular
file of our own user that others cannot write to, reached without a symbolic link;
otherwise the CLI refuses it and sends nothing, and admission leaves it out with a
warning. A tiny HTTP server on 127.0.0.1 records what reaches the URL a control file
names. No SparkSession and no broker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
import tomli_w
from typer.testing import CliRunner

from admission.load import DriverHeaps
from pipeline.cli import app
from pipeline.errors import ConfigError
from pipeline.http.client import CONTROL_TOKEN_ENV
from pipeline.http.control_file import IDENTITY_PATH, new_identity_key, prove
from pipeline.spark.control import ControlServer
from tests.integration.helpers import flights_raw_config, idle_query_group

pytestmark = pytest.mark.no_kafka

runner = CliRunner()

TOKEN = "the-groups-control-token"


class Recorder(ThreadingHTTPServer):
    """An HTTP server on a loopback port that answers every call 200 with ``{}`` (a
    heap gauge on ``/metrics``, the proof of ``identity_key`` on ``/identity``) and
    records ``(method, path, Authorization header)``."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        self.identity_key = new_identity_key()
        super().__init__(("127.0.0.1", 0), _Recording)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Recording(BaseHTTPRequestHandler):
    server: Recorder

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        body = b"{}"
        if self.path.startswith(f"{IDENTITY_PATH}?challenge="):
            challenge = self.path.split("=", 1)[1]
            body = json.dumps({"proof": prove(self.server.identity_key, challenge)}).encode()
        if self.path == "/metrics":
            body = (
                b'floodgate_query_group_jvm_heap_used_bytes{query_group="g"} 9.0\n'
                b'floodgate_query_group_jvm_heap_max_bytes{query_group="g"} 10.0\n'
            )
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """A :class:`Recorder` serving in a thread until the block ends."""
    server = Recorder()
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with recording() as server:
        yield server


@pytest.fixture
def control_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 0700 control folder of ours, and no token in the environment."""
    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    return folder


def _write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _nobody() -> int:
    # Making a file of another user takes root: the project's machines and CI run as
    # root; elsewhere this fails, naming why, rather than skip.
    assert os.geteuid() == 0, "a file of another user needs root to make (chown)"
    return pwd.getpwnam("nobody").pw_uid


# -- planting a control file: each way it must not be trusted ---------------------


def _planted_by_another_user(path: Path, text: str) -> str:
    _write(path, text)
    os.chown(path, _nobody(), -1)
    return f"owner uid {_nobody()}"


def _writable_by_others(path: Path, text: str) -> str:
    _write(path, text, 0o666)
    return "mode 0666"


def _symlink_to_our_file(path: Path, text: str) -> str:
    path.symlink_to(_write(path.parent.parent / "elsewhere.json", text))
    return "a symbolic link"


PLANTS: dict[str, Callable[[Path, str], str]] = {
    "another-user-s": _planted_by_another_user,
    "writable-by-others": _writable_by_others,
    "symlink": _symlink_to_our_file,
}


def _control(url: str, *, identity_key: str | None = None, pid: int | None = None) -> str:
    """A control file naming ``url``, as the driver writes it: by default, this process
    (which serves the recorder) with no identity key the recorder can prove."""
    pid = os.getpid() if pid is None else pid
    try:
        started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        started = psutil.Process().create_time()
    return json.dumps(
        {
            "query_group": "g",
            "url": url,
            "pid": pid,
            "started": started,
            "identity_key": identity_key or new_identity_key(),
        }
    )


def _ours(recorder: Recorder) -> str:
    """The control file of the recorder as the driver that wrote it (it proves its key)."""
    return _control(recorder.url, identity_key=recorder.identity_key)


def test_query_group_stop_sends_the_token_to_the_url_of_a_control_file_of_ours(
    control_dir: Path, recorder: Recorder
) -> None:
    """The recorder sees what a trusted control file gets: the check below can fail."""
    _write(control_dir / "g.json", _ours(recorder))
    _write(control_dir / "g.token", TOKEN)

    done = runner.invoke(app, ["query-group", "stop", "g", "--control-dir", str(control_dir)])

    assert done.exit_code == 0, done.output
    assert [(m, p.split("?")[0], a) for m, p, a in recorder.seen] == [
        ("GET", IDENTITY_PATH, None),
        ("POST", "/stop", f"Bearer {TOKEN}"),
    ]


@pytest.mark.parametrize("plant", PLANTS.values(), ids=PLANTS.keys())
def test_query_group_stop_sends_nothing_to_the_url_of_an_untrusted_control_file(
    control_dir: Path, recorder: Recorder, plant: Callable[[Path, str], str]
) -> None:
    control_file = control_dir / "g.json"
    shown = plant(control_file, _ours(recorder))
    _write(control_dir / "g.token", TOKEN)

    refused = runner.invoke(app, ["query-group", "stop", "g", "--control-dir", str(control_dir)])

    assert refused.exit_code != 0
    message = " ".join(refused.output.split())
    assert str(control_file) in message and shown in message, refused.output
    assert "nothing was sent" in message
    assert recorder.seen == []


def test_query_group_stop_refuses_a_token_file_others_can_write(
    control_dir: Path, recorder: Recorder
) -> None:
    _write(control_dir / "g.json", _ours(recorder))
    _write(control_dir / "g.token", TOKEN, 0o666)

    refused = runner.invoke(app, ["query-group", "stop", "g", "--control-dir", str(control_dir)])

    assert refused.exit_code != 0
    assert "g.token" in refused.output and "mode 0666" in refused.output
    assert recorder.seen == []


@pytest.mark.parametrize("plant", PLANTS.values(), ids=PLANTS.keys())
def test_admission_reads_no_driver_heap_from_an_untrusted_control_file(
    control_dir: Path,
    recorder: Recorder,
    plant: Callable[[Path, str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    with recording() as ours:
        _write(control_dir / "ours.json", _ours(ours))
        shown = plant(control_dir / "planted.json", _ours(recorder))
        heaps = DriverHeaps(control_dir=control_dir)

        with caplog.at_level(logging.WARNING, logger="admission.load"):
            assert heaps.refresh() == {"g": 0.9}
            heaps.refresh()

    assert [path.split("?")[0] for _, path, _ in ours.seen] == [IDENTITY_PATH, "/metrics"] * 2
    assert recorder.seen == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once, not every second
    assert str(control_dir / "planted.json") in warnings[0] and shown in warnings[0]


# -- a control file whose endpoint is not the driver that wrote it -----------------
#
# A driver killed with SIGKILL leaves its control file behind;
# whoever binds the port it names next got the control token from `floodgate
# query-group stop`, and admission read heaps from it. Here the recorder plays the
# one who bound the port: it cannot read the file's identity key.


@pytest.fixture
def sleeper() -> Iterator[psutil.Popen]:
    """A live process of ours that listens on no port."""
    process = psutil.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def _killed_driver(recorder: Recorder, _sleeper: psutil.Popen) -> tuple[str, str]:
    process = psutil.Popen(["sleep", "300"])
    process.send_signal(signal.SIGKILL)
    process.wait()
    return _control(recorder.url, pid=process.pid), f"pid {process.pid} is not running"


def _another_process(recorder: Recorder, sleeper: psutil.Popen) -> tuple[str, str]:
    return (
        _control(recorder.url, pid=sleeper.pid),
        f"pid {sleeper.pid} does not listen on port {recorder.server_address[1]}",
    )


def _no_proof(recorder: Recorder, _sleeper: psutil.Popen) -> tuple[str, str]:
    # This process listens on the port (it serves the recorder), but the recorder does
    # not hold the file's identity key.
    return _control(recorder.url), "did not prove it holds the file's identity key"


IMPOSTORS: dict[str, Callable[[Recorder, psutil.Popen], tuple[str, str]]] = {
    "killed-driver": _killed_driver,
    "another-process": _another_process,
    "no-proof": _no_proof,
}


@pytest.mark.parametrize("impostor", IMPOSTORS.values(), ids=IMPOSTORS.keys())
def test_query_group_stop_sends_no_token_to_a_port_the_driver_does_not_hold(
    control_dir: Path,
    recorder: Recorder,
    sleeper: psutil.Popen,
    impostor: Callable[[Recorder, psutil.Popen], tuple[str, str]],
) -> None:
    text, why = impostor(recorder, sleeper)
    _write(control_dir / "g.json", text)
    _write(control_dir / "g.token", TOKEN)
    pid = json.loads(text)["pid"]

    refused = runner.invoke(app, ["query-group", "stop", "g", "--control-dir", str(control_dir)])

    message = " ".join(refused.output.split())
    assert refused.exit_code != 0, refused.output
    assert f"control file {control_dir / 'g.json'} names pid {pid} at port" in message
    assert why in message and "nothing was sent" in message, refused.output
    # At most the identity challenge, never the token.
    assert all(a is None and p.startswith(IDENTITY_PATH) for _, p, a in recorder.seen)


@pytest.mark.parametrize("impostor", IMPOSTORS.values(), ids=IMPOSTORS.keys())
def test_admission_reads_no_driver_heap_from_a_port_the_driver_does_not_hold(
    control_dir: Path,
    recorder: Recorder,
    sleeper: psutil.Popen,
    impostor: Callable[[Recorder, psutil.Popen], tuple[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    text, why = impostor(recorder, sleeper)
    _write(control_dir / "stale.json", text)
    heaps = DriverHeaps(control_dir=control_dir)

    with caplog.at_level(logging.WARNING, logger="admission.load"):
        assert heaps.refresh() == {}
        heaps.refresh()

    assert [p for _, p, _ in recorder.seen if not p.startswith(IDENTITY_PATH)] == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(control_dir / "stale.json") in warnings[0] and why in warnings[0]


# -- the control folder --------------------------------------------------------------


@pytest.fixture
def loose_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "shared-run"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def test_a_control_folder_others_can_write_is_refused_when_the_group_serves(
    run_id: str, tmp_path: Path, loose_dir: Path
) -> None:
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"]["control_dir"] = str(loose_dir)
    group = idle_query_group(raw)

    with pytest.raises(ConfigError) as refused:
        ControlServer(group, host="127.0.0.1", port=0, control_dir=str(loose_dir))

    assert refused.value.key == "query_group.control_dir"
    assert f"{loose_dir} is writable by others" in str(refused.value)
    assert "mode 0777" in str(refused.value)
    assert list(loose_dir.iterdir()) == []


def test_a_control_folder_under_a_parent_others_can_write_is_refused_naming_the_parent(
    run_id: str, tmp_path: Path, loose_dir: Path
) -> None:
    """Only the control folder was once checked, not the folders above."""
    folder = loose_dir / "run"
    folder.mkdir(mode=0o700)
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"]["control_dir"] = str(folder)
    group = idle_query_group(raw)

    with pytest.raises(ConfigError) as refused:
        ControlServer(group, host="127.0.0.1", port=0, control_dir=str(folder))

    assert refused.value.key == "query_group.control_dir"
    assert f"its parent folder {loose_dir} is writable by others" in str(refused.value)
    assert "mode 0777" in str(refused.value)
    assert list(folder.iterdir()) == []


def test_floodgate_run_refuses_a_control_folder_of_another_user_before_spark_starts(
    run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "their-run"
    folder.mkdir(mode=0o700)
    os.chown(folder, _nobody(), -1)
    raw = flights_raw_config(run_id, tmp_path / "checkpoints", only_passthrough=True)
    raw["query_group"]["control_dir"] = str(folder)
    config = _write(tmp_path / "group.toml", tomli_w.dumps(raw))
    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)

    refused = runner.invoke(app, ["run", str(config), "--bootstrap", "127.0.0.1:9"])

    message = " ".join(refused.output.split())
    assert refused.exit_code != 0
    assert "query_group.control_dir" in message and str(folder) in message, refused.output
    assert f"owner uid {_nobody()}, mode 0700" in message
    assert not (tmp_path / "checkpoints").exists()  # nothing started
    assert list(folder.iterdir()) == []
