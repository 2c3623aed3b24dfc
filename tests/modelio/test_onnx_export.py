"""``pyelmo export --format onnx`` and ONNX Runtime as an execution backend: the exported graph computes the
unplanned biLM's layers (within 1e-5) for any batch size and sentence length; bad inputs are one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

pytest.importorskip("onnx", reason="the ONNX export needs onnx (pip install 'pyelmo[onnx]')")
ort = pytest.importorskip("onnxruntime", reason="running the export needs onnxruntime (pip install 'pyelmo[onnx]')")

from pyelmo.cli import main  # noqa: E402
from pyelmo.errors import PyelmoError  # noqa: E402
from pyelmo.modeling.characters import batch_to_ids  # noqa: E402
from pyelmo.modelio.resolve import resolve_model  # noqa: E402

REFERENCE = Path(__file__).parents[1] / "fixtures" / "reference"
EFML = Path(__file__).parents[1] / "fixtures" / "elmoformanylangs"
MODELS = {
    "bilm-tf": ["--options-file", str(REFERENCE / "bilm-tf" / "options.json"),
                "--weight-file", str(REFERENCE / "bilm-tf" / "lm_weights.hdf5")],
    "allennlp": ["--options-file", str(REFERENCE / "allennlp" / "options.json"),
                 "--weight-file", str(REFERENCE / "allennlp" / "lm_weights.hdf5")],
    "english": ["--model", "english"],
    "chinese": ["--model", "chinese"],
}
SENTENCES = {
    "latin": [["The", "cat", "sat", "on", "the", "mat", "."], ["Hi"],
              "A much longer sentence , with several more words in it than the others , ends here !".split(),
              ["naïve", "café", "–", "déjà", "vu"]],
    "chinese": [["我", "喜欢", "自然", "语言", "处理", "。"], ["好"], "今天 天气 很 好 ， 我们 去 公园 散步 吧 ， 好 吗 ？".split(),
                ["北京", "是", "中国", "的", "首都"]],
}
TOLERANCE = 1e-5


def _bilm(name: str):
    args = MODELS[name]
    return resolve_model(args[1], args[3] if len(args) > 2 else None).load_bilm()


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Each model exported once through the command."""
    root = tmp_path_factory.mktemp("onnx")
    folders = {}
    for name, args in MODELS.items():
        folders[name] = root / name
        assert main(["export", "--format", "onnx", str(folders[name]), *args]) == 0
    return folders


def _session(folder: Path):
    return ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", list(MODELS))
def test_onnx_runtime_gives_the_pytorch_layers(exports, name):
    """Every layer within 1e-5 of the unplanned PyTorch model, for sentences of different lengths (one of one
    token) in one batch, and for a second shape through the same file."""
    bilm = _bilm(name)
    session = _session(exports[name])
    sentences = SENTENCES["chinese" if name == "chinese" else "latin"]
    for batch in (sentences, sentences[1:3], [sentences[1]], [[], sentences[0]]):
        ids = batch_to_ids(batch)
        with torch.no_grad():
            expected = bilm(ids)
        layers, mask = session.run(None, {"char_ids": ids.numpy()})
        assert layers.shape == tuple(expected.layers.shape) and layers.dtype == np.float32
        np.testing.assert_array_equal(mask, expected.mask.numpy())
        for k in range(layers.shape[0]):
            assert np.abs(layers[k] - expected.layers[k].numpy()).max() <= TOLERANCE, (name, len(batch), k)
        assert not layers[:, ~mask].any()  # padding positions are zeros


def test_reference_outputs_of_the_original(exports):
    """The first batch of the bilm-tf reference (stateless: it starts from zero states) through the graph."""
    sentences = json.loads((REFERENCE / "bilm-tf" / "lm_embeddings_sentences.json").read_text())
    batch = [sentences[k][0].split() for k in range(3)]
    layers, _ = _session(exports["bilm-tf"]).run(None, {"char_ids": batch_to_ids(batch).numpy()})
    for k, sentence in enumerate(batch):
        with h5py.File(REFERENCE / "bilm-tf" / f"lm_embeddings_{k}.hdf5", "r") as f:
            fwd_bwd = f["0"][...]
        expected = np.concatenate([fwd_bwd[0], fwd_bwd[1]], axis=-1)
        assert np.abs(layers[-1, k, : len(sentence)] - expected).max() < 1e-5


def test_the_graph_loops_over_time_and_records_where_it_comes_from(exports):
    import onnx

    from pyelmo import __version__
    from pyelmo.modelio.onnx_export import OPSET
    from pyelmo.modelio.weights import model_fingerprint

    model = onnx.load(str(exports["allennlp"] / "model.onnx"))
    ops = {node.op_type for node in model.graph.node}
    assert ops & {"Scan", "Loop"}, ops
    assert (model.producer_name, model.producer_version) == ("pyelmo", __version__)
    assert any(o.domain in ("", "ai.onnx") and o.version == OPSET for o in model.opset_import)
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input]
    assert dims == [["batch", "tokens", 50]]
    config = json.loads((exports["allennlp"] / "config.json").read_text())
    assert config["fingerprint"] == model_fingerprint(_bilm("allennlp"))
    assert config["pyelmo_version"] == __version__ and config["opset"] == OPSET
    assert config["options"]["lstm"]["projection_dim"] == 16
    assert config["characters"]["max_characters_per_token"] == 50
    assert config["characters"]["begin_sentence_ids"][:3] == [259, 257, 260]
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["fingerprint"] == config["fingerprint"]


def _one_line(capsys, argv) -> str:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1, (rc, err)
    return err


def test_export_refusals_are_one_line_before_writing(exports, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    err = _one_line(capsys, ["export", "--format", "onnx", str(out), *MODELS["allennlp"]])
    assert "not empty" in err and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert main(["export", "--format", "onnx", str(out), *MODELS["allennlp"], "--overwrite"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.onnx"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
    # an export of an export, and a model converted from ELMoForManyLangs
    err = _one_line(capsys, ["export", "--format", "onnx", str(tmp_path / "again"), "--model", str(exports["english"])])
    assert "ONNX export already" in err
    converted = tmp_path / "efml"
    assert main(["convert", "elmoformanylangs", str(EFML / "model"), str(converted)]) == 0
    capsys.readouterr()
    err = _one_line(capsys, ["export", "--format", "onnx", str(tmp_path / "e2"), "--model", str(converted)])
    assert "cannot be exported to ONNX" in err and "ELMoForManyLangs" in err
    assert not (tmp_path / "again").exists() and not (tmp_path / "e2").exists()


def test_a_planned_model_is_refused(tmp_path):
    from pyelmo.modelio.onnx_export import export_onnx
    from pyelmo.runtime.options import RunOptions
    from pyelmo.runtime.planning import plan_model

    bilm = plan_model(_bilm("allennlp"), RunOptions.inference())
    with pytest.raises(PyelmoError, match="planned for inference"):
        export_onnx(None, tmp_path / "p", bilm=bilm)
    assert not (tmp_path / "p").exists()


# -- the onnxruntime backend ------------------------------------------------------------------------
def test_embed_with_onnxruntime_writes_the_torch_file(exports, tmp_path, capsys, monkeypatch):
    """``pyelmo embed --runtime onnxruntime``: an export folder, or a model exported on the fly into the cache,
    gives the HDF5 file of the torch runtime (the same datasets, values within 1e-5)."""
    monkeypatch.setenv("PYELMO_ONNX_CACHE", str(tmp_path / "cache"))
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES["latin"]) + "\n", encoding="utf-8")
    outputs = {}
    for name, args in (("torch", [*MODELS["allennlp"]]),
                       ("folder", ["--model", str(exports["allennlp"]), "--runtime", "onnxruntime"]),
                       ("fly", [*MODELS["allennlp"], "--runtime", "onnxruntime"])):
        outputs[name] = tmp_path / f"{name}.h5"
        assert main(["embed", str(text), str(outputs[name]), "--no-progress", *args]) == 0, capsys.readouterr().err
    assert len(list((tmp_path / "cache").iterdir())) == 1  # exported once, under its fingerprint
    with h5py.File(outputs["torch"]) as t, h5py.File(outputs["folder"]) as a, h5py.File(outputs["fly"]) as b:
        assert set(t) == set(a) == set(b)
        assert a.attrs["runtime"] == "onnxruntime" and a.attrs["model_sha1"] == t.attrs["model_sha1"]
        for key in t:
            if key == "sentence_to_index":
                assert t[key][()] == a[key][()]
                continue
            assert t[key].shape == a[key].shape
            assert np.abs(t[key][()] - a[key][()]).max() <= TOLERANCE
            np.testing.assert_array_equal(a[key][()], b[key][()])
    # the cached export is reused
    assert main(["embed", str(text), str(tmp_path / "again.h5"), "--no-progress", *MODELS["allennlp"],
                 "--runtime", "onnxruntime"]) == 0


def test_embedder_api(exports):
    from pyelmo.embedding.embedder import ElmoEmbedder

    ours = ElmoEmbedder(str(exports["english"]), runtime="onnxruntime")
    theirs = ElmoEmbedder("english")
    for a, b in zip(ours.embed_sentences(SENTENCES["latin"]), theirs.embed_sentences(SENTENCES["latin"])):
        assert a.shape == b.shape and np.abs(a - b).max() <= TOLERANCE
    assert ours.fingerprint == theirs.fingerprint and ours.language == "en"
    with pytest.raises(PyelmoError, match="stateful is for runtime torch"):
        ElmoEmbedder(str(exports["english"]), runtime="onnxruntime", stateful=True)


def _embed_refused(capsys, tmp_path, model_args, what: str) -> None:
    text = tmp_path / "in.txt"
    text.write_text("the cat\n")
    output = tmp_path / "out.h5"
    err = _one_line(capsys, ["embed", str(text), str(output), "--no-progress", "--runtime", "onnxruntime",
                             *model_args])
    assert what in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"], "something written"


def test_bad_exports_are_one_line_and_write_nothing(exports, tmp_path, capsys):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(exports["allennlp"], damaged)
    data = (damaged / "model.onnx").read_bytes()
    (damaged / "model.onnx").write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign"
    shutil.copytree(exports["allennlp"], foreign)
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "other",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    other = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    other.ir_version = 8
    onnx.save(other, str(foreign / "model.onnx"))
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(exports["allennlp"] / "model.onnx", bare / "model.onnx")
    work = tmp_path / "work"
    for folder, what in ((damaged, "not a model ONNX Runtime can load"), (foreign, "not the graph of this export"),
                         (bare, "no config.json")):
        work.mkdir()
        _embed_refused(capsys, work, ["--model", str(folder)], what)
        assert sorted(p.name for p in work.iterdir()) == ["in.txt"]
        shutil.rmtree(work)
    # an export given to the torch runtime
    text = tmp_path / "t.txt"
    text.write_text("the cat\n")
    err = _one_line(capsys, ["embed", str(text), str(tmp_path / "o.h5"), "--model", str(exports["allennlp"])])
    assert "is an ONNX export" in err and "--runtime onnxruntime" in err
    assert not (tmp_path / "o.h5").exists()


def test_export_without_onnx_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import fails
    err = _one_line(capsys, ["export", "--format", "onnx", str(tmp_path / "out"), *MODELS["allennlp"]])
    assert "needs the onnx package" in err and "pyelmo[onnx]" in err
    assert not list(tmp_path.iterdir())


def test_without_onnxruntime_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    work = tmp_path / "w"
    work.mkdir()
    _embed_refused(capsys, work, MODELS["allennlp"], "needs the onnxruntime package")
    assert sorted(p.name for p in work.iterdir()) == ["in.txt"]
