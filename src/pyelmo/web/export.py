"""``pyelmo export --format web``: a static folder that runs ELMo in the browser, served by any static server
(``python -m http.server``), with no pyelmo process.

:func:`export_web` writes ``index.html`` (the page: two sentences and a word -> the cosine similarity of the
word's vectors per layer, opening on the demo's first pair), ``app.js``, ``text.js`` (pyelmo's tokenizer and
character ids in JavaScript), ``moses-data.js``, ``model.onnx`` and ``config.json`` (the ONNX export,
:func:`pyelmo.modelio.onnx_export.export_onnx`) and ``ort/`` (onnxruntime-web, pinned, from ``vendor/``).
A Chinese model gets a Chinese page whose input is text already split into words by spaces (the browser runs
no segmenter; its examples are segmented by jieba at export).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from pyelmo.fileio import PathLike, atomic_folder

#: The onnxruntime-web release in ``vendor/`` (its README says where the files came from).
ORT_WEB_VERSION = "1.30.0"
HERE = Path(__file__).resolve().parent
PAGE_DIR, VENDOR_DIR = HERE / "page", HERE / "vendor"
#: The page's header (title, subtitle, model line): the one the ``pyelmo serve`` page shows, filled in by each
#: page's script (``data-t="subtitle"``: its texts; ``model-info``: the model).
HEADER = HERE.parent / "serve" / "static" / "header.html"
#: The page's files copied as they are, and the vendored files copied into ``ort/``.
PAGE_FILES = ("app.js", "text.js", "moses-data.js")
VENDOR_FILES = ("ort.wasm.bundle.min.mjs", "ort-wasm-simd-threaded.wasm", "LICENSE", "README.md")


def page_examples(lang: str) -> list[dict]:
    """The demo's word pairs (``pyelmo.evaluation.demo``), two sentences each; Chinese ones split into words
    by spaces (jieba, as ``pyelmo.text.tokenize`` segments), the way the page takes its input."""
    from pyelmo.evaluation.demo import demo_data
    from pyelmo.text.tokenize import tokenize

    pairs = demo_data(lang)[0]
    examples = []
    for word, sentences in pairs:
        first_two = sentences[:2]
        if lang == "zh":
            first_two = [" ".join(tokenize(s, "zh")) for s in first_two]
        examples.append({"word": word, "sentences": first_two})
    return examples


def render_page(config: dict) -> str:
    """``index.html`` for an export whose ``config.json`` is ``config``."""
    lang = "zh" if config.get("language") == "zh" else "en"
    # the page's texts in each language (the page's language is the model's)
    texts = json.loads((Path(__file__).with_name("data") / "texts.json").read_text(encoding="utf-8"))[lang]
    options = config["options"]
    about = texts["about"].format(model=config.get("model") or "ELMo", layers=options["lstm"]["n_layers"] + 1,
                                  dim=config["outputs"]["layers"]["shape"][-1], ort=ORT_WEB_VERSION)
    page = {"lang": lang, "texts": texts, "about": about, "examples": page_examples(lang)}
    data = json.dumps(page, ensure_ascii=False).replace("</", "<\\/")
    html = (PAGE_DIR / "index.html").read_text(encoding="utf-8")
    header = HEADER.read_text(encoding="utf-8").rstrip("\n")
    return html.replace("{{header}}", header).replace("{{lang}}", lang).replace("{{config}}", data)


def export_web(model=None, outdir: PathLike = "", *, weight_file: PathLike | None = None,
               overwrite: bool = False) -> dict:
    """Write the page's folder ``outdir`` (in a temporary folder beside it, then renamed): refused, before
    anything is written, when ``outdir`` holds files and not ``overwrite``, or when the model cannot be
    exported to ONNX. Returns ``{"folder", "seconds", "bytes", "lang"}``."""
    from pyelmo.modelio.onnx_export import check_output, export_onnx

    outdir = check_output(outdir, overwrite)
    started = time.perf_counter()
    with atomic_folder(outdir) as tmp:
        export_onnx(model, tmp, weight_file=weight_file)  # refuses a model it cannot export, writing nothing
        config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
        (tmp / "index.html").write_text(render_page(config), encoding="utf-8")
        for name in PAGE_FILES:
            shutil.copyfile(PAGE_DIR / name, tmp / name)
        (tmp / "ort").mkdir()
        for name in VENDOR_FILES:
            shutil.copyfile(VENDOR_DIR / name, tmp / "ort" / name)
    size = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file())
    return {"folder": outdir, "seconds": time.perf_counter() - started, "bytes": size,
            "lang": "zh" if config.get("language") == "zh" else "en"}
