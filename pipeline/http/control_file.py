"""A query group's control file, ``<control_dir>/<name>.json``, and the proof that the
endpoint it names is the driver that wrote it.

The driver (:class:`pipeline.spark.control.ControlServer`) writes the file once its
endpoint answers: the group's name, the endpoint's URL, its process id and that
process's start time, and an *identity key* -- 32 random bytes made at each start, in
a file only its user can read (0600). The clients (``floodgate query-group
status|release|stop`` through :mod:`pipeline.http.client`, admission's
driver-heap reader) read it with :func:`read_control_file` (a regular file of their
own user, not writable by others, reached without a symbolic link) and, before they
send anything to that URL, :func:`verify_endpoint`:

1. the process is alive, runs as our user, and started when the file says (not a
   process that took the id of a killed driver);
2. it listens on the URL's port (``psutil``; skipped when the kernel hides its sockets,
   as it does for a non-dumpable driver from an unprivileged user: step 3 decides);
3. the endpoint proves it holds the identity key: the client sends a random challenge
   (``GET /identity?challenge=<hex>``) and expects the HMAC-SHA256 of it under the
   key (:func:`prove`). Whoever bound the port a killed driver left (another user on
   the host) cannot read the key, so cannot answer.

A control file that fails is refused with :class:`~pipeline.errors.UntrustedEndpointError`,
naming the file, the process id and the port; nothing else is sent to the URL (the
challenge carries no secret).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil

from pipeline.errors import UntrustedEndpointError
from pipeline.state.files import read_trusted, write_private_text

#: The path of the endpoint's identity proof (``?challenge=<hex>``).
IDENTITY_PATH = "/identity"
#: What an identity proof's HMAC covers before the challenge (so the key proves
#: nothing else).
PROOF_CONTEXT = b"floodgate control endpoint identity\n"
#: Bytes of a client's random challenge.
CHALLENGE_BYTES = 32
#: How far a process's start time may be from the one recorded, seconds (psutil
#: derives it from clock ticks since boot: 10 ms on Linux).
START_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True)
class ControlFile:
    """What a control file says.

    Attributes:
        path: the file.
        query_group: the group's name.
        url: its endpoint, ``http://host:port``.
        pid: the driver's process id.
        started: that process's start time, epoch seconds (psutil's ``create_time``);
            ``None`` in a file written before it was recorded.
        identity_key: the key the endpoint proves itself with, hex; ``None`` in a file
            written before it was recorded (such a file is refused).
    """

    path: Path
    query_group: str
    url: str
    pid: int
    started: float | None
    identity_key: str | None

    @property
    def port(self) -> int | None:
        """The URL's port (``None`` if it names none)."""
        try:
            return urlsplit(self.url).port
        except ValueError:
            return None


def new_identity_key() -> str:
    """A fresh identity key: 32 random bytes (256 bits), hex."""
    return secrets.token_hex(32)


def prove(identity_key: str, challenge: str) -> str:
    """The answer to ``challenge``: hex HMAC-SHA256 under ``identity_key`` of
    :data:`PROOF_CONTEXT` and the challenge."""
    message = PROOF_CONTEXT + challenge.encode("utf-8")
    return hmac.new(identity_key.encode("ascii"), message, sha256).hexdigest()


def write_control_file(path: Path, *, query_group: str, url: str, identity_key: str) -> None:
    """Write (replace atomically, 0600, never through a symbolic link) the control file
    of this process's endpoint at ``url``.

    Raises:
        OSError: it cannot be written.
    """
    pid = os.getpid()
    document = {
        "query_group": query_group,
        "url": url,
        "pid": pid,
        "started": psutil.Process(pid).create_time(),
        "identity_key": identity_key,
    }
    write_private_text(path, json.dumps(document))


def read_control_file(path: Path) -> ControlFile:
    """Read a control file of our own user (:func:`~pipeline.state.files.read_trusted`).

    Raises:
        UntrustedFileError: another user's, writable by others, a symbolic link (names
            the path, its owner and mode).
        FileNotFoundError / OSError: it is missing or unreadable.
        ValueError: it is not a control file (not JSON, no ``url`` or ``pid``).
    """
    document = json.loads(read_trusted(path))
    try:
        started = document.get("started")
        key = document.get("identity_key")
        return ControlFile(
            path=Path(path),
            query_group=str(document.get("query_group", "")),
            url=str(document["url"]).rstrip("/"),
            pid=int(document["pid"]),
            started=None if started is None else float(started),
            identity_key=None if key is None else str(key),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a control file: {exc!r}") from exc


def _refuse(control: ControlFile, reason: str) -> UntrustedEndpointError:
    return UntrustedEndpointError(
        f"control file {control.path} names pid {control.pid} at port {control.port} "
        f"({control.url}), but {reason}: not the driver that wrote it",
        path=str(control.path),
        pid=control.pid,
        port=control.port,
        reason=reason,
    )


def _check_process(control: ControlFile) -> None:
    """Steps 1 and 2 of the module's checks."""
    try:
        process = psutil.Process(control.pid)
        uids = process.uids()
        started = process.create_time()
    except psutil.NoSuchProcess:
        raise _refuse(
            control, f"pid {control.pid} is not running (a killed driver's file)"
        ) from None
    except psutil.Error as exc:
        raise _refuse(control, f"pid {control.pid} cannot be examined ({exc})") from exc
    if uids.effective != os.geteuid():
        raise _refuse(
            control, f"pid {control.pid} runs as uid {uids.effective}, not ours ({os.geteuid()})"
        )
    if control.started is not None and abs(started - control.started) > START_TIME_TOLERANCE_S:
        raise _refuse(
            control,
            f"pid {control.pid} started at {started:.2f}, not {control.started:.2f} "
            "(another process took the id of the one that wrote it)",
        )
    try:
        listening = {
            c.laddr.port
            for c in process.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr
        }
    except psutil.AccessDenied:
        return  # a non-dumpable driver hides its sockets: the proof decides
    except psutil.Error as exc:
        raise _refuse(control, f"pid {control.pid} cannot be examined ({exc})") from exc
    if control.port not in listening:
        raise _refuse(control, f"pid {control.pid} does not listen on port {control.port}")


def verify_endpoint(control: ControlFile, client: httpx.Client) -> None:
    """Check that the endpoint ``control`` names is the process that wrote it (the
    module's steps 1-3), before anything else is sent there.

    Args:
        control: the control file.
        client: the HTTP client the caller then uses (its timeout applies).

    Raises:
        UntrustedEndpointError: a check failed (names the file, the pid, the port and
            why); only the challenge was sent, if anything.
    """
    if control.identity_key is None:
        raise _refuse(
            control, "it holds no identity key (written by an older driver: restart the group)"
        )
    if control.port is None:
        raise _refuse(control, "its URL names no port")
    _check_process(control)
    challenge = secrets.token_hex(CHALLENGE_BYTES)
    try:
        response = client.get(
            f"{control.url}{IDENTITY_PATH}", params={"challenge": challenge}, follow_redirects=False
        )
        answer = response.json().get("proof") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise _refuse(control, f"its identity could not be asked ({exc})") from exc
    expected = prove(control.identity_key, challenge)
    if not isinstance(answer, str) or not hmac.compare_digest(answer.encode(), expected.encode()):
        raise _refuse(
            control,
            f"the endpoint did not prove it holds the file's identity key "
            f"(GET {IDENTITY_PATH}: HTTP {response.status_code})",
        )
