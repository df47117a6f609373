"""Serving a FastAPI app (metrics, control, a service's API) with uvicorn in a daemon
thread: the query group's endpoint, the admission and sweeper services.

The socket is bound first, so the URL (port 0 picks a free one) is known before
anything announces it; :meth:`AppServer.start` returns once the server answers.

A service's ``serve`` command (``floodgate admission serve``, ``floodgate sweeper
serve``) shares its frame: :func:`log_service` at start, :func:`listen` to bind its
API, then :func:`serve_until_signal` in the foreground.
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from pipeline.errors import FloodgateError


class AppServer:
    """One ASGI app on ``host:port``.

    Args:
        app: the ASGI app (FastAPI).
        host: interface to bind.
        port: port to bind; 0 picks a free one.
        name: for the thread and errors.

    Raises:
        OSError: the port cannot be bound (from the constructor).
    """

    def __init__(self, app: Any, *, host: str, port: int, name: str) -> None:
        import uvicorn

        self.name = name
        self.host = host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self.port = int(sock.getsockname()[1])
        self._socket = sock
        # log_config=None: uvicorn's own lines go through the root logger, in the
        # service's format (pipeline.services.logs), not in a format of uvicorn's.
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, log_level="warning", log_config=None, access_log=False, lifespan="off"
            )
        )
        self._thread: threading.Thread | None = None

    @property
    def bound(self) -> str:
        """``address:port`` the socket is bound to, as the kernel reports it
        (``0.0.0.0:8787`` is every interface): what to log, unlike :attr:`url`."""
        address, port = self._socket.getsockname()[:2]
        return f"{address}:{port}"

    @property
    def url(self) -> str:
        """``http://host:port`` (loopback when bound to all interfaces)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        """Serve in a daemon thread; return once the server has started.

        Raises:
            FloodgateError: it did not start within ``timeout_s``.
        """
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name=f"floodgate-{self.name}-http",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise FloodgateError(f"{self.name}: the HTTP endpoint on {self.url} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._socket.close()


def wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (the foreground of a ``serve`` command)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop.wait()


def log_service(verbose: bool, log_format: str = "text") -> None:
    """Log a service's lines on standard error with their time, level and logger, as
    ``text`` or ``json`` (:func:`pipeline.services.logs.configure_logging`), at INFO when
    ``verbose``, else WARNING; a no-op once logging is set up.

    Raises:
        ValueError: ``log_format`` is neither ``text`` nor ``json``.
    """
    from pipeline.services.logs import configure_logging

    configure_logging(verbose, log_format)


def listen(app: Any, *, host: str, port: int, name: str, what: str = "") -> AppServer:
    """An :class:`AppServer` of ``app`` bound to ``host:port`` (0: a free port), not
    serving yet.

    Args:
        what: who listens, leading the error (``"the API"``); empty: nothing.

    Raises:
        FloodgateError: the port cannot be bound: ``[<what> ]could not listen on
            <host>:<port>: <the OSError>``.
    """
    try:
        return AppServer(app, host=host, port=port, name=name)
    except OSError as exc:
        who = f"{what} " if what else ""
        raise FloodgateError(f"{who}could not listen on {host}:{port}: {exc}") from exc


def serve_until_signal(
    server: AppServer, *, announce: Iterable[str] = (), stop: Callable[[], None] | None = None
) -> None:
    """The foreground of a ``serve`` command: start ``server``, print each line of
    ``announce`` on standard output (flushed: a supervisor or a test reads them), block
    until SIGTERM or SIGINT, then stop the server and call ``stop`` (the service's own).
    The server and ``stop`` are stopped however this ends.

    Raises:
        FloodgateError: the server did not start (:meth:`AppServer.start`).
    """
    try:
        server.start()
        for line in announce:
            print(line, flush=True)
        wait_for_signal()
    finally:
        server.stop()
        if stop is not None:
            stop()
