"""The default plan's promise, checked as a user meets it: the same input gives the same bytes in every fresh
process of `pyelmo embed`, at PyTorch's default thread count (no `--threads`), at 1 thread and at 2 threads (each
compared with itself), with the second core busy, and with the weights read from a file whose tensors start at
another alignment (as an archive and a local copy of the same model may).

Within one process the same calls repeat exactly on any plan; what differs between processes (the threads'
placement and load, where the weights landed in memory) is what these runs vary."""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch

from pyelmo.modelio.hub import shipped_folder
from pyelmo.runtime.plan import ONEDNN_MAX_ROWS, onednn_available

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference"

pytestmark = pytest.mark.slow

WORDS = {"en": "the bank river money boat stopped near deposited a of in and to was he she it they government "
               "market said year new people , . unbelievably".split(),
         "zh": "我 每天 早上 吃 一个 苹果 。 发布 了 新款 笔记本 电脑 银行 河 边 的 船 停 在".split()}


def sentences(path: Path, lang: str, n: int = 60) -> Path:
    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS[lang]) for _ in range(rng.randint(1, 30))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def realigned(folder: Path, out: Path) -> Path:
    """A copy of a native model folder whose tensors start 8 bytes further into the file (mod 64): the same
    weights at another alignment when loaded."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, out)
    weights = out / "model.safetensors"
    with safe_open(str(weights), "pt") as f:
        metadata = dict(f.metadata() or {})
    tensors = load_file(str(weights))
    start = 8 + struct.unpack("<Q", (folder / "model.safetensors").read_bytes()[:8])[0]
    for pad in range(1, 200):
        save_file(tensors, str(weights), metadata={**metadata, "alignment": "x" * pad})
        moved = 8 + struct.unpack("<Q", weights.read_bytes()[:8])[0]
        if moved % 64 != start % 64:
            return out
    raise AssertionError("could not move the tensors' alignment")


def embed(model_args: list[str], text: Path, out: Path, threads: int | None, env: dict | None = None) -> str:
    """One fresh `pyelmo embed --all` process (``threads`` None: without `--threads`); the SHA-1 of its vectors."""
    thread_args = [] if threads is None else ["--threads", str(threads)]
    subprocess.run([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--all", "--no-progress",
                    "--overwrite", *thread_args, *model_args], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, **(env or {})})
    digest = hashlib.sha1()
    with h5py.File(out, "r") as f:
        # (ONNX Runtime's files record no plan: the runtime's threads are its settings')
        assert threads is None or f"threads={threads}" in f.attrs.get("execution_plan", f"threads={threads}")
        for key in sorted((k for k in f if k != "sentence_to_index"), key=int):
            digest.update(f[key][...].tobytes())
    return digest.hexdigest()


def busy_core() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 120\nwhile time.time() < end: pass"])


MODELS = {
    "english": (["--model", "english"], "en"),
    "chinese": (["--model", "chinese"], "zh"),
    "bilm-tf": (["--options-file", str(REFERENCE / "bilm-tf" / "options.json"),
                 "--weight-file", str(REFERENCE / "bilm-tf" / "lm_weights.hdf5")], "en"),
    "allennlp": (["--options-file", str(REFERENCE / "allennlp" / "options.json"),
                  "--weight-file", str(REFERENCE / "allennlp" / "lm_weights.hdf5")], "en"),
}


@pytest.mark.parametrize("name", MODELS)
def test_fresh_processes_threads_load_and_alignment_give_the_same_bytes(name, tmp_path):
    args, lang = MODELS[name]
    text = sentences(tmp_path / "s.txt", lang)
    runs = {f"threads={t} run {i}": embed(args, text, tmp_path / f"t{t}-{i}.h5", t) for t in (1, 2) for i in (1, 2)}
    # without --threads: MKL's dynamic threading is what gave other bits in other processes here before
    default = {f"default threads run {i}": embed(args, text, tmp_path / f"d-{i}.h5", None) for i in range(4)}
    assert len(set(default.values())) == 1, default
    spinner = busy_core()
    try:
        runs["threads=2, the other core busy"] = embed(args, text, tmp_path / "busy.h5", 2)
    finally:
        spinner.kill()
        spinner.wait()
    if args[0] == "--model":
        folder = realigned(shipped_folder(args[1]), tmp_path / "realigned")
        runs["threads=2, weights at another alignment"] = embed(["--model", str(folder)], text, tmp_path / "r.h5", 2)
    # every run at a thread count gives one output (across thread counts MKL's products may split their sums
    # otherwise: docs/RELIABILITY.md)
    for threads in (1, 2):
        assert len({v for k, v in runs.items() if k.startswith(f"threads={threads}")}) == 1, runs


def mkl_products(text: Path, out: Path, *flags: str) -> list[dict]:
    """The float32 matrix products MKL ran in a fresh `pyelmo embed` of the shipped model (``MKL_VERBOSE``): each
    one's form, ``m`` (outputs), ``n`` (rows), ``k`` (inputs) and whether MKL's dynamic threading was on."""
    run = subprocess.run([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--no-progress",
                          "--overwrite", *flags], capture_output=True, text=True, check=True,
                         env={**os.environ, "MKL_VERBOSE": "1"})
    calls = []
    for line in (run.stdout + run.stderr).splitlines():
        match = re.search(r"SGEMM(_BATCH)?\(([^)]*)\).* Dyn:(\d)", line)
        if match:  # a batched product prints pointers, not its sizes
            a = match.group(2).split(",")
            sizes = {} if match.group(1) else {"m": int(a[2]), "n": int(a[3]), "k": int(a[4])}
            calls.append({"form": f"{a[0]},{a[1]}", "batched": bool(match.group(1)), **sizes,
                          "dynamic": match.group(3) == "1"})
    return calls


@pytest.mark.skipif(not (torch.backends.mkl.is_available() and onednn_available()),
                    reason="this PyTorch build lacks MKL or oneDNN")
def test_the_default_plan_runs_mkl_for_small_step_products_and_many_rows_with_fixed_threads(tmp_path):
    """The fixed rule: a float32 product runs through oneDNN up to ``ONEDNN_MAX_ROWS`` rows, through MKL above,
    and a time step's small products (``ExecutionPlan.batched_rows``: batched over both directions, ``torch.bmm``)
    through MKL's batched product; MKL runs with its thread count fixed (its dynamic threading, on until
    ``torch.set_num_threads`` is called, gave other bits in other processes). Checked without `--threads`
    (PyTorch's default), where that was the case."""
    text = sentences(tmp_path / "s.txt", "en")
    calls = mkl_products(text, tmp_path / "b1.h5", "--batch-size", "1")
    if not calls:
        pytest.skip("MKL printed no products (MKL_VERBOSE not honoured by this build)")
    calls += mkl_products(text, tmp_path / "b8.h5", "--batch-size", "8")
    assert not any(call["dynamic"] for call in calls)
    assert any(call["batched"] for call in calls)  # the steps' smallest products, both directions at once
    single = [call for call in calls if not call["batched"]]
    assert single and all(call["n"] > ONEDNN_MAX_ROWS for call in single)  # batch 8: the input-to-gate blocks,
    # the token encoder's products; oneDNN's below
    forced = mkl_products(text, tmp_path / "o.h5", "--batch-size", "1", "--kernels", "onednn")
    assert forced == []


def test_onnxruntime_gives_the_same_bytes_in_fresh_processes(tmp_path):
    """`pyelmo embed --runtime onnxruntime` of an exported folder: one output in every fresh process, at 1 and
    at 2 threads (each compared with itself)."""
    pytest.importorskip("onnxruntime")
    from pyelmo.cli import main

    folder = tmp_path / "onnx"
    assert main(["export", "--format", "onnx", str(folder), "--model", "english"]) == 0
    text = sentences(tmp_path / "s.txt", "en")
    args = ["--model", str(folder), "--runtime", "onnxruntime"]
    for threads in (1, 2):
        runs = {embed(args, text, tmp_path / f"o{threads}-{i}.h5", threads) for i in range(3)}
        assert len(runs) == 1, (threads, runs)
