"""Task models saved before task kinds became a registry (``fixtures/task-models``, made by its ``make.py``)
load with today's code and predict what they predicted then; their metrics are now in percent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pyelmo.tasks.kind import task_kind
from pyelmo.tasks.options import BiLMSource
from pyelmo.tasks.saved import load_task

from taskdata import OPTIONS, WEIGHTS

SAVED = Path(__file__).parents[1] / "fixtures" / "task-models"
DATA = {"classify": "test.tsv", "tag": "test.conll", "qa": "test.json"}
#: The metrics the old code reported on 0-1 (qa's were already in percent).
FRACTIONS = {"accuracy", "macro_f1", "span_f1"}


@pytest.mark.parametrize("kind", ["classify", "tag", "qa"])
def test_a_task_model_saved_by_the_old_code_predicts_as_it_did(kind):
    expected = json.loads((SAVED / "expected.json").read_text())[kind]
    runner = load_task(SAVED / kind, BiLMSource(str(OPTIONS), str(WEIGHTS)), progress=False)
    test = task_kind(kind).read(SAVED / DATA[kind])
    predictions = json.loads(json.dumps(runner.predict(test)))  # tuples as lists, as stored
    if kind == "classify":
        assert [p[0] for p in predictions] == [p[0] for p in expected["predictions"]]
        np.testing.assert_allclose([p[1] for p in predictions], [p[1] for p in expected["predictions"]],
                                   rtol=0, atol=1e-6)
    else:
        assert predictions == expected["predictions"]
    metrics = runner.evaluate(test)
    assert set(metrics) == set(expected["metrics"])
    for key, old in expected["metrics"].items():
        scale = 100 if key in FRACTIONS and old is not None else 1
        assert metrics[key] == pytest.approx(old * scale if old is not None else None), key


def test_the_biLM_is_recorded_as_the_resolver_reads_it(tmp_path, monkeypatch):
    """A task model's config.json keeps a name or URL as given and a local model as absolute paths; what
    is which is the resolver's reading (a folder called ``english`` here does not shadow the shipped model)."""
    import shutil

    from pyelmo.modelio.hub import shipped_folder

    monkeypatch.chdir(tmp_path)
    shutil.copytree(shipped_folder("english"), tmp_path / "english")
    shutil.copytree(shipped_folder("english"), tmp_path / "mine")
    for kept in ("english", "original", "https://example.org/m/elmo_weights.hdf5"):
        assert BiLMSource(kept).absolute() == BiLMSource(kept)
        assert BiLMSource(kept).resolved().kind in ("shipped", "released", "url")
    assert BiLMSource("mine").absolute() == BiLMSource(str(tmp_path / "mine"))
    shutil.copy(OPTIONS, "o.json")
    shutil.copy(WEIGHTS, "w.hdf5")
    assert BiLMSource("o.json", "w.hdf5").absolute() == BiLMSource(str(tmp_path / "o.json"), str(tmp_path / "w.hdf5"))
    assert BiLMSource().absolute() == BiLMSource()  # no model: the default, resolved where it is used
