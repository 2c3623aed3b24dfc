"""The server process of ``pyelmo serve``: run it here (``run_server``), or in a child process.

``run_server`` serves the app under uvicorn until SIGTERM or Ctrl-C, then finishes the
requests in flight and returns. ``start_server`` / ``stop_server`` run ``pyelmo serve`` in a
child process on 127.0.0.1, for scripts, benchmarks and tests that drive a real server
(``benchmarks/serve_load.py``, ``tests/serve/test_serve_process.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import IO, Sequence

from pyelmo.errors import InputError, PyelmoError


def check_serve_extra() -> None:
    """``InputError`` naming the ``serve`` extra when FastAPI or uvicorn is missing."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise InputError(f"pyelmo serve needs the serve extra: pip install 'pyelmo[serve]' ({exc})") from None


def check_address(host: str, port: int) -> None:
    """``InputError`` unless this process can listen on ``host:port`` now (checked before the model loads)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def run_server(settings: dict, *, host: str, port: int, workers: int = 1, log_level: str = "info",
               banner: str = "") -> None:
    """Serve ``app_from_settings(settings)`` until SIGTERM/SIGINT, then drain and return.

    ``workers > 1`` runs that many uvicorn worker processes, each building its own app from
    ``$PYELMO_SERVE_SETTINGS``. ``banner`` goes to stderr once the app is built (with workers:
    before they start), so a model that cannot be loaded fails first.
    """
    import uvicorn

    from pyelmo.serve.app import SETTINGS_VARIABLE, app_from_settings

    config = dict(host=host, port=port, log_level=log_level, timeout_graceful_shutdown=30)
    if workers > 1:
        os.environ[SETTINGS_VARIABLE] = json.dumps(settings)
        _announce(banner)
        uvicorn.run("pyelmo.serve.app:app_from_environment", factory=True, workers=workers, **config)
        return
    app = app_from_settings(settings)
    _announce(banner)
    _server_class(uvicorn)(uvicorn.Config(app, **config)).run()


def _announce(banner: str) -> None:
    if banner:
        print(banner, file=sys.stderr, flush=True)


def _server_class(uvicorn):
    """uvicorn's server, except that a SIGTERM/SIGINT after which it shut down gracefully gives exit 0
    (uvicorn re-raises the signal once it has shut down, so the process would die of it)."""

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                try:
                    yield
                finally:
                    getattr(self, "_captured_signals", []).clear()

    return Server


class ServerStartError(PyelmoError):
    """The server process exited, or did not answer ``/health`` in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: Sequence[str] = (), *, timeout: float = 300, env: dict | None = None,
                 stdout: int | IO | None = subprocess.DEVNULL,
                 stderr: int | IO | None = subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """Run ``python -m pyelmo serve --port P ARGS...`` and return ``(process, base URL)`` once
    ``GET /health`` answers 200; ``ServerStartError`` if it exits or ``timeout`` seconds pass."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pyelmo", "serve", "--port", str(port), "--log-level", "warning",
                             *args], stdout=stdout, stderr=stderr, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = proc.stderr.read().decode(errors="replace") if stderr == subprocess.PIPE else ""
            raise ServerStartError(f"the server exited with {proc.returncode}{': ' + said if said else ''}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    proc.wait()
    raise ServerStartError(f"the server did not answer {url}/health within {timeout:g} s")


def stop_server(proc: subprocess.Popen, timeout: float = 60) -> int:
    """SIGTERM (the server drains the requests in flight), then kill after ``timeout`` s; the exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
