"""What task training keeps: the --train-fraction subset, the mix penalty, the best dev epoch, and the biLM
context of the saved model (tiny data, seconds each)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from pyelmo.tasks import train as task_train
from pyelmo.tasks.data import read_classify
from pyelmo.tasks.runner import TaskRunner
from pyelmo.tasks.saved import load_task

from test_tasks import _train, data  # noqa: F401  (the fixture)


@pytest.fixture
def recorded(monkeypatch) -> list[dict]:
    """Each dev evaluation during training: the model's weights and its predictions then."""
    evaluations: list[dict] = []
    evaluate = TaskRunner.evaluate

    def recording(self, examples, desc=""):
        evaluations.append({"state": {k: v.clone() for k, v in self.model.state_dict().items()},
                            "predictions": self.predict(examples)})
        return evaluate(self, examples, desc)

    monkeypatch.setattr(TaskRunner, "evaluate", recording)
    return evaluations


def _scripted_scores(monkeypatch, scores: list[float]) -> None:
    """The dev score of epoch i is ``scores[i]`` (whatever the model predicts)."""
    sequence = iter(scores)
    monkeypatch.setattr(TaskRunner, "score", lambda self, metrics: next(sequence))


def _same_predictions(got: list, want: list) -> None:
    assert [label for label, _ in got] == [label for label, _ in want]
    np.testing.assert_allclose([p for _, p in got], [p for _, p in want], rtol=0, atol=1e-6)


def _subset_lines(path: str, fraction: float) -> list[int]:
    return [e.line for e in task_train._subsample(read_classify(path), fraction)]


def test_train_fraction_subset_is_fixed_by_the_data(data, monkeypatch):  # noqa: F811
    """The same examples for every seed and every process (a function of the data alone)."""
    path = str(data / "train.tsv")
    random.seed(1)
    first = _subset_lines(path, 0.25)
    random.seed(2)
    torch.manual_seed(2)
    assert _subset_lines(path, 0.25) == first and len(first) == 15  # 25% of 60
    assert len(set(first)) == 15 and first != list(range(1, 16))  # spread over the file, not its head
    code = ("import random, sys; random.seed(7); from pyelmo.tasks.data import read_classify;"
            "from pyelmo.tasks.train import _subsample;"
            "print([e.line for e in _subsample(read_classify(sys.argv[1]), 0.25)])")
    other = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "123", "PYTHONPATH": os.pathsep.join(sys.path)})
    assert json.loads(other.stdout) == first

    trained_on = []
    fit = task_train._fit
    monkeypatch.setattr(task_train, "_fit", lambda runner, train, *a: trained_on.append(train) or fit(runner, train, *a))
    _train(data, "classify", out="seed1", features="static", max_epochs=1, train_fraction=0.25, seed=1)
    _train(data, "classify", out="seed2", features="static", max_epochs=1, train_fraction=0.25, seed=2)
    assert [e.line for e in trained_on[0]] == [e.line for e in trained_on[1]] == first


@pytest.mark.parametrize("mix_l2", [0.0, 50.0])
def test_the_mix_penalty_reaches_the_training_loss(data, monkeypatch, mix_l2):  # noqa: F811
    """With a large --mix-l2 the learned mix weights stay near 0; without it the data move them."""
    _scripted_scores(monkeypatch, [10, 20, 30])  # the last epoch is kept (a perfect 100 would stop training)
    out = _train(data, "classify", out=f"l2-{mix_l2}", features="elmo", max_epochs=3, mix_l2=mix_l2, seed=3)
    w = load_task(out, progress=False).model.mixes[0].scalar_parameters.detach()
    if mix_l2:
        assert w.abs().max() < 0.02, w
    else:
        assert w.abs().max() > 0.1, w


def test_the_best_dev_epoch_is_saved_not_the_last(data, monkeypatch, recorded):  # noqa: F811
    _scripted_scores(monkeypatch, [20, 90, 10, 30])
    out = _train(data, "classify", features="static+elmo", max_epochs=4, patience=10)
    saved = json.loads((out / "config.json").read_text())["training"]
    assert saved["best_dev"] == 90 and len(saved["history"]) == len(recorded) == 4
    runner = load_task(out, progress=False)
    state = runner.model.state_dict()
    for name, value in recorded[1]["state"].items():  # epoch 2's weights, exactly
        assert torch.equal(state[name], value), name
    assert any(not torch.equal(state[n], v) for n, v in recorded[3]["state"].items())  # not the last epoch's
    dev = read_classify(data / "dev.tsv")
    _same_predictions(runner.predict(dev), recorded[1]["predictions"])


@pytest.mark.parametrize("context", ["sentence", "line"])
def test_a_reloaded_model_predicts_as_in_training(data, monkeypatch, recorded, context):  # noqa: F811
    """Examples of several sentences: the saved model reads its biLM layers in the context it was trained
    with (``--bilm-context``), so its predictions equal those at its best dev evaluation in training."""
    for name in ("train", "dev"):
        rows = (data / f"{name}.tsv").read_text().splitlines()
        (data / f"{name}.tsv").write_text("".join(f"{r} . It was fine . The end !\n" for r in rows))
    _scripted_scores(monkeypatch, [100.0])
    out = _train(data, "classify", features="elmo", max_epochs=1, bilm_context=context)
    runner = load_task(out, progress=False)
    assert runner.cache.context == context
    dev = read_classify(data / "dev.tsv")
    _same_predictions(runner.predict(dev), recorded[0]["predictions"])
