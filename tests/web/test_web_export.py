"""``pyelmo export --format web``: the page's JavaScript makes the tokens and character ids Python makes (run by
Node), bad outputs and models are refused in one line before anything is written, and the exported page,
served by a plain static server and loaded in a headless Chromium, computes the vectors and similarities of
pyelmo in Python (within 1e-4); its picture is docs/web.png."""

from __future__ import annotations

import functools
import http.server
import json
import random
import shutil
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="the export needs onnx (pip install 'pyelmo[onnx]')")

from pyelmo.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEXT_JS = ROOT / "src" / "pyelmo" / "web" / "page" / "text.js"
EFML = ROOT / "tests" / "fixtures" / "elmoformanylangs"
#: The README's picture of the page, rewritten by the browser test from what the page shows on load.
SCREENSHOT = ROOT / "docs" / "web.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BANK = ["I deposited money in the bank.", "The boat stopped near the river bank."]

#: Text where a port goes wrong: punctuation Moses treats specially, quotes, contractions, numbers, prefixes
#: before a period, Unicode (combining marks, full-width forms, emoji, CJK), control characters, and words over
#: 48 UTF-8 bytes (cut mid-character too).
TRICKY = [
    "I deposited money in the bank.", "Don't stop... Mr. Smith, 5,300 $ U.S.A. end.",
    "\u201cCurly\u201d \u2018quotes\u2019 -- a--b, na\u00efve caf\u00e9 (r\u00e9sum\u00e9) [x] {y} <z> & | 'tis rock'n'roll 1990's",
    "e.g. No. 5 vs No. five, pp. 12; Art. 3 ... ?! \u00bfQu\u00e9? \u00a1S\u00ed! 10.5% \u20ac20 \u00a530 @home #tag",
    "Supercalifragilisticexpialidocious-antidisestablishmentarianism-pneumonoultramicroscopic",
    "a" + "\u00e9" * 30 + " " + "\u4e2d" * 20 + " " + "\u00e9" * 41 + " " + "\U0001F600" * 13 + " x" + "\U0001F600" * 12,
    "tab\tnew\nline\u00a0nbsp\u200bzero\ufeffbom\u2028sep  end . . . ....", "'quoted' \"double\" `back` it's ''",
    "She said: 'Yes.' Then left.'", "The U.S. economy. it grew. A. B. c.", "x,y 3,000,000 ,lead trail,",
    "DOTMULTI DOTDOTMULTI..", "<S> </S> <s>", "\uff21\uff42\uff43\u3000full width\u3000\uff21\uff22\uff23\uff11\uff12\uff13",
    "e\u0301 composed", "\ufb01 ligature \u00bd \u00b2 \u2177", "can't won't I'm we'll they've", "a' 'a 1'2 1's", "", "   ",
]


def _node(script: str, given) -> object:
    """What ``script`` prints (JSON) run by Node with the page's text.js as ``t`` and ``given`` as ``input``."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on PATH: the page's tokenizer is checked with Node")
    script = ("const t = require(process.argv[1]); const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              f"console.log(JSON.stringify({script}));")
    done = subprocess.run([node, "-e", script, str(TEXT_JS)], input=json.dumps(given), capture_output=True,
                          text=True, encoding="utf-8", check=True, timeout=120)
    return json.loads(done.stdout)


def _node_tokens(texts: list[tuple[str, str]]) -> list:
    """``[tokens, ids]`` of each ``(text, lang)`` by the page's text.js."""
    return _node("input.map(([x, lang]) => { const k = t.tokenize(x, lang); return [k, k.map((w) => t.tokenToIds(w))]; })",
                 texts)


def test_the_page_tokenizes_and_numbers_characters_as_python_does():
    from pyelmo.modeling.characters import token_to_ids
    from pyelmo.text.tokenize import tokenize

    rng = random.Random(48)
    pool = list("aZ09 .,'\"`-!?;:()[]{}<>&|$%#@/\\\u2026\u2013\u2014\u00ab\u00bb\u00e9\u4e2d\u3002\uff0c\u00df") + [
        "...", "--", "n't", "'s", "Mr.", "U.S.", "No.", " 5", "\U0001F600", "\u0301", "\t", "\u00a0"]
    texts = TRICKY + ["".join(rng.choice(pool) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    got = _node_tokens([(t, "en") for t in texts])
    wrong = [(t, tokenize(t, "en"), tokens) for t, (tokens, _) in zip(texts, got) if tokenize(t, "en") != tokens]
    assert not wrong, wrong[:5]
    for t, (tokens, ids) in zip(texts, got):
        assert ids == [list(token_to_ids(token)) for token in tokens], t
    long_word = got[5][1][0]  # "a" + 30 "é": 61 bytes, cut at 48, inside a character
    assert long_word == [259, ord("a") + 1, *[0xC3 + 1, 0xA9 + 1] * 23, 0xC3 + 1, 260], long_word


def test_the_page_pads_a_batch_as_batch_to_ids_does():
    from pyelmo.modeling.characters import batch_to_ids

    batch = [["The", "river", "bank", "."], ["Hi"], [], ["<S>", "x" * 60, "\u00e9\U0001F600"]]
    got = _node("(({data, dims}) => [dims, Array.from(data, Number)])(t.batchToIds(input))", batch)
    expected = batch_to_ids(batch)
    assert got == [list(expected.shape), expected.flatten().tolist()]


def test_the_generated_tokenizer_data_is_sacremoses_own():
    """``moses-data.js`` is what ``scripts/make_web_text_data.py`` makes from the installed sacremoses."""
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_web_text_data.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_chinese_words_separated_by_spaces_stay_the_words_python_segmented():
    """The Chinese page takes words separated by spaces: the demo sentences, segmented by jieba as the
    export segments its examples, come back as the same tokens (and ids), which Python's tokenizer gives
    that text too (also mixed with English and Chinese punctuation)."""
    pytest.importorskip("jieba", reason="segmenting Chinese needs jieba (pip install 'pyelmo[zh]')")
    from pyelmo.evaluation.demo_zh import SENSE_CONTEXTS
    from pyelmo.modeling.characters import token_to_ids
    from pyelmo.text.tokenize import tokenize

    segmented = [tokenize(s, "zh") for senses in SENSE_CONTEXTS.values() for ss in senses.values() for s in ss]
    segmented.append(tokenize("他说：“我来到北京清华大学，ok? It's 5,000元。”", "zh"))
    got = _node_tokens([(" ".join(tokens), "zh") for tokens in segmented])
    assert [tokens for tokens, _ in got[:-1]] == segmented[:-1]
    assert [tokens for tokens, _ in got] == [tokenize(" ".join(tokens), "zh") for tokens in segmented]
    assert all(ids == [list(token_to_ids(t)) for t in tokens] for tokens, ids in got)


def _one_line(capsys, argv: list[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1, (rc, err)
    return err


@pytest.fixture(scope="module")
def english_page(tmp_path_factory):
    out = tmp_path_factory.mktemp("web") / "elmo-web"
    assert main(["export", "--format", "web", str(out), "--model", "english"]) == 0
    return out


def test_the_export_writes_a_static_folder(english_page):
    names = sorted(str(p.relative_to(english_page)) for p in english_page.rglob("*") if p.is_file())
    assert names == ["app.js", "config.json", "index.html", "model.onnx", "moses-data.js", "ort/LICENSE",
                     "ort/README.md", "ort/ort-wasm-simd-threaded.wasm", "ort/ort.wasm.bundle.min.mjs", "text.js"]
    html = (english_page / "index.html").read_text(encoding="utf-8")
    assert '<html lang="en">' in html and json.dumps(BANK)[1:-1] in html and "{{" not in html
    header = ROOT / "src" / "pyelmo" / "serve" / "static" / "header.html"  # the header of pyelmo serve's page
    assert header.read_text(encoding="utf-8").strip() in html
    assert not [p for p in english_page.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_refusals_are_one_line_before_writing(english_page, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    err = _one_line(capsys, ["export", "--format", "web", str(out), "--model", "english"])
    assert "not empty" in err and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    converted = tmp_path / "efml"  # a model converted from ELMoForManyLangs has no ONNX graph
    assert main(["convert", "elmoformanylangs", str(EFML / "model"), str(converted)]) == 0
    capsys.readouterr()
    err = _one_line(capsys, ["export", "--format", "web", str(tmp_path / "e2"), "--model", str(converted)])
    assert "cannot be exported to ONNX" in err
    assert not (tmp_path / "e2").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # a page exported before is replaced with --overwrite (and is an ONNX export folder too)
    assert main(["export", "--format", "web", str(english_page), "--model", "english", "--overwrite"]) == 0
    assert (english_page / "index.html").is_file() and (english_page / "model.onnx").is_file()


def test_a_chinese_model_gets_a_chinese_page_of_segmented_examples(tmp_path):
    pytest.importorskip("jieba", reason="the Chinese examples are segmented by jieba (pip install 'pyelmo[zh]')")
    out = tmp_path / "zh"
    assert main(["export", "--format", "web", str(out), "--model", "chinese"]) == 0
    html = (out / "index.html").read_text(encoding="utf-8")
    assert '<html lang="zh">' in html and "我 每天 早上 吃 一个 苹果 。" in html and "请用空格把词分开" in html


@contextmanager
def _static_server(folder: Path):
    """``folder`` served by Python's plain static server on 127.0.0.1 (a free port): its URL."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


DONE = "() => document.getElementById('result').textContent !== '' || document.querySelector('#status.error')"


def _python_values(embedder, word: str, sentences: list[str], lang: str = "en") -> dict:
    """What pyelmo in Python gives for the page's comparison: tokens, the word's vectors, the similarities."""
    from pyelmo.evaluation.demo import similarity_rows
    from pyelmo.evaluation.senses import find_word

    tokens = [embedder.tokenize(s, lang) for s in sentences]
    positions = [find_word(t, word) for t in tokens]
    outputs = embedder.embed_batch(tokens)
    vectors = [[out[layer, p].tolist() for out, p in zip(outputs, positions)] for layer in range(outputs[0].shape[0])]
    return {"tokens": tokens, "positions": positions, "vectors": vectors,
            "similarities": similarity_rows(embedder, word, sentences, lang=lang)[0].by_layer}


def _same(page: dict, python: dict) -> float:
    """The largest difference of the page's vectors and similarities from Python's (tokens must be equal)."""
    import numpy as np

    assert page["tokens"] == python["tokens"] and page["positions"] == python["positions"], (page, python)
    assert set(page["similarities"]) == set(python["similarities"])
    layers = len(python["vectors"])
    worst = float(np.abs(np.array(page["vectors"][:layers]) - np.array(python["vectors"])).max())
    return max(worst, *(abs(page["similarities"][k] - v) for k, v in python["similarities"].items()))


@contextmanager
def _browser_page(folder: Path, errors: list[str]):
    """``folder`` served by ``http.server`` and open in a headless Chromium (1000 x 800), its computation done;
    its script and console errors go to ``errors``."""
    if not Path(CHROMIUM).exists() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    with _static_server(folder) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(url)
            page.wait_for_function(DONE, timeout=120_000)
            yield page
        finally:
            browser.close()


@pytest.mark.slow
def test_the_page_runs_elmo_in_chromium_as_python_does(english_page, tmp_path):
    """Served by ``http.server`` alone and opened in a headless Chromium, the page computes the bank pair on
    load, and the apple pair on its button, with the word's vectors and similarities of ``ElmoEmbedder``."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.demo import SEED_PAIRS
    from pyelmo.fileio import write_bytes_atomic

    errors: list[str] = []
    with _browser_page(english_page, errors) as page:
        bank = json.loads(page.text_content("#result") or "{}")
        status, shown = page.text_content("#status"), page.eval_on_selector_all(
            "#similarities td.value", "els => els.map(e => [e.dataset.layer, e.textContent])")
        screenshot = page.screenshot(full_page=True)
        page.click('button.example:text-is("apple")')
        page.wait_for_function("() => document.getElementById('word').value === 'apple'")
        page.wait_for_function(DONE, timeout=60_000)
        apple = json.loads(page.text_content("#result") or "{}")
    (tmp_path / "web.png").write_bytes(screenshot)
    write_bytes_atomic(SCREENSHOT, screenshot)
    assert not errors, errors
    assert status.startswith('Showing "bank"'), status
    embedder = ElmoEmbedder()
    assert _same(bank, _python_values(embedder, "bank", BANK)) <= 1e-4
    word, sentences = SEED_PAIRS[1]
    assert _same(apple, _python_values(embedder, word, sentences[:2])) <= 1e-4
    assert dict(shown)["layer 0"] == "1.000" and bank["similarities"]["layer 2"] < 0.99  # context moves it
    assert abs(bank["similarities"]["layer 0"] - 1) < 1e-6
    assert len(screenshot) > 10_000


@pytest.mark.slow
def test_the_chinese_page_runs_the_chinese_model_as_python_does(tmp_path):
    """The Chinese page opens on its first example, segmented at export, with the Chinese model's vectors."""
    pytest.importorskip("jieba", reason="the Chinese examples are segmented by jieba (pip install 'pyelmo[zh]')")
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.demo_zh import SEED_PAIRS

    out = tmp_path / "zh"
    assert main(["export", "--format", "web", str(out), "--model", "chinese"]) == 0
    errors: list[str] = []
    with _browser_page(out, errors) as page:
        shown = json.loads(page.text_content("#result") or "{}")
        texts = [page.text_content(s) for s in ("h1", "#status")]
    assert not errors, errors
    word, sentences = SEED_PAIRS[0]
    assert texts[0].startswith("pyelmo 浏览器版") and texts[1].startswith(f"显示“{word}”"), texts
    assert _same(shown, _python_values(ElmoEmbedder("chinese"), word, sentences[:2], "zh")) <= 1e-4
