"""``pyelmo serve`` holds one biLM: the LM head runs on the embedder's model and run options, so
``/v1/predict`` runs at the server's precision."""

from __future__ import annotations

import gc
import types

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

from pyelmo.lm.model import LanguageModel  # noqa: E402
from pyelmo.lm.predict import WordPredictor  # noqa: E402
from pyelmo.modeling.bilm import BiLM  # noqa: E402
from pyelmo.runtime.linear import PLANNED, PlannedLinear  # noqa: E402
from pyelmo.runtime.options import RunOptions  # noqa: E402
from pyelmo.runtime.precision import Quantization  # noqa: E402
from pyelmo.serve import build_service, create_app  # noqa: E402
from lmfolder import lm_folder  # noqa: E402

WORDS = ["<S>", "</S>", "<UNK>", "the", "bank", "river", "money", ".", "boat", "near", "we", "sat", "on"]
SENTENCE = "we sat on the ___ bank .".split()


@pytest.fixture
def model_dir(tiny_model, tmp_path):
    return lm_folder(tiny_model, tmp_path / "lm", WORDS)


def reachable(root, kinds=BiLM) -> dict[int, object]:
    """The distinct objects of ``kinds`` reachable from ``root`` (not through functions' globals or modules), by id."""
    skip = (type, types.ModuleType, types.FunctionType, str, bytes, torch.Tensor, np.ndarray)
    seen, found, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, kinds):
            found[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return found


bilms = reachable


def reference(model_dir, options: RunOptions):
    """A predictor of its own with ``options``: log-probabilities at the blank and the top 3 words."""
    own = LanguageModel.from_pretrained(model_dir, options=options)  # its biLM planned for them
    predictor = WordPredictor(own, own.vocab, options=options)
    return predictor.log_probs(SENTENCE, SENTENCE.index("___")), predictor.predict(SENTENCE, k=3).combined


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_one_bilm_and_predict_runs_at_the_servers_precision(model_dir, tmp_path, precision):
    quantize_all = {"quantization": Quantization(0)} if precision == "int8" else {}  # every product, however small
    (want, top), (exact, _) = (reference(model_dir, RunOptions.inference(precision=precision, **quantize_all)),
                               reference(model_dir, RunOptions.inference()))
    service = build_service(str(model_dir), precision=precision, cache_dir=tmp_path / "cache", **quantize_all)
    try:
        predictor, embedder = service.predictor, service.embedder
        assert predictor.bilm is embedder.model and predictor.options is embedder.options
        assert len(bilms(service)) == 1
        assert embedder.options.products.int8 is (precision == "int8")
        # the numbers of a predictor at that precision, and (int8) not the float32 ones
        served = predictor.log_probs(SENTENCE, SENTENCE.index("___"))
        # (int8: the same bits, its products being independent of the batch; float32 to float32's rounding: a
        # served log-probability has differed from a fresh predictor's by 2 units in the last place)
        atol, rtol = (0.0, 0.0) if precision == "int8" else (0.0, 1e-6)
        for got, expected, float32 in zip(served, want, exact):
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)
            assert (precision == "int8") == (not torch.allclose(got, float32, rtol=0, atol=1e-5))
        with TestClient(create_app(service)) as client:
            assert client.get("/v1/models").json()["models"][0]["precision"] == precision
            answer = client.post("/v1/predict", json={"sentence": SENTENCE, "k": 3}).json()
        np.testing.assert_allclose([w["probability"] for w in answer["combined"]], [p for _, p in top],
                                   rtol=0, atol=1e-6)
        assert [w["word"] for w in answer["combined"]] == [w for w, _ in top]
    finally:
        service.close()


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_embed_and_predict_requests_run_the_one_planned_bilm_and_copy_nothing(model_dir, tmp_path, precision):
    quantize_all = {"quantization": Quantization(0)} if precision == "int8" else {}
    service = build_service(str(model_dir), precision=precision, cache_dir=tmp_path / "cache", **quantize_all)
    try:
        model, options = service.embedder.model, service.embedder.options
        lstm = [m for m in model.directions.modules() if isinstance(m, (nn.Linear, PlannedLinear))]
        assert lstm and all(type(m) is PLANNED[precision] for m in lstm)  # planned in place, at load
        shapes = {m.shape for m in lstm}
        with TestClient(create_app(service)) as client:
            assert client.post("/v1/embed", json={"sentences": ["we sat on the bank ."]}).status_code == 200
            assert client.post("/v1/predict", json={"sentence": SENTENCE, "k": 3}).status_code == 200
        assert reachable(service).keys() == {id(model)}
        # one set of LSTM weights: those of the embedder's model, no copy's
        found = {id(m) for m in reachable(service, (nn.Linear, PlannedLinear)).values() if m.shape in shapes}
        assert found == {id(m) for m in lstm}
        assert not any(isinstance(kept[2], BiLM) for kept in options.products._derived.values())
    finally:
        service.close()


def test_a_model_without_softmax_serves_without_predictions(tiny_model, tmp_path):
    from pyelmo.modelio.weights import save_pretrained

    service = build_service(str(save_pretrained(tiny_model, tmp_path / "bare")), cache_dir=tmp_path / "cache")
    try:
        assert service.predictor is None and service.model_info["predict"] is False
        assert len(bilms(service)) == 1
    finally:
        service.close()
