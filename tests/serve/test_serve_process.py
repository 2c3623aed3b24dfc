"""``pyelmo serve`` as a real process on 127.0.0.1: misbehaving clients leave the others served, SIGTERM
drains the requests in flight and exits 0, and the page works in a headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
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
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "serve.png"


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


@contextmanager
def _browser_page(url: str, errors: list[str]):
    """The page at ``url`` in a headless Chromium (1280 x 900); its script and console errors go to ``errors``."""
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(url + "/")
            yield page
        finally:
            browser.close()


def _narrow_overflow(page, path: Path) -> int:
    """How far the page is wider than a phone's screen (390 px), with its screenshot at ``path``."""
    page.set_viewport_size({"width": 390, "height": 844})
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    page.screenshot(path=str(path), full_page=True)
    return overflow


def test_the_page_opens_on_the_bank_comparison(server, tmp_path):
    """On load, with no click: "bank" of sentence 1 chosen, its similarity to sentence 2's per layer and
    the sense bars shown (the screenshot of docs/serve.png); each example button chooses its word."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.demo import SEED_PAIRS, similarity_rows
    from pyelmo.fileio import write_bytes_atomic

    word, sentences = SEED_PAIRS[0]
    embedder = ElmoEmbedder()
    expected = similarity_rows(embedder, word, sentences)[0].by_layer
    separation = _bank_separation(embedder)
    done = "() => document.getElementById('status').textContent === 'Showing \"{}\".'"
    errors: list[str] = []
    with _browser_page(server, errors) as page:
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
        texts = page.evaluate("""() => [document.documentElement.lang, document.title,
            ...['#input-title', '#tokens-title', 'h3', 'footer'].map(s => document.querySelector(s).textContent)]""")
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
        overflow = _narrow_overflow(page, tmp_path / "serve-narrow.png")  # a phone: nothing wider than it
    (tmp_path / "serve.png").write_bytes(screenshot)
    write_bytes_atomic(SCREENSHOT, screenshot)
    assert chosen == [["0", "bank"]], chosen
    assert status == 'Showing "bank".' and in_view  # the comparison, not "Tokenizing...", in the first screen
    assert [" ".join(text.split()) for text in texts] == [  # the English page as it was
        "en", "pyelmo: contextual word vectors", "1. Sentences", "2. Click a word",
        'How the layers separate the senses of "bank"',
        "JSON API: /v1/embed, /v1/similarity, /v1/neighbours, /v1/predict; schema at /openapi.json."], texts
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


#: The Chinese page's picture (`pyelmo serve --lang zh`), rewritten by its browser test as docs/serve.png is.
SCREENSHOT_ZH = SCREENSHOT.with_name("serve-zh.png")

#: Every text the reader sees or hears, less the model's predicted words (which are in its vocabulary's language).
SEEN_TEXT = """() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll(".prediction-list .word, script").forEach((node) => node.remove());
  const attributes = [...document.querySelectorAll("[title], [aria-label]")]
    .map((node) => `${node.getAttribute("title") || ""} ${node.getAttribute("aria-label") || ""}`);
  return [document.title, body.textContent, ...attributes].join("\\n");
}"""


@pytest.fixture(scope="module")
def chinese_server(cache):
    """``pyelmo serve --lang zh`` on --lang zh's model, or on the model folder $PYELMO_TEST_ZH_MODEL."""
    model = os.environ.get("PYELMO_TEST_ZH_MODEL")
    proc, url, log = _start(cache, "--lang", "zh", *(["--model", model] if model else []))
    yield url
    assert _stop(proc) == 0, log.read_text()


def _shows(page, text: str) -> None:
    page.wait_for_function("(text) => document.getElementById('status').textContent === text", arg=text,
                           timeout=60_000)


def test_the_chinese_page_speaks_chinese_and_opens_on_its_first_example(chinese_server, tmp_path):
    """--lang zh: the page's texts are its Chinese table's, no English one is seen, and on load the first
    Chinese example (苹果) is compared as the English page compares "bank" (docs/serve-zh.png)."""
    from pyelmo.fileio import write_bytes_atomic

    models = json.loads(urllib.request.urlopen(chinese_server + "/v1/models", timeout=30).read())["models"][0]
    errors: list[str] = []
    with _browser_page(chinese_server, errors) as page:
        tables, examples = page.evaluate("() => [MESSAGES, EXAMPLES.zh]")
        zh, (first, second) = tables["zh"], examples[:2]
        _shows(page, zh["showing"].format(word=first["word"]))
        for selector in ("#heatmap td.cell", "#senses rect.bar", ".prediction-list li", "#neighbours li",
                         "#projection circle", "#senses-query td"):
            page.wait_for_selector(selector)
        lang = page.evaluate("document.documentElement.lang")
        fixed = page.eval_on_selector_all("[data-t]", "els => els.map(e => [e.dataset.t, e.textContent])")
        chosen = page.eval_on_selector_all(".token.chosen", "els => els.map(e => [e.dataset.sentence, e.textContent])")
        cells = page.eval_on_selector_all("#heatmap td.cell", "els => els.map(e => [e.dataset.layer, e.textContent])")
        heads = page.eval_on_selector_all("#heatmap th[scope=col]", "els => els.map(e => e.textContent)")
        bars = page.eval_on_selector_all("#senses rect.bar",
                                         "els => els.map(e => [e.dataset.kind, e.dataset.layer, +e.dataset.value])")
        seen = page.evaluate(SEEN_TEXT)
        screenshot = page.screenshot(full_page=True)
        page.click(f'.example[data-example="{second["word"]}"]')  # another example: its word, chosen
        _shows(page, zh["showing"].format(word=second["word"]))
        title = page.text_content("#word-title")
        clean = list(errors)  # Chromium logs the 422 below as an error
        page.fill("#sentences", "好，" * 60)  # over --max-tokens: the API's error, told in the page's words
        page.click("#analyse")
        page.wait_for_selector("#status.error")
        refused = page.text_content("#status")
        overflow = _narrow_overflow(page, tmp_path / "serve-zh-narrow.png")
    (tmp_path / "serve-zh.png").write_bytes(screenshot)
    write_bytes_atomic(SCREENSHOT_ZH, screenshot)
    assert set(zh) == set(tables["en"])  # one key set, every text in both languages
    assert lang == "zh-CN" and fixed and all(text == zh[key] for key, text in fixed), fixed
    # no English text is left: the Latin words seen are names (pyelmo, the API's paths, the model's id and
    # source) or ones the Chinese table itself uses (JSON, PCA, word2vec, Ctrl+Enter)
    for data in (models["source"], models["id"]):
        seen = seen.replace(data, "")
    allowed = {"pyelmo", "v1", "embed", "similarity", "neighbours", "predict", "openapi", "json"}
    allowed |= {w for text in zh.values() for w in re.findall(r"[A-Za-z]\w*", re.sub(r"\{\w+\}", "", text))}
    assert set(re.findall(r"[A-Za-z]\w*", seen)) <= allowed, set(re.findall(r"[A-Za-z]\w*", seen)) - allowed
    # the comparison on load: the first example's word in sentence 1, against sentence 2, as the API has it
    assert chosen == [["0", first["word"]]], chosen
    status, answer = _post(chinese_server, "/v1/similarity", {"sentences": first["sentences"], "word": first["word"]})
    assert status == 200
    expected = answer["pairs"][0]["by_layer"]
    assert {name: float(text) for name, text in cells} == pytest.approx(expected, abs=0.0005 + 1e-6)
    assert heads == [zh["sentenceColumn"]] + [f"第 {n} 层" for n in range(len(expected) - 1)] + [zh["average"]]
    status, answer = _post(chinese_server, "/v1/neighbours", {"sentence": first["sentences"][0], "word": first["word"]})
    senses = answer["senses"]  # the Chinese sample corpus has its senses
    assert status == 200 and set(senses["contexts"]) == {"苹果/水果", "苹果/公司"}, answer
    found = {(kind, layer): value for kind, layer, value in bars}
    assert found == pytest.approx({(kind, layer): senses[f"{kind}_sense" if kind == "same" else "different_senses"][layer]
                                   for kind, layer in found}, abs=1e-4)
    assert len(found) == 2 * len(expected)
    assert title == zh["wordInSentence"].format(word=second["word"], n=1), title
    status, answer = _post(chinese_server, "/v1/tokenize", {"sentences": ["好，" * 60]})
    assert status == 422 and refused == zh["requestError"].format(
        where=zh["fieldPrefix"].format(field=answer["error"]["field"]), message=answer["error"]["message"]), refused
    assert overflow <= 0, overflow
    assert not clean and len(errors) == 1 and "422" in errors[0], errors
    assert len(screenshot) > 10_000
