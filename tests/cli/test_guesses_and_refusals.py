"""What a new user meets: small files trained on (format guesses refuse only on strong evidence), the
wrong kind of model folder named for what it is, argparse errors on one line, ``--version``, and
what an interrupted ``embed`` keeps (docs/RELIABILITY.md, "Every guess and every refusal")."""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest

from pyelmo.cli import main
from pyelmo.errors import InputError
from pyelmo.tasks.data import read_classify, read_tagged
from pyelmo.tasks.kind import task_kind
from taskdata import BILM_ARGS, OPTIONS, WEIGHTS, write_task_data

POS_DEV = "The\tDT\nbank\tNN\nraised\tVBD\nits\tPRP$\nrates\tNNS\n.\t.\n\n" \
          "She\tPRP\nsat\tVBD\non\tIN\nthe\tDT\nriver\tNN\nbank\tNN\n.\t.\n"
POS_TRAIN = POS_DEV + "\n" + "The\tDT\nriver\tNN\nrose\tVBD\n.\t.\n\nShe\tPRP\nsaw\tVBD\nits\tPRP$\nbanks\tNNS\n.\t.\n"


@pytest.fixture
def data(tmp_path) -> Path:
    write_task_data(tmp_path)
    return tmp_path


def _one_line_error(capsys, argv, rc=1) -> str:
    assert main(argv) == rc
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- item 1: guesses refuse only on strong evidence -----------------------------------------------
def test_a_two_sentence_pos_dev_file_trains(data, capsys):
    """13 tokens, 8 different tags: a short POS file, trained on with one warning, not refused."""
    (data / "pos-train.conll").write_text(POS_TRAIN)
    (data / "pos-dev.conll").write_text(POS_DEV)
    with pytest.warns(UserWarning, match=r"pos-dev.conll: 8 different tags and 11 different tokens in 13 lines"):
        rc = main(["task", "train", "tag", "--train", str(data / "pos-train.conll"), "--dev", str(data / "pos-dev.conll"),
                   "--out", str(data / "pos"), "--features", "static", "--static-vectors", str(data / "vec.txt"),
                   "--hidden", "8", "--max-epochs", "1", "--min-steps", "0", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert json.loads((data / "pos" / "config.json").read_text())["kind"] == "tag"


# a classify file read as tag: its "tags" (the texts) all differ, its "tokens" (the labels) repeat
SWAPPED_TAGS = "".join(f"{'pos' if i % 2 else 'neg'}\tthe film number {i}\n" for i in range(12))
CLASSIFY_SMALL = "".join(f"intent{i}\tplease do thing {i}\n" for i in range(12))  # 12 labels, 12 texts


@pytest.mark.parametrize("kind,content,strong", [
    ("tag", POS_DEV, False),                           # many tags, but the tokens do not repeat
    ("tag", SWAPPED_TAGS, True),                       # many tags and the tokens repeat: columns swapped
    ("tag", "pos\tthe film\n", None),                  # one line: too little to guess anything
    ("classify", CLASSIFY_SMALL, False),               # many labels, many texts: an intent set, say
    ("classify", "".join(f"the film number {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(12)), True),
    ("classify", "good\tB-P\nfilm\tO\n\nbad\tB-N\n", False),  # CoNLL-like, 3 examples: a warning
    ("classify", "good\tB-P\nfilm\tO\n\nbad\tB-N\nthe\tO\nfilm\tO\n\n" * 4, True),  # 20 examples: refused
    ("tag", "".join(f"w{i}\t{'NN' if i % 3 else 'VB'}\n" for i in range(60)), False),   # one 60-line sentence
    ("tag", "".join(f"w{i}\t{'NN' if i % 3 else 'VB'}\n" for i in range(200)), True),   # one 200-line sentence
])
def test_guesses_are_strong_only_with_enough_evidence(tmp_path, kind, content, strong):
    path = tmp_path / "f.txt"
    path.write_text(content)
    examples = read_classify(path) if kind == "classify" else read_tagged(path)
    found = [s for s, _ in task_kind(kind).layout_guesses(examples, path)]
    assert (max(found) if found else None) is strong
    if strong:
        with pytest.raises(InputError, match="--trust-format"):
            task_kind(kind).check(examples, path, training=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task_kind(kind).check(examples, path, training=False, trust_format=True)  # never refused with the flag
    assert len(caught) == len(found)


@pytest.mark.filterwarnings("ignore:.*seems not to be NE tag")  # seqeval on the swapped file's "tags"
def test_trust_format_goes_on_where_a_guess_refuses(data, capsys):
    train = data / "swapped.conll"
    train.write_text(SWAPPED_TAGS)
    argv = ["task", "train", "tag", "--train", str(train), "--dev", str(data / "dev.conll"), "--out",
            str(data / "t"), "--features", "static", "--static-vectors", str(data / "vec.txt"), "--hidden", "8",
            "--max-epochs", "1", "--min-steps", "0", "--quiet"]
    err = _one_line_error(capsys, argv)
    assert "is this a classify file?" in err and "go on with --trust-format" in err and not (data / "t").exists()
    with pytest.warns(UserWarning, match="is this a classify file"):
        assert main(argv + ["--trust-format"]) == 0
    assert (data / "t" / "config.json").is_file()


# -- item 2: the wrong kind of model, named for what it is --------------------------------------------
@pytest.fixture
def task_model(data) -> Path:
    from pyelmo.tasks.options import TrainOptions
    from pyelmo.tasks.train import train_task

    train_task("classify", data / "train.tsv", data / "dev.tsv", data / "task",
               TrainOptions(features="static", hidden=8, max_epochs=1, min_steps=0, progress=False),
               static_source=str(data / "vec.txt"))
    return data / "task"


def _bilm_forms(root: Path) -> dict[str, tuple[str, str]]:
    """Each form of a biLM (built from the reference model and the shipped one's config) and the words
    its message names."""
    from pyelmo.modelio.hub import shipped_folder

    forms = {}
    run = root / "run"  # a 'pyelmo train' run folder: run.json, model/
    shutil.copytree(shipped_folder("english"), run / "model")
    (run / "run.json").write_text("{}")
    forms["run"] = (str(run), "a biLM training run ('pyelmo train')")
    forms["model"] = (str(run / "model"), "a biLM model (made by 'pyelmo train'")
    forms["shipped name"] = ("english", "english is the name of a biLM")
    exported = root / "exported"  # what 'pyelmo export' writes
    exported.mkdir()
    for name, source in (("options.json", OPTIONS), ("weights.hdf5", WEIGHTS), ("softmax.hdf5", WEIGHTS)):
        shutil.copy(source, exported / name)
    forms["export"] = (str(exported), "a biLM exported by 'pyelmo export'")
    nlpl = root / "nlpl"  # a released model unpacked
    nlpl.mkdir()
    shutil.copy(OPTIONS, nlpl / "options.json")
    shutil.copy(WEIGHTS, nlpl / "model.hdf5")
    forms["released folder"] = (str(nlpl), "a biLM in the released bilm-tf format")
    forms["options file"] = (str(OPTIONS), "a biLM options file (released bilm-tf format)")
    forms["weight file"] = (str(WEIGHTS), "a biLM weight file (released bilm-tf format)")
    return forms


def test_a_bilm_where_a_task_model_is_expected_says_what_it_is(data, capsys):
    for name, (path, what) in _bilm_forms(data).items():
        for argv in (["task", "evaluate", path, "--test", str(data / "test.tsv")],
                     ["task", "predict", path, str(data / "test.tsv"), str(data / "out.tsv")]):
            err = _one_line_error(capsys, argv)
            assert what in err and "not a task model: train one with 'pyelmo task train" in err, (name, err)
            assert re.search(r"--(model|options-file|weight-file) \S", err), err
    assert not (data / "out.tsv").exists()


def test_a_task_model_where_a_bilm_is_expected_says_what_it_is(data, task_model, capsys):
    text = data / "s.txt"
    text.write_text("the film\n")
    for argv in (["embed", str(text), str(data / "o.h5")], ["perplexity", str(text)], ["predict", "the ___ ."],
                 ["export", str(data / "ex")],
                 ["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
                  "--out", str(data / "t2")]):
        err = _one_line_error(capsys, argv + ["--model", str(task_model)])
        assert "is a task model ('pyelmo task train'), not a biLM" in err, err


# -- item 7: smaller frictions -------------------------------------------------------------------
def test_a_folder_given_as_a_data_file_is_called_a_folder(data, capsys):
    for kind, dev in (("classify", "dev.tsv"), ("tag", "dev.conll")):
        err = _one_line_error(capsys, ["task", "train", kind, "--train", str(data), "--dev", str(data / dev),
                                       "--out", str(data / "never"), *BILM_ARGS])
        assert f"data file is a directory, expected a file: {data}" in err, err


@pytest.mark.parametrize("argv,message", [
    (["embed", "in.txt", "out.h5", "--precision", "int4"], "pyelmo embed: error: argument --precision: invalid "
                                                           "choice: 'int4'"),
    (["task", "train", "classify"], "pyelmo task train: error: the following arguments are required: --train"),
    (["export", "--format", "x", "out"], "pyelmo export: error: argument --format: invalid choice"),
    (["nosuchcommand"], "pyelmo: error: argument COMMAND: invalid choice: 'nosuchcommand'"),
])
def test_usage_errors_are_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and err.startswith(message), err
    assert err.endswith("--help')")


def test_version(capsys):
    from pyelmo import __version__

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"pyelmo {__version__}"


def test_an_interrupted_embed_says_how_much_is_kept(tmp_path, monkeypatch, capsys):
    from pyelmo.embedding import parts, store

    text = tmp_path / "in.txt"
    text.write_text("".join(f"the film number {i}\n" for i in range(10)))
    args = ["--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS), "--no-progress"]
    monkeypatch.setattr(store, "SEGMENT_LINES", 4)
    write = parts.Parts.write

    def write_then_stop(self, segment, items):
        if segment == stop_at:
            raise KeyboardInterrupt
        write(self, segment, items)

    monkeypatch.setattr(parts.Parts, "write", write_then_stop)
    for stop_at, kept in ((0, "no part of 4 lines was finished, so nothing is kept"),
                          (2, "2 finished part(s), the vectors of 8 lines, are kept")):
        assert main(["embed", str(text), str(tmp_path / "o.h5"), *args]) == 130
        err = capsys.readouterr().err.strip()
        assert kept in err and len(err.splitlines()) == 1, err
    stop_at = -1
    assert main(["embed", str(text), str(tmp_path / "o.h5"), "--resume", *args]) == 0


def test_choices_come_from_the_registries():
    """--kernels, pyelmo evaluate's tasks, --features and --bilm-context list what their registries hold."""
    from pyelmo.cli import build_parser
    from pyelmo.evaluation.registry import NAMES
    from pyelmo.runtime.rules import KERNEL_RULES
    from pyelmo.tasks import CONTEXTS, FEATURES

    def choices(*path):
        parser = build_parser()
        for name in path[:-1]:
            parser = next(a for a in parser._actions if a.dest in ("command", "task_command")).choices[name]
        return list(next(a for a in parser._actions if a.dest == path[-1]).choices)

    assert choices("embed", "kernels") == choices("env", "kernels") == list(KERNEL_RULES)
    assert choices("evaluate", "task") == [*NAMES, "all"]
    assert choices("task", "train", "features") == list(FEATURES)
    assert choices("task", "train", "bilm_context") == list(CONTEXTS)
