"""The registry of task kinds: the command line's choices and options come from it, a kind's own options are
refused with another kind, the mixes are Elmo's code, and older results read in percent."""

from __future__ import annotations

import pytest
import torch

from pyelmo.cli import build_parser, main
from pyelmo.tasks import kind as registry
from pyelmo.tasks.kind import KindOption, TaskKind, kind_names, task_kind

from test_tasks import BILM_ARGS, data  # noqa: F401  (the fixture)


def test_the_registry_holds_one_kind_per_module_of_tasks_kinds():
    from pathlib import Path

    import pyelmo.tasks.kinds as package

    modules = sorted(p.stem for p in Path(package.__path__[0]).glob("*.py") if p.stem != "__init__")
    assert sorted(kind_names()) == modules and kind_names()[:3] == ("classify", "tag", "qa")
    for name in kind_names():
        kind = task_kind(name)
        assert kind.name == name and kind.description and kind.predict_help and kind.extension
        assert kind.context in ("line", "sentence") and set(kind.defaults) == {"hidden", "batch_size", "lr", "dropout"}
    with pytest.raises(Exception, match="task kind must be one of classify, tag, qa.*, got 'regress'"):
        task_kind("regress")


def test_a_kinds_count_of_a_data_file_is_the_examples_it_reads(data, tmp_path):  # noqa: F811
    """'pyelmo task data build's manifest counts examples with the kind's own rule, by its own extension."""
    import json
    import random

    from test_tasks_qa import _squad

    (data / "train.json").write_text(json.dumps(_squad(random.Random(0), 3, "q")))
    for name in ("classify", "tag", "qa"):
        kind = task_kind(name)
        path = data / f"train.{kind.extension}"
        assert kind.count(path.read_text()) == len(kind.read(path)) > 1, name


class _Pairs(TaskKind):
    """A kind made up by the test: it is on the command line as soon as it is registered."""

    name, order = "pairs", 1000
    help, description = "pairs (TSV)", "a made-up kind"
    defaults = {"hidden": 8, "batch_size": 4, "lr": 1e-3, "dropout": 0.1}
    options = (KindOption("--pretokenized", "pretokenized", "shared with classify"),
               KindOption("--pair-sep", "pair_sep", "a made-up option", str, "S"))


def test_a_registered_kind_is_a_choice_with_its_options(monkeypatch):
    monkeypatch.setattr(registry, "_KINDS", {**registry._KINDS})
    registry.register(_Pairs())
    parser = build_parser()
    args = parser.parse_args(["task", "train", "pairs", "--train", "t", "--dev", "d", "--out", "o",
                              "--pretokenized", "--pair-sep", "|"])
    assert args.kind == "pairs" and args.pretokenized and args.pair_sep == "|"
    owners = args.kind_options
    assert owners["pretokenized"] == ["classify", "pairs"] and owners["pair_sep"] == ["pairs"]
    assert owners["max_answer_tokens"] == ["qa"]
    assert "pairs:    a made-up kind" in parser._subparsers._group_actions[0].choices["task"].description


@pytest.mark.parametrize("kind, option", [("tag", ["--pretokenized"]), ("classify", ["--max-answer-tokens", "5"]),
                                          ("qa", ["--pretokenized"])])
def test_an_option_of_another_kind_is_refused_before_any_work(data, capsys, kind, option):  # noqa: F811
    rc = main(["task", "train", kind, "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
               "--out", str(data / "never"), *BILM_ARGS, *option, "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "is an option of" in err and f"not of {kind}" in err, err
    assert not (data / "never").exists()


def test_task_models_mix_with_elmo_s_scalar_mixes_and_dropout(tiny_model):
    """The task model's mixes are the ``ScalarMixes`` ``Elmo`` holds: in training mode, the mix then dropout
    (the same random mask for the same seed as ``nn.Dropout`` after the mix)."""
    from pyelmo.embedding.elmo import Elmo
    from pyelmo.modeling.mix import ScalarMixes
    from pyelmo.tasks.model import Classifier, ModelConfig

    model = Classifier(ModelConfig(kind="classify", n_labels=2, elmo_layers=3, elmo_dim=4, elmo_dropout=0.5))
    assert isinstance(model.mixes, ScalarMixes) and isinstance(Elmo(tiny_model).scalar_mixes, ScalarMixes)
    with torch.no_grad():
        model.mixes[0].scalar_parameters.copy_(torch.tensor([0.3, -1.0, 0.5]))
    layers, mask = torch.randn(2, 3, 5, 4), torch.ones(2, 5, dtype=torch.bool)
    model.train()
    torch.manual_seed(3)
    ours = model.elmo(layers, 0, mask)
    torch.manual_seed(3)
    expected = torch.nn.Dropout(0.5)(model.mixes[0](layers.unbind(1), mask))
    assert torch.equal(ours, expected) and (ours == 0).any()
    model.eval()
    assert torch.equal(model.elmo(layers, 0, mask), model.mixes[0](layers.unbind(1), mask))


def test_results_written_on_the_old_scale_read_in_percent():
    from pyelmo.tasks.metrics import SCALE, in_percent

    old = {"accuracy": 0.9, "macro_f1": 0.85, "span_f1": None, "n": 20, "f1": 71.5, "exact_match": 60.0}
    assert in_percent(old, None) == {"accuracy": 90.0, "macro_f1": 85.0, "span_f1": None, "n": 20, "f1": 71.5,
                                     "exact_match": 60.0}
    assert in_percent({"accuracy": 90.0}, SCALE) == {"accuracy": 90.0} and SCALE == "percent"


def test_train_json_says_the_scale_and_the_score_is_in_percent(data, capsys):  # noqa: F811
    import json

    out = data / "m"
    assert main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
                 "--out", str(out), "--features", "static", "--static-vectors", str(data / "vec.txt"),
                 "--hidden", "8", "--max-epochs", "2", "--min-steps", "0", "--quiet", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "config.json").read_text())["training"]
    assert printed["scale"] == saved["scale"] == "percent" and printed["kind"] == "classify"
    assert printed["best_dev"] == saved["best_dev"] == max(h["dev"]["accuracy"] for h in saved["history"])
    assert 1 < printed["best_dev"] <= 100  # 20 dev examples: a fraction would be at most 1
