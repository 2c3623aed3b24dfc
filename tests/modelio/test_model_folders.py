"""Every folder pyelmo writes loads with ``--model DIR`` in every command that can use it: a training run
folder, its ``model/``, and the folder ``pyelmo export`` wrote; where a command cannot (no softmax), the
one-line error names the folders and the flag that work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.modelio.resolve import load
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.training.trainer import train
from tinyconfig import tiny_train_config

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"
WORDS = "the a bank river money boat stopped near deposited in I we sat on".split()
SENTENCE = "we sat on the river bank ."


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(run folder, its model/, the exported folder, a text file) for one tiny trained model."""
    root = tmp_path_factory.mktemp("folders")
    for split, n in (("train", 60), ("valid", 6)):
        (root / "corpus" / split).mkdir(parents=True)
        lines = [" ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(3 + i % 5)) + " ." for i in range(n)]
        (root / "corpus" / split / "part.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = root / "run"
    model_dir = train(tiny_train_config(), run, data_dir=root / "corpus").model_dir
    assert main(["export", "--model", str(model_dir), str(root / "exported")]) == 0
    return run, model_dir, root / "exported", root / "corpus" / "valid" / "part.txt"


def _cli(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _error(capsys, *argv: str) -> str:
    assert main(list(argv)) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_load_takes_the_run_folder_its_model_and_the_export(folders):
    run, model_dir, exported, _ = folders
    ids = batch_to_ids([SENTENCE.split(), ["a", "boat"]])
    with torch.no_grad():
        expected = load(model_dir)(ids).layers
        for folder in (run, exported):
            assert torch.equal(load(folder)(ids).layers, expected), folder


def test_embed_and_similarity_with_each_folder(folders, tmp_path, capsys):
    run, model_dir, exported, text = folders
    outputs = {}
    for name, folder in (("model", model_dir), ("run", run), ("exported", exported)):
        out = tmp_path / f"{name}.hdf5"
        _cli(capsys, "embed", str(text), str(out), "--model", str(folder), "--no-progress")
        with h5py.File(out, "r") as f:
            outputs[name] = f["0"][...]
        similarity = _cli(capsys, "similarity", "I deposited money in the bank .", SENTENCE, "--word", "bank",
                          "--model", str(folder))
        outputs[name + " similarity"] = similarity
    np.testing.assert_array_equal(outputs["run"], outputs["model"])
    np.testing.assert_array_equal(outputs["exported"], outputs["model"])
    assert outputs["exported similarity"] == outputs["run similarity"] == outputs["model similarity"]


def test_predict_perplexity_and_export_with_each_folder(folders, tmp_path, capsys):
    run, model_dir, exported, text = folders
    predictions = {_cli(capsys, "predict", "we sat on the river ___ .", "--model", str(f)) for f in
                   (model_dir, run, exported)}
    assert len(predictions) == 1
    scores = [json.loads(_cli(capsys, "perplexity", str(text), "--model", str(f), "--json")) for f in
              (model_dir, run, exported)]
    assert scores[0]["predictions"] > 0
    for score in scores[1:]:
        assert score == pytest.approx(scores[0], rel=1e-6)
    _cli(capsys, "export", "--model", str(exported), str(tmp_path / "again"))  # an export exports again
    with h5py.File(exported / "softmax.hdf5") as a, h5py.File(tmp_path / "again" / "softmax.hdf5") as b:
        np.testing.assert_array_equal(a["softmax/W"][...], b["softmax/W"][...])
    ids = batch_to_ids([SENTENCE.split()])
    with torch.no_grad():
        assert torch.equal(load(tmp_path / "again")(ids).layers, load(model_dir)(ids).layers)


def test_train_init_from_an_export_and_a_run_folder(folders, tmp_path, capsys):
    run, model_dir, exported, text = folders
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_train_config(train__max_steps=1)))
    for name, folder in (("from-export", exported), ("from-run", run)):
        _cli(capsys, "train", "--config", str(config), "--train", str(text), "--out", str(tmp_path / name),
             "--init-from", str(folder))
        assert (tmp_path / name / "model" / "vocab.txt").read_text() == (model_dir / "vocab.txt").read_text()


def test_task_train_and_the_service_with_an_export(folders, tmp_path, capsys):
    run, model_dir, exported, _ = folders
    data = tmp_path / "data.tsv"
    data.write_text("".join(f"{'water' if 'river' in s or 'boat' in s else 'land'}\t{s}\n" for s in
                            ["the river bank", "a boat", "we sat on the bank", "I deposited money",
                             "the boat stopped near the river", "money in the bank"]), encoding="utf-8")
    _cli(capsys, "task", "train", "classify", "--train", str(data), "--dev", str(data), "--out",
         str(tmp_path / "task"), "--model", str(exported), "--features", "elmo", "--max-epochs", "1",
         "--min-steps", "0", "--hidden", "8", "--quiet")
    err = _error(capsys, "embed", str(data), str(tmp_path / "x.hdf5"), "--model", str(tmp_path / "task"))
    assert "is a task model" in err and f"--model {exported.absolute()}" in err
    pytest.importorskip("fastapi")
    from pyelmo.serve.app import build_service

    service = build_service(str(exported), batching=False, cache_dir=tmp_path / "cache")
    try:
        assert service.predictor is not None  # the export's softmax gives the page its predictions
    finally:
        service.close()


def test_commands_that_need_a_softmax_name_what_works(folders, tmp_path, capsys):
    run, model_dir, _, text = folders
    nlpl = tmp_path / "nlpl"  # a released biLM in a folder: embeds, but has no softmax
    nlpl.mkdir()
    shutil.copy(REF / "options.json", nlpl / "options.json")
    shutil.copy(REF / "lm_weights.hdf5", nlpl / "model.hdf5")
    _cli(capsys, "embed", str(text), str(tmp_path / "nlpl.hdf5"), "--model", str(nlpl), "--no-progress")
    for argv in (["predict", "the ___ .", "--model", str(nlpl)], ["perplexity", str(text), "--model", "original"],
                 ["export", "--model", str(nlpl), str(tmp_path / "out")]):
        err = _error(capsys, *argv)
        assert "has no softmax" in err and "'pyelmo export'" in err and "RUN/model" in err, err
    assert not (tmp_path / "out").exists()
    stopped = tmp_path / "stopped"  # a run stopped before it wrote model/: its best/ and --resume work
    shutil.copytree(run, stopped)
    shutil.rmtree(stopped / "model")
    shutil.rmtree(stopped / "best", ignore_errors=True)
    err = _error(capsys, "perplexity", str(text), "--model", str(stopped))
    assert f"pyelmo train --resume --out {stopped}" in err and "best" not in err
    shutil.copytree(model_dir, stopped / "best")
    err = _error(capsys, "predict", "the ___ .", "--model", str(stopped))
    assert f"--model {stopped / 'best'}" in err and f"pyelmo train --resume --out {stopped}" in err
    err = _error(capsys, "embed", str(text), str(tmp_path / "s.hdf5"), "--model", str(stopped))
    assert f"--model {stopped / 'best'}" in err
