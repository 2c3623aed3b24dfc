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


#: The README's picture of the page: rewritten by the browser test from what the page shows on load.
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "serve.png"


def _bank_separation(embedder) -> dict[str, dict[str, float]]:
    """Same- and different-sense mean similarity of "bank" over the sample corpus, computed here."""
    from pyelmo.evaluation.demo import sense_separation
    from pyelmo.evaluation.senses import read_sense_examples
    from pyelmo.serve.neighbours import sample_corpus_path

    contexts: dict[str, list[str]] = {}
    for example in read_sense_examples(sample_corpus_path()):
        if example.word == "bank":
            contexts.setdefault(example.sense, []).append(" ".join(example.tokens))
    found = sense_separation(embedder, "bank", contexts)
    return {"same": found.within, "different": found.across}


def test_the_page_opens_on_the_bank_comparison(server, tmp_path):
    """On load, with no click: "bank" of sentence 1 chosen, its similarity to sentence 2's per layer and
    the sense bars shown (the screenshot of docs/serve.png); each example button chooses its word."""
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.demo import SEED_PAIRS, similarity_rows
    from pyelmo.fileio import write_bytes_atomic

    word, sentences = SEED_PAIRS[0]
    embedder = ElmoEmbedder()
    expected = similarity_rows(embedder, word, sentences)[0].by_layer
    separation = _bank_separation(embedder)
    done = "() => document.getElementById('status').textContent === 'Showing \"{}\".'"
    errors: list[str] = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(server + "/")
            page.wait_for_function(done.format("bank"), timeout=60_000)
            for selector in ("#heatmap td.cell", "#senses rect.bar", ".prediction-list li", "#neighbours li",
                             "#projection circle", "#senses-query td"):
                page.wait_for_selector(selector)
            chosen = page.eval_on_selector_all(".token.chosen", "els => els.map(e => [e.dataset.sentence, e.textContent])")
            cells = page.eval_on_selector_all("#heatmap td.cell", "els => els.map(e => [e.dataset.layer, e.textContent])")
            bars = page.eval_on_selector_all("#senses rect.bar",
                                             "els => els.map(e => [e.dataset.kind, e.dataset.layer, +e.dataset.value])")
            in_view = page.evaluate("document.getElementById('heatmap').getBoundingClientRect().top < innerHeight")
            status = page.text_content("#status")
            screenshot = page.screenshot(full_page=True)
            # each example button loads its sentences and chooses its word in sentence 1
            examples = {}
            for name in ("apple", "play", "bank"):
                page.click(f'.example[data-example="{name}"]')
                page.wait_for_function(done.format(name), timeout=60_000)
                examples[name] = page.evaluate("""() => [document.querySelectorAll('#tokens .sentence').length,
                    [...document.querySelectorAll('.token.chosen')].map(e => [e.dataset.sentence, e.textContent]),
                    document.querySelectorAll('#heatmap td.cell').length,
                    document.getElementById('senses-word').textContent]""")
            # the keyboard alone: focus the other sentence's "bank" and press Enter
            page.focus('.token[data-sentence="1"]:text-is("bank")')
            page.keyboard.press("Enter")
            page.wait_for_function("document.getElementById('word-title').textContent.includes('sentence 2')")
            page.wait_for_function(done.format("bank"))
            keyboard_cells = page.eval_on_selector_all("#heatmap td.cell", "els => els.map(e => e.textContent)")
            # a narrow (phone) screen: nothing wider than the viewport
            page.set_viewport_size({"width": 390, "height": 844})
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            page.screenshot(path=str(tmp_path / "serve-narrow.png"), full_page=True)
        finally:
            browser.close()
    (tmp_path / "serve.png").write_bytes(screenshot)
    write_bytes_atomic(SCREENSHOT, screenshot)
    assert chosen == [["0", "bank"]], chosen
    assert status == 'Showing "bank".' and in_view  # the comparison, not "Tokenizing...", in the first screen
    shown = dict(cells)
    assert set(shown) == set(expected), shown
    for name, value in expected.items():
        assert abs(float(shown[name]) - value) <= 0.0005 + 1e-6, (name, shown[name], value)
    assert shown["layer 0"] == "1.000" and float(shown["layer 2"]) < 0.99  # context moves the top layer
    assert {(kind, layer) for kind, layer, _ in bars} == {(k, n) for k in separation for n in expected}
    for kind, layer, value in bars:
        assert value == pytest.approx(separation[kind][layer], abs=1e-4), (kind, layer)
    assert separation["same"]["layer 2"] > separation["different"]["layer 2"]  # the senses, seen at once
    assert examples == {"apple": [2, [["0", "apple"]], 4, '"apple"'], "play": [3, [["0", "play"]], 8, '"play"'],
                        "bank": [2, [["0", "bank"]], 4, '"bank"']}, examples
    assert keyboard_cells == [c for _, c in cells]  # the same pair, seen from the other sentence
    assert overflow <= 0, overflow
    assert not errors, errors
    assert len(screenshot) > 10_000
