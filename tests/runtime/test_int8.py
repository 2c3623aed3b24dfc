"""The int8 precision (``--precision int8``): the plan quantizes the weights its rule names, per output channel;
vectors stay close to the exact ones; results are reproducible; the embedder that loads a model keeps only the
int8 copy of those weights; the choice is recorded (HDF5 attributes, ``/v1/models``, task models) and
checked before any work; the exact mode stays the default."""

from __future__ import annotations

import copy

import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import ConfigError
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import model_fingerprint, save_bilm_hdf5
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import INT8_MIN_WEIGHT, Quantization
from pyelmo.runtime.linear import ExactLinear, Int8Linear
from pyelmo.runtime.linear import PLANNED
from pyelmo.runtime.planning import plan_model, planned_products
from pyelmo.runtime.products import Products

SENTENCES = [["The", "bank", "raised", "its", "rates", "."], ["We", "sat", "on", "the", "river", "bank"],
             ["A", "longer", "sentence", "with", "some", "more", "words", "in", "it", "to", "embed", "."]]
#: gates (4 * 512, 128): the default rule quantizes them; the projection (128, 512) and the encoder stay float32
CONFIG = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 16), (2, 16), (3, 32)), n_highway=1),
                    lstm=LSTMConfig(dim=512, projection_dim=128))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-token cosine of two ``(L, n, D)`` arrays: ``(L, n)``."""
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def model() -> BiLM:
    torch.manual_seed(0)
    return BiLM(CONFIG).eval()


@pytest.fixture(scope="module")
def released_files(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("int8-model")
    save_bilm_hdf5(model, folder / "options.json", folder / "weights.hdf5")
    return folder / "options.json", folder / "weights.hdf5"


def test_the_rule_names_the_large_weights():
    plan = ExecutionPlan.for_machine(precision="int8")
    assert plan.quantization == Quantization() and plan.quantization.min_weight == INT8_MIN_WEIGHT
    assert plan.quantized((2048, 128)) and not plan.quantized((128, 512))
    assert ExecutionPlan.for_machine(precision="int8", quantization=Quantization(0)).quantized((4, 4))
    assert not ExecutionPlan.for_machine().quantized((16384, 512))  # the exact default quantizes nothing
    assert "precision=int8" in plan.summary() and f"int8_min_weight={INT8_MIN_WEIGHT}" in plan.summary()
    assert plan.vectors_key and not ExecutionPlan.for_machine().vectors_key


@pytest.mark.parametrize("kwargs, match", [
    ({"precision": "int8", "device": "cuda"}, "CPU only"),
    ({"quantization": Quantization(10)}, "int8"),
    ({"precision": "float32", "quantization": Quantization(10)}, "quantizing precision"),
    ({"precision": "int4"}, "precision"),
])
def test_bad_plans_are_refused(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ExecutionPlan.for_machine(**kwargs)


def test_a_negative_rule_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=">= 0") as refused:
        Quantization(-1)
    assert len(str(refused.value).splitlines()) == 1 and "--int8-min-weight" in str(refused.value)
    assert Quantization.of(None) is None and Quantization.of(0) == Quantization(0)
    with pytest.raises(TypeError, match="Quantization"):  # the rule is one object, not a bare number
        ExecutionPlan.for_machine(precision="int8", quantization=0)


def test_each_row_keeps_its_resolution():
    """Rows of very different magnitudes: each is quantized on its own scale (per tensor, the small row
    would be rounded to nothing)."""
    torch.manual_seed(1)
    w = torch.randn(1024, 256) * 0.05
    x = torch.randn(2, 256) * torch.tensor([[100.0], [0.01]])
    exact = x @ w.T
    products = Products(ExecutionPlan(precision="int8"))
    y = PLANNED[products.precision_of(w)](w, None, products)(x)
    assert products.decisions and set(products.decisions.values()) == {"int8"}
    rel = ((y - exact).norm(dim=1) / exact.norm(dim=1)).tolist()
    assert max(rel) < 0.03, rel


def test_vectors_close_to_exact_and_the_same_bits_every_time(model):
    exact = ElmoEmbedder(model).embed_batch(SENTENCES)
    runs = [ElmoEmbedder(model, precision="int8").embed_batch(SENTENCES) for _ in range(2)]
    for a, b in zip(runs[0], runs[1]):
        assert np.array_equal(a, b)  # fresh embedders, fresh packing: the same bits
    for e, q in zip(exact, runs[0]):
        cos = cosines(e, q)
        assert np.array_equal(e[0], q[0])  # the token layer's products are below the rule's size: exact
        assert cos.min() > 0.999, cos.min()
        assert not np.array_equal(e[1:], q[1:])  # the LSTM's products did run in int8


def test_every_product_in_int8(tiny_model, allennlp_reference):
    batch = allennlp_reference.batch(0)
    exact = ElmoEmbedder(tiny_model).embed_batch(batch)
    embedder = ElmoEmbedder(tiny_model, precision="int8", quantization=Quantization(0))
    int8 = embedder.embed_batch(batch)
    assert {"int8"} == set(embedder.options.products.decisions.values())
    for e, q in zip(exact, int8):
        assert cosines(e, q).min() > 0.99


def test_a_loaded_model_keeps_only_the_int8_weights(model, released_files):
    options, weights = released_files
    embedder = ElmoEmbedder(str(options), str(weights), precision="int8")
    layer = embedder.model.directions[0][0]
    assert isinstance(layer.state_gates, Int8Linear) and layer.state_gates.weight.is_meta  # the int8 copy only
    assert not any(t.is_meta for t in embedder.model.state_dict().values())
    assert "directions.0.0.state_gates.weight" not in embedder.model.state_dict()
    assert isinstance(layer.projection, ExactLinear) and not layer.projection.weight.is_meta  # not quantized: kept
    # the same vectors as an embedder handed the biLM (which it leaves as it is)
    handed = ElmoEmbedder(model, precision="int8")
    assert type(model.directions[0][0].state_gates) is torch.nn.Linear and planned_products(model) is None
    for a, b in zip(embedder.embed_batch(SENTENCES), handed.embed_batch(SENTENCES)):
        assert np.array_equal(a, b)
    assert embedder.fingerprint == model_fingerprint(model) == handed.fingerprint
    report = embedder.explain()
    rows = {r["product"]: r["precision"] for r in report["products"]}
    assert rows["lstm.state_gates"] == "int8" and rows["lstm.projection"] == "float32"


def test_elmo_runs_int8_in_eval_mode(model):
    from pyelmo import Elmo

    ids = batch_to_ids(SENTENCES)
    exact = Elmo(None, None, 1, module=model, dropout=0.0).eval()
    options = RunOptions.inference(precision="int8")
    int8 = Elmo(None, None, 1, module=plan_model(copy.deepcopy(model), options), dropout=0.0, options=options).eval()
    with torch.no_grad():
        a = exact(ids)["elmo_representations"][0]
        b = int8(ids)["elmo_representations"][0]
    assert not torch.equal(a, b)
    assert torch.nn.functional.cosine_similarity(a[a.abs().sum(-1) > 0], b[a.abs().sum(-1) > 0], dim=-1).min() > 0.999


def _embed(args, tmp_path):
    return subprocess.run([sys.executable, "-m", "pyelmo", "embed", *args], capture_output=True, text=True,
                          cwd=tmp_path)


def test_embed_records_int8_and_refuses_bad_plans(released_files, tmp_path):
    options, weights = released_files
    (tmp_path / "in.txt").write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")
    model = ["--options-file", str(options), "--weight-file", str(weights), "--no-progress"]
    exact = _embed(["in.txt", "exact.hdf5", *model], tmp_path)
    int8 = _embed(["in.txt", "int8.hdf5", *model, "--precision", "int8"], tmp_path)
    assert exact.returncode == 0 and int8.returncode == 0, int8.stderr
    with h5py.File(tmp_path / "exact.hdf5") as e, h5py.File(tmp_path / "int8.hdf5") as q:
        assert e.attrs["precision"] == "float32" and q.attrs["precision"] == "int8"
        assert "precision=int8" in q.attrs["execution_plan"] and "int8" in q.attrs["kernels_used"]
        assert q.attrs["model_sha1"] == e.attrs["model_sha1"]
        for key in ("0", "1", "2"):
            assert cosines(e[key][...], q[key][...]).min() > 0.999
    for bad in (["--precision", "int8", "--bf16"], ["--int8-min-weight", "5"], ["--precision", "int8", "--device", "cuda"],
                ["--precision", "int8", "--int8-min-weight", "-1"]):
        proc = _embed(["in.txt", "bad.hdf5", *model, *bad], tmp_path)
        usage = "--bf16" in bad  # two precisions: a usage error of the arguments (exit 2)
        assert proc.returncode == (2 if usage else 1) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr and not (tmp_path / "bad.hdf5").exists()


def test_serve_reports_the_precision(released_files, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from pyelmo.serve import build_service, create_app

    options, weights = released_files
    service = build_service(str(options), str(weights), cache_dir=tmp_path, precision="int8")
    with TestClient(create_app(service), raise_server_exceptions=False) as client:
        info = client.get("/v1/models").json()["models"][0]
        assert info["precision"] == "int8" and "precision=int8" in info["execution_plan"]
        response = client.post("/v1/embed", json={"sentences": ["the bank of the river"]})
        assert response.status_code == 200


def test_spacy_component_takes_the_precision():
    spacy = pytest.importorskip("spacy")
    import pyelmo.integrations.spacy  # noqa: F401  (registers the factory)

    nlp = spacy.blank("en")
    with pytest.warns(RuntimeWarning, match="runs exact float32"):  # the shipped model's weights are all small
        nlp.add_pipe("pyelmo", config={"precision": "int8"})
    doc = nlp("The bank raised its rates.")
    assert doc.tensor.shape[0] == len(doc)
    assert nlp.get_pipe("pyelmo").embedder.options.plan.precision == "int8"
    from pyelmo.errors import InputError

    with pytest.raises(InputError, match="precision must be"):
        spacy.blank("en").add_pipe("pyelmo", config={"precision": "int4"})


def test_task_models_train_and_evaluate_on_int8_layers(tmp_path, capsys):
    """The layers' precision is stored with a task model, evaluate uses it unless told otherwise, the
    layer cache keeps the two precisions apart, and a precision without ELMo features is refused."""
    import json

    from pyelmo.cli import main
    from taskdata import BILM_ARGS, write_task_data

    write_task_data(tmp_path)
    cache = tmp_path / "layers"
    common = ["--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"), *BILM_ARGS,
              "--static-vectors", str(tmp_path / "vec.txt"), "--hidden", "8", "--max-epochs", "2", "--min-steps", "0",
              "--quiet", "--cache-dir", str(cache)]
    assert main(["task", "train", "classify", *common, "--out", str(tmp_path / "exact")]) == 0
    assert main(["task", "train", "classify", *common, "--out", str(tmp_path / "int8"), "--precision", "int8",
                 "--int8-min-weight", "0"]) == 0
    saved = json.loads((tmp_path / "int8" / "config.json").read_text())
    assert saved["options"]["precision"] == "int8" and saved["options"]["int8_min_weight"] == 0
    assert len(list(cache.glob("layers-*.npz"))) == 4  # train and dev layers of each precision, apart
    capsys.readouterr()
    scores = {}
    for name, extra in (("exact", []), ("int8", []), ("exact", ["--precision", "int8", "--int8-min-weight", "0"])):
        assert main(["task", "evaluate", str(tmp_path / name), "--test", str(tmp_path / "test.tsv"), "--json",
                     "--quiet", "--cache-dir", str(cache), *extra]) == 0
        scores[(name, bool(extra))] = json.loads(capsys.readouterr().out)["accuracy"]
    assert all(50 <= s <= 100 for s in scores.values()), scores  # percent
    assert main(["task", "train", "classify", *common, "--out", str(tmp_path / "bad"), "--features", "static",
                 "--precision", "int8"]) == 1
    assert "needs ELMo features" in capsys.readouterr().err and not (tmp_path / "bad").exists()


#: Sentences of many lengths, so that batchings differ in rows per step and in which rows share a product.
BATCHING_SENTENCES = SENTENCES + [("the bank raised its rates and the river bank flooded while we sat on it " * 3).split()[: 2 + 3 * k]
                                  for k in range(10)]
BATCHINGS = {"one at a time": {"max_tokens": None, "batch_size": 1}, "by fives": {"max_tokens": None, "batch_size": 5}}


def _largest_batching_difference(model: BiLM, **plan) -> float:
    """How far a sentence's vectors move when other sentences share its batch: the default batches
    against each of :data:`BATCHINGS`, the largest difference of any value."""
    default = list(ElmoEmbedder(model, **plan).embed_sentences(BATCHING_SENTENCES))
    largest = 0.0
    for batching in BATCHINGS.values():
        other = ElmoEmbedder(model, **batching, **plan).embed_sentences(BATCHING_SENTENCES)
        largest = max(largest, *(float(np.abs(a - b).max()) for a, b in zip(default, other)))
    return largest


@pytest.mark.parametrize("min_weight", [None, 0])
def test_int8_vectors_do_not_depend_on_the_batch(model, min_weight):
    """A sentence's int8 vectors are the same whichever sentences share its batch, as float32's are (within
    float32's own rounding): each row is quantized on its own scale and range, never the batch's."""
    float32 = _largest_batching_difference(model)
    int8 = _largest_batching_difference(model, precision="int8", quantization=Quantization.of(min_weight))
    assert float32 < 1e-5, float32
    assert int8 <= max(2 * float32, 1e-5), (int8, float32)
