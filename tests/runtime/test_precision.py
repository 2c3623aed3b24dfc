"""The precision registry (``pyelmo.runtime.precision``): the CLI's choices and checks come from it, each
precision has one spelling everywhere, and files written with the old spellings still read."""

from __future__ import annotations

import argparse
import inspect
import json

import h5py
import pytest

from pyelmo.cli import build_parser, main
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import ConfigError, InputError
from pyelmo.runtime import precision
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import ExecutionPlan


def _precision_options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every command's --precision, by the command's prog."""
    found = {}
    for action in parser._actions:
        if "--precision" in action.option_strings:
            found[parser.prog] = action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(_precision_options(sub))
    return found


def test_every_commands_precision_choices_are_the_registry():
    found = _precision_options(build_parser())
    assert {"pyelmo embed", "pyelmo env", "pyelmo serve", "pyelmo task train", "pyelmo task evaluate"} <= set(found)
    for prog, action in found.items():
        tasks = prog.startswith("pyelmo task")
        assert tuple(action.choices) == precision.names(tasks), prog
        assert all(f"{name}:" in action.help for name in action.choices), prog  # each one's help line
    assert "bfloat16" in precision.names() and "bfloat16" not in precision.names(tasks=True)


@pytest.mark.parametrize("argv", [["embed", "in.txt", "out.h5", "--precision", "int4"],
                                  ["task", "evaluate", "model", "--precision", "bfloat16"],
                                  ["embed", "in.txt", "out.h5", "--precision", "int8", "--bf16"],
                                  ["embed", "in.txt", "out.h5", "--bf16", "--precision", "float32"]])
def test_a_bad_or_second_precision_is_a_one_line_usage_error(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert "precision" in err and "Traceback" not in err and not (tmp_path / "out.h5").exists()


def test_bf16_is_bfloat16_from_argument_parsing_on():
    parser = build_parser()
    for argv in (["--bf16"], ["--bf16", "--precision", "bfloat16"], ["--precision", "bfloat16", "--bf16"]):
        args = parser.parse_args(["embed", "in.txt", "out.h5", *argv])
        assert args.precision == "bfloat16" and not hasattr(args, "bf16")
    assert parser.parse_args(["env"]).precision is None  # unset: the exact default


def test_the_library_takes_one_precision_argument():
    for function in (ElmoEmbedder.__init__, RunOptions.inference, ExecutionPlan.for_machine):
        parameters = inspect.signature(function).parameters
        assert "precision" in parameters and "bf16" not in parameters, function
    with pytest.raises(ConfigError, match=f"one of {', '.join(precision.names())}, got 'int4'"):
        ExecutionPlan.for_machine(precision="int4")
    with pytest.raises(ConfigError, match="precision must be one of"):
        ExecutionPlan(precision="float16")


def test_old_spellings_read_as_the_one_spelling():
    for name, spec in precision.REGISTRY.items():
        assert precision.get(name) is spec and precision.spelled(name) == name
        for old in spec.spellings:
            assert precision.get(old) is spec and precision.spelled(old) == name
    assert precision.get("torch.float32") is precision.FLOAT32 and precision.get(None) is precision.DEFAULT
    assert precision.spelled("torch.bfloat16") == "bfloat16" and precision.spelled("nonsense") == "nonsense"
    assert ExecutionPlan(precision="torch.float32") == ExecutionPlan(precision="float32")
    assert ExecutionPlan(precision="torch.float32").precision == "float32"
    with pytest.raises(ValueError, match="registered already"):
        precision.register(precision.Precision("float32", "again"))
    with pytest.raises(ValueError, match="registered already"):
        precision.register(precision.Precision("float64", "an old spelling taken", spellings=("torch.float32",)))
    assert "float64" not in precision.REGISTRY


def test_cache_parts_as_before():
    rule = precision.Quantization(5)
    assert precision.FLOAT32.cache_part(rule) == "" and precision.BFLOAT16.cache_part(rule) == "bfloat16"
    assert precision.INT8.cache_part(rule) == "int8:5" and precision.INT8.cache_part() == f"int8:{2**18}"
    assert ExecutionPlan.for_machine(precision="int8", quantization=precision.Quantization(7)).vectors_key == "int8:7"
    assert ExecutionPlan.for_machine().vectors_key == ""


def test_one_spelling_in_hdf5_and_the_run_options(allennlp_reference, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("the bank .\n")
    args = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights),
            "--no-progress"]
    assert main(["embed", str(text), str(tmp_path / "a.h5"), *args]) == 0
    with h5py.File(tmp_path / "a.h5") as f:
        assert f.attrs["precision"] == "float32" and "precision=float32 " in f.attrs["execution_plan"]
    assert RunOptions().precision == "float32" and RunOptions.inference(precision="int8").precision == "int8"


def test_resume_reads_a_run_written_with_the_old_spelling(allennlp_reference, tmp_path, monkeypatch, capsys):
    """The manifest of a run interrupted before (precision ``torch.float32``) still resumes."""
    from pyelmo.embedding import parts

    text, out = tmp_path / "in.txt", tmp_path / "out.h5"
    text.write_text("the bank .\nthe river bank .\n")
    args = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights),
            "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(parts.Parts, "join_into", lambda self, filename: (_ for _ in ()).throw(KeyboardInterrupt))
        assert main(["embed", str(text), str(out), *args]) == 130
    manifest = tmp_path / ".out.h5.parts" / "run.json"
    run = json.loads(manifest.read_text())
    assert run["settings"]["precision"] == "float32"
    run["settings"]["precision"] = "torch.float32"  # as earlier versions wrote it
    manifest.write_text(json.dumps(run))
    capsys.readouterr()
    assert main(["embed", str(text), str(out), "--resume", *args]) == 0, capsys.readouterr().err
    with h5py.File(out) as f:
        assert f.attrs["precision"] == "float32"


def test_task_config_with_the_old_spelling_loads(tmp_path):
    from taskdata import OPTIONS, WEIGHTS, write_task_data

    from pyelmo.tasks.data import read_classify
    from pyelmo.tasks.options import BiLMSource, TrainOptions, features_plan
    from pyelmo.tasks.saved import load_task
    from pyelmo.tasks.train import train_task

    write_task_data(tmp_path)
    options = TrainOptions(features="static+elmo", hidden=8, batch_size=8, max_epochs=1, min_steps=0, progress=False)
    train_task("classify", tmp_path / "train.tsv", tmp_path / "dev.tsv", tmp_path / "model", options,
               BiLMSource(str(OPTIONS), str(WEIGHTS)), str(tmp_path / "vec.txt"))
    config = tmp_path / "model" / "config.json"
    saved = json.loads(config.read_text())
    assert saved["options"]["precision"] == "float32" and saved["options"]["int8_min_weight"] is None
    test = read_classify(tmp_path / "test.tsv")
    before = load_task(tmp_path / "model", progress=False).predict(test)
    saved["options"]["precision"] = "torch.float32"  # as a file written before might say
    config.write_text(json.dumps(saved))
    assert load_task(tmp_path / "model", progress=False).predict(test) == before
    assert features_plan("torch.float32").precision == "float32"
    with pytest.raises(InputError, match="float32, int8"):
        features_plan("bfloat16")  # task models take the precisions registered for them only


def test_task_options_record_the_quantization_rule_as_int8_min_weight():
    """config.json keeps its ``options.int8_min_weight`` (null: the default rule), last as before."""
    from pyelmo.tasks.options import TrainOptions

    assert TrainOptions().saved()["int8_min_weight"] is None
    saved = TrainOptions(precision="int8", quantization=precision.Quantization(0)).saved()
    assert list(saved)[-2:] == ["precision", "int8_min_weight"] and saved["int8_min_weight"] == 0
    assert "quantization" not in saved and "progress" not in saved and "cache_dir" not in saved
    assert TrainOptions(precision="int8", quantization=precision.Quantization(0)).plan().quantization.min_weight == 0
