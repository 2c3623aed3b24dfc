"""``pyelmo serve`` as a real process on 127.0.0.1: misbehaving clients leave the others served, SIGTERM
drains the requests in flight and exits 0, and the page works in a headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _start(cache: Path, *extra: str) -> tuple[subprocess.Popen, str, Path]:
    from pyelmo.serve.process import ServerStartError, start_server

    log = cache / f"server-{len(list(cache.glob('server-*.log')))}.log"
    with log.open("wb") as out:
        try:
            proc, url = start_server(extra, timeout=180, env=dict(os.environ, PYELMO_SERVE_CACHE=str(cache)),
                                     stdout=out, stderr=subprocess.STDOUT)
        except ServerStartError as exc:
            raise AssertionError(f"{exc}: {log.read_text()}") from None
    return proc, url, log


def _stop(proc: subprocess.Popen) -> int:
    from pyelmo.serve.process import stop_server

    return stop_server(proc)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("serve-process")


@pytest.fixture(scope="module")
def server(cache):
    proc, url, log = _start(cache)
    yield url
    assert _stop(proc) == 0, log.read_text()


def _post(url: str, path: str, body: dict | bytes, timeout: float = 30) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _partial_request(url: str, body: bytes, sent: int) -> socket.socket:
    """A connection that has sent the headers and the first ``sent`` bytes of ``body``."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    head = (f"POST /v1/embed HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    sock.sendall(head + body[:sent])
    return sock


def _read_response(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


def test_slow_vanishing_and_malformed_clients_leave_the_others_served(server):
    body = json.dumps({"sentences": ["The bank of the river was muddy ."] * 8}).encode()
    slow = _partial_request(server, body, 20)  # a slow client: half a request so far
    for _ in range(3):  # clients that send a request and leave at once
        gone = _partial_request(server, json.dumps({"sentences": ["word " * 90] * 64}).encode(), 10**9)
        gone.close()
    assert _post(server, "/v1/embed", b"{this is not json")[0] == 400
    assert _post(server, "/v1/embed", b"\xff\xfe garbage")[0] == 400
    start = time.monotonic()
    for _ in range(5):
        status, answer = _post(server, "/v1/similarity", {"sentences": ["a bank", "the bank"], "word": "bank"})
        assert status == 200 and len(answer["pairs"]) == 1
    assert time.monotonic() - start < 60
    slow.sendall(body[20:])  # the slow client finishes and is answered too
    status, answer = _read_response(slow)
    assert status == 200 and len(answer["sentences"]) == 8


def test_sigterm_drains_the_requests_in_flight_and_exits_0(cache):
    proc, url, log = _start(cache)
    try:
        body = json.dumps({"sentences": ["I deposited money in the bank ."], "encoding": "base64"}).encode()
        in_flight = _partial_request(url, body, 10)
        time.sleep(0.5)  # the server has the request's headers
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert proc.poll() is None, "the server exited with a request in flight"
        in_flight.sendall(body[10:])
        status, answer = _read_response(in_flight)
        assert status == 200 and answer["sentences"][0]["shape"] == [3, 7, 256]
        assert proc.wait(timeout=60) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        _stop(proc)


def test_the_page_shows_the_bank_similarities(server, tmp_path):
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    from pyelmo.evaluation.demo import SEED_PAIRS, similarity_rows
    from pyelmo.embedding.embedder import ElmoEmbedder

    word, sentences = SEED_PAIRS[0]
    expected = similarity_rows(ElmoEmbedder(), word, sentences)[0].by_layer
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(server + "/")
            page.wait_for_selector(".token")
            page.fill("#sentences", "\n".join(sentences))
            page.click("#analyse")
            page.wait_for_function("document.querySelectorAll('#tokens .sentence').length === 2")
            page.click('.token[data-sentence="0"]:text-is("bank")')
            page.wait_for_selector("#heatmap td.cell")
            page.wait_for_selector(".prediction-list li")
            page.wait_for_selector("#neighbours li")
            page.wait_for_selector("#projection circle")
            cells = page.eval_on_selector_all("#heatmap td.cell", "els => els.map(e => [e.dataset.layer, e.textContent])")
            page.screenshot(path=str(tmp_path / "serve.png"), full_page=True)
            # the keyboard alone: focus the other sentence's "bank" and press Enter
            page.focus('.token[data-sentence="1"]:text-is("bank")')
            page.keyboard.press("Enter")
            page.wait_for_function("document.getElementById('word-title').textContent.includes('sentence 2')")
            page.wait_for_function("document.getElementById('status').textContent.startsWith('Showing')")
            keyboard_cells = page.eval_on_selector_all("#heatmap td.cell", "els => els.map(e => e.textContent)")
            # a narrow (phone) screen: nothing wider than the viewport
            page.set_viewport_size({"width": 390, "height": 844})
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            page.screenshot(path=str(tmp_path / "serve-narrow.png"), full_page=True)
        finally:
            browser.close()
    shown = dict(cells)
    assert set(shown) == set(expected), shown
    for name, value in expected.items():
        assert abs(float(shown[name]) - value) <= 0.0005 + 1e-6, (name, shown[name], value)
    assert shown["layer 0"] == "1.000" and float(shown["layer 2"]) < 0.99  # context moves the top layer
    assert keyboard_cells == [c for _, c in cells]  # the same pair, seen from the other sentence
    assert overflow <= 0, overflow
    assert not errors, errors
    assert (tmp_path / "serve.png").stat().st_size > 10_000
