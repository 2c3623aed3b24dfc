"""scripts/model_acceptance.py: every acceptance figure of issue 13, on two tiny trained models."""

import importlib.util
import json
from pathlib import Path

import pytest

from pyelmo.training.trainer import train
from tinyconfig import tiny_train_config

ROOT = Path(__file__).resolve().parents[2]
BROWN = ROOT / "tests" / "data" / "evaluation" / "brown"


def _script():
    spec = importlib.util.spec_from_file_location("model_acceptance", ROOT / "scripts" / "model_acceptance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("acceptance")
    words = "the a bank river money boat stopped near deposited in I we sat on".split()
    for split, n in (("train", 80), ("valid", 6), ("valid-modern", 5)):
        (root / "corpus" / split).mkdir(parents=True)
        lines = [" ".join(words[(i * 5 + j * 3) % len(words)] for j in range(3 + i % 6)) + " ." for i in range(n)]
        (root / "corpus" / split / "part.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    baseline = train(tiny_train_config(train__max_steps=1), root / "a", data_dir=root / "corpus").model_dir
    candidate = train(tiny_train_config(), root / "b", data_dir=root / "corpus").model_dir
    return root, baseline, candidate


def test_acceptance_script_writes_every_figure(models, capsys):
    root, baseline, candidate = models
    out = root / "figures.json"
    assert _script().main([str(candidate), "--baseline", str(baseline), "--corpus", str(root / "corpus"),
                           "--max-sentences", "4", "--brown", str(BROWN), "--pos-train-sentences", "20",
                           "--pos-test-sentences", "10", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["same_vocabulary"] is True
    f = result["figures"]
    assert set(f) == {"senses", "perplexity_valid_modern", "perplexity_valid", "predict_river", "predict_money",
                      "folder_size", "export_round_trip", "pos_probe", "demo"}
    for name, figure in f.items():
        assert figure["source"], name
        assert {"baseline", "candidate"} <= set(figure), name
    for which in ("baseline", "candidate"):
        senses = f["senses"][which]
        assert set(senses["per_layer"]) == {"layer 0", "layer 1", "average"}  # the tiny model has one LSTM layer
        assert senses["per_layer"]["layer 0"] == pytest.approx(0.5)
        assert len(senses["examples"]) == 96 and sum(p["n"] for p in senses["by_place"].values()) == 96
        assert set(senses["pair_similarity"]) == {f"{a} sense, {b} place" for a in ("same", "different")
                                                  for b in ("same", "different")}
        assert len(senses["position_correlation"]) == 4
        closer = senses["other_sense_closer_in_index"]
        assert closer["right"][1] + closer["wrong"][1] == 96 and 0 <= closer["wrong"][0] <= closer["wrong"][1]
        assert f["perplexity_valid_modern"][which]["sentences"] == 4
        assert f["perplexity_valid"][which]["ppl"] > 1
        for key in ("predict_river", "predict_money"):
            assert len(f[key][which]["top10"]) == 10
            assert f[key][which]["ok"] == bool(f[key][which]["hits"])
        assert set(f["pos_probe"][which]["accuracy"]) == {"most_frequent_tag", "layer_0", "layer_1"}
        assert f["folder_size"][which]["mb"] > 0
        assert f["export_round_trip"][which]["max_abs_diff_layers"] == 0.0
        assert f["export_round_trip"][which]["max_abs_diff_softmax"] == 0.0
        assert f["demo"][which]["wall_s"] > 0
    assert "senses.tsv nearest-sense accuracy, layer 1" in printed and "pyelmo demo wall time" in printed


def test_acceptance_script_rejects_a_folder_without_a_model(tmp_path):
    with pytest.raises(SystemExit, match="not a model folder"):
        _script().main([str(tmp_path)])
