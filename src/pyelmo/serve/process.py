"""``pyelmo serve`` in a child process on 127.0.0.1: start it, wait until it answers, stop it.

For scripts, benchmarks and tests that drive a real server (``benchmarks/serve_load.py``,
``tests/test_serve_process.py``).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import IO, Sequence

from pyelmo.errors import PyelmoError


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
