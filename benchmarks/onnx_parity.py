"""ONNX export: parity with the unplanned PyTorch biLM, export size and time, load time, embedding speed.

  PYTHONPATH=src python benchmarks/onnx_parity.py [--speed-sentences 400] [--threads 1]

Per model (the bilm-tf and allennlp reference fixtures, the shipped english and chinese models): the
largest |ONNX Runtime - PyTorch| per layer over a batch of sentences of different lengths (one of one
token), the export's size and time, the ONNX Runtime session's load time and the biLM's; for english, the
embedding speed of ElmoEmbedder with runtime torch and onnxruntime on the same sentences. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.onnx_export import export_onnx
from pyelmo.modelio.onnx_runtime import OnnxBiLM
from pyelmo.modelio.resolve import resolve_model

REFERENCE = Path(__file__).parents[1] / "tests" / "fixtures" / "reference"
MODELS = {"bilm-tf": (REFERENCE / "bilm-tf" / "options.json", REFERENCE / "bilm-tf" / "lm_weights.hdf5"),
          "allennlp": (REFERENCE / "allennlp" / "options.json", REFERENCE / "allennlp" / "lm_weights.hdf5"),
          "english": ("english", None), "chinese": ("chinese", None)}
LATIN = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"],
         "A much longer sentence , with several more words in it than the others , ends here !".split(),
         ["naïve", "café", "–", "déjà", "vu"]]
CHINESE = [["我", "喜欢", "自然", "语言", "处理", "。"], ["好"], "今天 天气 很 好 ， 我们 去 公园 散步 吧 ， 好 吗 ？".split(),
           ["北京", "是", "中国", "的", "首都"]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--speed-sentences", type=int, default=400)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    report = {"threads": torch.get_num_threads(), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, weights) in MODELS.items():
            started = time.perf_counter()
            bilm = resolve_model(model, weights).load_bilm()
            torch_load = time.perf_counter() - started
            done = export_onnx(model, Path(tmp) / name, weight_file=weights)
            started = time.perf_counter()
            onnx_model = OnnxBiLM(done["folder"])
            ort_load = time.perf_counter() - started
            ids = batch_to_ids(CHINESE if name == "chinese" else LATIN)
            with torch.no_grad():
                expected = bilm(ids).layers.numpy()
            got = onnx_model(ids).layers.numpy()
            report["models"][name] = {
                "max_abs_diff_per_layer": [float(np.abs(got[k] - expected[k]).max()) for k in range(len(got))],
                "export_seconds": round(done["seconds"], 3), "onnx_bytes": done["bytes"],
                "torch_load_seconds": round(torch_load, 3), "ort_session_load_seconds": round(ort_load, 3)}
            if name == "english":
                report["speed"] = speed(done["folder"], args.speed_sentences)
    print(json.dumps(report, indent=2))


def speed(folder: Path, n: int) -> dict:
    """Sentences per second of ``ElmoEmbedder.embed_sentences`` (warm: after one pass), torch and onnxruntime."""
    rng = np.random.default_rng(0)
    words = "the of and to a in is that it was for on are as with his they at be this from I have or by".split()
    sentences = [[words[i] for i in rng.integers(0, len(words), int(rng.integers(1, 40)))] for _ in range(n)]
    out = {"sentences": n, "tokens": sum(map(len, sentences))}
    for runtime, model in (("torch", "english"), ("onnxruntime", str(folder))):
        embedder = ElmoEmbedder(model, runtime=runtime, token_cache_size=0)
        list(embedder.embed_sentences(sentences[:32]))
        started = time.perf_counter()
        list(embedder.embed_sentences(sentences))
        out[f"{runtime}_sentences_per_second"] = round(n / (time.perf_counter() - started), 1)
    return out


if __name__ == "__main__":
    main()
