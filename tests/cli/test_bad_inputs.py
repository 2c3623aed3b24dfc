"""Bad-input battery: every command and public loader, fed broken input, must fail on one line with
exit 1 (naming the problem, and the line for text input) and leave no partial output - or handle the
input in the documented way (docs/RELIABILITY.md lists every case with its test).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from pyelmo.cli import main
from pyelmo.errors import InputError, WeightFileError
from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5, load_options, save_pretrained
from tinyconfig import tiny_train_config

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"
OPTIONS, WEIGHTS = REF / "options.json", REF / "lm_weights.hdf5"
TINY_TRAIN = tiny_train_config()
SENTENCES = "the cat sees the dog .\nthe big dog likes the old cat .\na bird finds a fish .\n" * 10


class Payload:
    """A pickle that, if ever unpickled, creates the file ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (exec, (f"import pathlib; pathlib.Path({self.path!r}).write_text('pwned')",))


# -- fixtures: a released-format model, a native one, a trained one ----------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from pyelmo.training.trainer import train

    root = tmp_path_factory.mktemp("models")
    native = save_pretrained(load_bilm_hdf5(OPTIONS, WEIGHTS), root / "native")
    (root / "text.txt").write_text(SENTENCES, encoding="utf-8")
    trained = train(json.loads(json.dumps(TINY_TRAIN)), root / "run", train_files=[root / "text.txt"],
                    progress=False).model_dir
    return {"native": native, "trained": trained, "root": root}


class Ctx:
    """Input files under tmp/in, outputs under tmp/out (checked to be empty after each failure)."""

    def __init__(self, tmp: Path, models: dict) -> None:
        self.inp_dir, self.out = tmp / "in", tmp / "out"
        self.inp_dir.mkdir()
        self.out.mkdir()
        self.native, self.trained, self.root = models["native"], models["trained"], models["root"]

    def inp(self, name: str, data: bytes | str) -> str:
        path = self.inp_dir / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        return str(path)

    def o(self, name: str = "out.h5") -> str:
        return str(self.out / name)

    def copy_native(self, name: str = "m") -> Path:
        return Path(shutil.copytree(self.native, self.inp_dir / name))

    def copy_trained(self, name: str = "t") -> Path:
        return Path(shutil.copytree(self.trained, self.inp_dir / name))

    def options(self, name: str, change) -> str:
        options = json.loads(OPTIONS.read_text())
        change(options)
        return self.inp(name, json.dumps(options))

    def weights(self, name: str, dataset: str, value: float) -> str:
        path = self.inp_dir / name
        shutil.copyfile(WEIGHTS, path)
        with h5py.File(path, "r+") as f:
            data = f[dataset][...]
            data.flat[0] = value
            f[dataset][...] = data
        return str(path)


@pytest.fixture
def ctx(tmp_path, models):
    return Ctx(tmp_path, models)


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


REL = ["--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS)]


def embed(ctx: Ctx, text, *extra: str) -> list[str]:
    return ["embed", ctx.inp("in.txt", text), ctx.o(), "--no-progress", *REL, *extra]


def _set(section: str, key: str, value):
    def change(options):
        options[section][key] = value
    return change


def _pickle_file(ctx: Ctx, name: str) -> str:
    return ctx.inp(name, pickle.dumps({"weights": Payload(ctx.root / "PWNED")}))


def _native_with(ctx: Ctx, what: str) -> str:
    model = ctx.copy_native()
    weights = model / "model.safetensors"
    if what == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif what == "garbage header":
        weights.write_bytes(b"\xff" * 8 + weights.read_bytes()[8:])
    elif what == "empty":
        weights.write_bytes(b"")
    elif what == "pickle":
        weights.write_bytes(pickle.dumps({"w": Payload(ctx.root / "PWNED")}))
    elif what == "nan":
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(weights))
        name = next(iter(sorted(tensors)))
        tensors[name].view(-1)[0] = float("nan")
        save_file(tensors, str(weights))
    elif what == "config wrong type":
        config = json.loads((model / "config.json").read_text())
        config["options"]["lstm"]["dim"] = "large"
        (model / "config.json").write_text(json.dumps(config))
    elif what == "config negative":
        config = json.loads((model / "config.json").read_text())
        config["options"]["lstm"]["n_layers"] = -1
        (model / "config.json").write_text(json.dumps(config))
    elif what == "config contradicts":
        config = json.loads((model / "config.json").read_text())
        config["options"]["lstm"]["dim"] *= 2
        (model / "config.json").write_text(json.dumps(config))
    elif what == "config not json":
        (model / "config.json").write_bytes(b"\x00\x01{")
    elif what == "no config":
        (model / "config.json").unlink()
    return str(model)


def _truncated(path: Path, keep: float) -> bytes:
    data = path.read_bytes()
    return data[: int(len(data) * keep)]


def _corrupt(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    for i in range(2048, len(data), 61):
        data[i] ^= 0x5A
    return bytes(data)


# -- the failing cases: (id, argv builder, message regex) ---------------------------------------
ERROR_CASES = [
    # embed: text input
    ("embed-blank-line", lambda c: embed(c, "a b\n\nc d\n"), r"line 2 is blank"),
    ("embed-whitespace-line", lambda c: embed(c, "a b\nc\n \t \u3000\n"), r"line 3 is blank"),
    ("embed-invalid-utf8", lambda c: embed(c, b"ok line\nbad \xff\xfe line\n"), r"line 2 is not UTF-8 text"),
    ("embed-invalid-utf8-truncated-seq", lambda c: embed(c, b"a\nb\ncaf\xc3\n"), r"line 3 is not UTF-8 text"),
    ("embed-missing-input", lambda c: ["embed", str(c.inp_dir / "nope.txt"), c.o(), *REL], r"input file not found"),
    ("embed-directory-input", lambda c: ["embed", str(c.inp_dir), c.o(), *REL], r"input file is a directory"),
    ("embed-output-missing-folder", lambda c: ["embed", c.inp("i.txt", "a\n"), str(c.out / "no" / "o.h5"), *REL],
     r"output folder does not exist"),
    ("embed-output-is-directory", lambda c: ["embed", c.inp("i.txt", "a\n"), str(c.out), *REL],
     r"output path is a directory"),
    ("embed-sentence-key-slash", lambda c: embed(c, "a b\nand / or\n", "--use-sentence-keys"), r"line 2: .*'/'"),
    ("embed-batch-size-0", lambda c: embed(c, "a\n", "--batch-size", "0"), r"batch size must be at least 1"),
    ("embed-max-tokens-negative", lambda c: embed(c, "a\n", "--max-tokens", "-5"), r"max tokens must be at least 1"),
    ("embed-cuda-graphs-on-cpu", lambda c: embed(c, "a\n", "--steps", "graphs"), r"CUDA graphs run on a CUDA device"),
    # embed: model arguments and weight files
    ("embed-options-without-weights", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                                 str(OPTIONS)], r"go together"),
    ("embed-model-and-options", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", str(c.native), *REL],
     r"either --model or"),
    ("embed-model-is-a-file", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", str(OPTIONS)],
     r"is a file"),
    ("embed-model-dir-missing", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", str(c.inp_dir / "x")],
     r"model directory not found"),
    ("options-missing", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(c.inp_dir / "o.json"),
                                   "--weight-file", str(WEIGHTS)], r"options file not found"),
    ("options-is-directory", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(c.inp_dir),
                                        "--weight-file", str(WEIGHTS)], r"options file is a directory"),
    ("options-empty-file", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", c.inp("o.json", ""),
                                      "--weight-file", str(WEIGHTS)], r"not valid JSON"),
    ("options-invalid-utf8", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                        c.inp("o.json", b'{"lstm": "\xff"}'), "--weight-file", str(WEIGHTS)],
     r"not valid JSON"),
    ("options-json-array", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                      c.inp("o.json", "[1, 2]"), "--weight-file", str(WEIGHTS)], r"JSON object"),
    ("options-wrong-type", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                      c.options("o.json", _set("lstm", "dim", "4096")), "--weight-file", str(WEIGHTS)],
     r"lstm.dim must be a positive integer"),
    ("options-negative-size", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                         c.options("o.json", _set("lstm", "projection_dim", -16)),
                                         "--weight-file", str(WEIGHTS)], r"projection_dim must be a positive"),
    ("options-float-size", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                      c.options("o.json", _set("char_cnn", "n_highway", 1.5)),
                                      "--weight-file", str(WEIGHTS)], r"n_highway must be a non-negative integer"),
    ("options-missing-field", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                         c.options("o.json", lambda o: o["lstm"].pop("dim")),
                                         "--weight-file", str(WEIGHTS)], r"missing or malformed field"),
    ("options-contradict-weights", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                              c.options("o.json", _set("lstm", "dim", 48)),
                                              "--weight-file", str(WEIGHTS)], r"has shape .* the options imply"),
    ("options-contradict-layers", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file",
                                             c.options("o.json", _set("lstm", "n_layers", 3)),
                                             "--weight-file", str(WEIGHTS)], r"has no dataset .*Cell2"),
    ("hdf5-missing", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                                "--weight-file", str(c.inp_dir / "w.hdf5")], r"weight file not found"),
    ("hdf5-empty", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                              "--weight-file", c.inp("w.hdf5", b"")], r"not a readable HDF5 file"),
    ("hdf5-truncated-header", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                                         "--weight-file", c.inp("w.hdf5", _truncated(WEIGHTS, 0.01))],
     r"not a readable HDF5 file"),
    ("hdf5-truncated-tail", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                                       "--weight-file", c.inp("w.hdf5", _truncated(WEIGHTS, 0.99))],
     r"not a readable HDF5 file"),
    ("hdf5-corrupt", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                                "--weight-file", c.inp("w.hdf5", _corrupt(WEIGHTS))], r"weight file"),
    ("hdf5-nan", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                            "--weight-file", c.weights("w.hdf5", "CNN_proj/W_proj", float("nan"))],
     r"'CNN_proj/W_proj' holds NaN or infinite"),
    ("hdf5-inf", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                            "--weight-file", c.weights("w.hdf5", "char_embed", float("-inf"))],
     r"'char_embed' holds NaN or infinite"),
    ("hdf5-is-pickle", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--options-file", str(OPTIONS),
                                  "--weight-file", _pickle_file(c, "w.hdf5")], r"not a readable HDF5 file"),
    ("safetensors-truncated", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", _native_with(c, "truncated")],
     r"not a valid safetensors file"),
    ("safetensors-garbage-header", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                              _native_with(c, "garbage header")], r"not a valid safetensors file"),
    ("safetensors-empty", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", _native_with(c, "empty")],
     r"not a valid safetensors file"),
    ("safetensors-is-pickle", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", _native_with(c, "pickle")],
     r"not a valid safetensors file"),
    ("safetensors-nan", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model", _native_with(c, "nan")],
     r"holds NaN or infinite"),
    ("native-config-wrong-type", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                            _native_with(c, "config wrong type")], r"lstm.dim must be a positive"),
    ("native-config-negative", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                          _native_with(c, "config negative")], r"n_layers must be a positive"),
    ("native-config-contradicts", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                             _native_with(c, "config contradicts")], r"the config implies"),
    ("native-config-not-json", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                          _native_with(c, "config not json")], r"not valid JSON"),
    ("native-config-missing", lambda c: ["embed", c.inp("i.txt", "a\n"), c.o(), "--model",
                                         _native_with(c, "no config")], r"model config not found"),
    # similarity and demo
    ("similarity-word-absent", lambda c: ["similarity", "the bank", "a river", "--word", "bank", *REL],
     r"'bank' is not a token of 'a river'"),
    ("similarity-empty-sentence", lambda c: ["similarity", "", "the bank", "--word", "bank", *REL],
     r"is not a token of ''"),
    ("similarity-corrupt-weights", lambda c: ["similarity", "a b", "a c", "--word", "a", "--options-file", str(OPTIONS),
                                              "--weight-file", c.inp("w.hdf5", _truncated(WEIGHTS, 0.5))],
     r"not a readable HDF5"),
    ("demo-plot-missing-folder", lambda c: ["demo", "--plot", str(c.out / "no" / "d.png"), *REL],
     r"--out folder does not exist"),
    ("demo-plot-is-directory", lambda c: ["demo", "--out", str(c.out), *REL], r"--out path is a directory"),
    ("demo-out-not-a-demo-figure", lambda c: ["demo", "--out", c.inp("notes.png", "mine"), *REL],
     r"notes.png exists and is not a figure pyelmo demo wrote: choose another --out, or replace it with --overwrite"),
    ("demo-pickle-weights", lambda c: ["demo", "--plot", "", "--options-file", str(OPTIONS),
                                       "--weight-file", _pickle_file(c, "w.hdf5")], r"not a readable HDF5"),
    # vocab
    ("vocab-empty-file", lambda c: ["vocab", "build", c.inp("t.txt", ""), c.o("v.txt")], r"no words in"),
    ("vocab-blank-lines-only", lambda c: ["vocab", "build", c.inp("t.txt", "\n \n\t\r\n"), c.o("v.txt")],
     r"no words in"),
    ("vocab-invalid-utf8", lambda c: ["vocab", "build", c.inp("t.txt", b"a b\nc\nd \xc0\xaf e\n"), c.o("v.txt")],
     r"line 3 is not UTF-8"),
    ("vocab-missing-input", lambda c: ["vocab", "build", str(c.inp_dir / "no.txt"), c.o("v.txt")],
     r"data not found"),
    ("vocab-folder-without-text", lambda c: ["vocab", "build", str(c.inp_dir), c.o("v.txt")], r"no .txt files"),
    ("vocab-max-size-1", lambda c: ["vocab", "build", c.inp("t.txt", "a b\n"), c.o("v.txt"), "--max-size", "1"],
     r"max size must be at least 3"),
    ("vocab-min-count-0", lambda c: ["vocab", "build", c.inp("t.txt", "a b\n"), c.o("v.txt"), "--min-count", "0"],
     r"min count must be at least 1"),
    # perplexity
    ("perplexity-empty-file", lambda c: ["perplexity", "--model", str(c.trained), c.inp("t.txt", "")], r"no sentences in"),
    ("perplexity-invalid-utf8", lambda c: ["perplexity", "--model", str(c.trained),
                                           c.inp("t.txt", b"the cat\n\xe2\x82\n")],
     r"line 2 is not UTF-8"),
    ("perplexity-missing-text", lambda c: ["perplexity", str(c.inp_dir / "no.txt"), "--model", str(c.trained)],
     r"data file not found"),
    ("perplexity-model-as-text", lambda c: ["perplexity", str(c.trained), c.inp("t.txt", "a\n")], r"is a directory"),
    ("perplexity-model-and-directory-text", lambda c: ["perplexity", "--model", str(c.trained), str(c.inp_dir)],
     r"is a directory"),
    ("perplexity-model-missing", lambda c: ["perplexity", "--model", str(c.inp_dir / "m"), c.inp("t.txt", "a\n")],
     r"model directory not found"),
    ("perplexity-model-without-softmax", lambda c: ["perplexity", "--model", str(c.native), c.inp("t.txt", "a\n")],
     r"has no softmax"),
    ("perplexity-batch-tokens-2", lambda c: ["perplexity", "--model", str(c.trained), c.inp("t.txt", "a\n"),
                                             "--batch-tokens", "2"], r"--batch-tokens must be at least 3"),
    ("perplexity-vocab-missing", lambda c: ["perplexity", "--model", _without(c.copy_trained(), "vocab.txt"),
                                            c.inp("t.txt", "a\n")], r"vocabulary file not found"),
    ("perplexity-vocab-empty-line", lambda c: ["perplexity", "--model",
                                               _vocab(c.copy_trained(), "<S>\n</S>\n<UNK>\n\nthe\n"),
                                               c.inp("t.txt", "a\n")], r"has an empty line"),
    ("perplexity-vocab-wrong-size", lambda c: ["perplexity", "--model",
                                               _vocab(c.copy_trained(), "<S>\n</S>\n<UNK>\nthe\n"),
                                               c.inp("t.txt", "a\n")], r"softmax shape .* does not match"),
    # export
    ("export-model-missing", lambda c: ["export", "--model", str(c.inp_dir / "m"), str(c.out / "e")],
     r"model directory not found"),
    ("export-model-without-outdir", lambda c: ["export", str(c.trained)], r"is a model directory, not an output"),
    ("export-into-a-model", lambda c: ["export", "--model", str(c.trained), str(c.native)],
     r"is a model directory, not an output folder$"),
    ("export-model-without-softmax", lambda c: ["export", "--model", str(c.native), str(c.out / "e")],
     r"has no softmax"),
    ("export-output-is-file", lambda c: ["export", c.inp("file", "x"), "--model", str(c.trained)], r"output path is a file"),
    ("export-safetensors-truncated", lambda c: ["export", "--model", _truncate_weights(c.copy_trained()),
                                                str(c.out / "e")],
     r"not a valid safetensors"),
    # predict
    ("predict-no-blank", lambda c: ["predict", "the cat sees", "--model", str(c.trained)], r"exactly one word"),
    ("predict-two-blanks", lambda c: ["predict", "___ cat ___", "--model", str(c.trained)], r"exactly one word"),
    ("predict-k-0", lambda c: ["predict", "the ___ sees", "-k", "0", "--model", str(c.trained)], r"-k must be"),
    ("predict-model-without-softmax", lambda c: ["predict", "the ___", "--model", str(c.native)], r"no softmax"),
    ("predict-model-missing", lambda c: ["predict", "the ___", "--model", str(c.inp_dir / "m")], r"not found"),
    ("predict-safetensors-is-pickle", lambda c: ["predict", "the ___", "--model", _native_with(c, "pickle")],
     r"not a valid safetensors"),
    # train
    ("train-config-missing", lambda c: _train(c, "--config", str(c.inp_dir / "c.toml")), r"config file not found"),
    ("train-config-bad-toml", lambda c: _train(c, "--config", c.inp("c.toml", "[lstm\ndim = 3")), r"not valid TOML"),
    ("train-config-bad-json", lambda c: _train(c, "--config", c.inp("c.json", '{"lstm": ')), r"not valid JSON"),
    ("train-config-array", lambda c: _train(c, "--config", c.inp("c.json", "[]")), r"must be a table/object"),
    ("train-config-wrong-type", lambda c: _train(c, "--config", c.inp("c.json", '{"lstm": {"dim": "big"}}')),
     r"lstm.dim must be an integer"),
    ("train-config-negative-size", lambda c: _train(c, "--config", c.inp("c.json", '{"lstm": {"dim": -4}}')),
     r"lstm.dim must be a positive integer"),
    ("train-config-unknown-field", lambda c: _train(c, "--set", "lstm.size=3"), r"unknown field 'lstm.size'"),
    ("train-set-malformed", lambda c: _train(c, "--set", "lstm"), r"--set expects section.field=value"),
    ("train-empty-data", lambda c: ["train", "--set", "lstm.dim=8", "--train", c.inp("t.txt", ""),
                                    "--out", str(c.out / "run"), "--no-progress"], r"no words in"),
    ("train-invalid-utf8", lambda c: ["train", "--set", "lstm.dim=8", "--train", c.inp("t.txt", b"a b\n\xff\n"),
                                      "--out", str(c.out / "run"), "--no-progress"], r"line 2 is not UTF-8"),
    ("train-missing-data", lambda c: ["train", "--set", "lstm.dim=8", "--data", str(c.inp_dir / "none"),
                                      "--out", str(c.out / "run"), "--no-progress"], r"not found"),
    ("train-no-model-size", lambda c: _train(c, "--max-steps", "1"), r"the defaults are the original model's size"),
    ("train-resume-nothing", lambda c: ["train", "--out", str(c.out / "run"), "--resume"], r"nothing to resume"),
    ("train-resume-and-init-from", lambda c: ["train", "--out", str(c.out / "run"), "--resume", "--init-from",
                                              str(c.trained)], r"cannot be combined"),
    # evaluate (argument checks run before any data is read)
    ("evaluate-batch-size-0", lambda c: ["evaluate", "wsd", "--out", str(c.out / "ev"), "--batch-size", "0", *REL],
     r"--batch-size must be at least 1"),
    ("evaluate-out-is-file", lambda c: ["evaluate", "wsd", "--out", c.inp("f", "x"), *REL], r"--out is not a folder"),
    ("evaluate-corrupt-weights", lambda c: ["evaluate", "wsd", "--out", str(c.out / "ev"), "--options-file",
                                            str(OPTIONS), "--weight-file", c.inp("w.hdf5", _corrupt(WEIGHTS))],
     r"weight file"),
]


def _train(c: Ctx, *extra: str) -> list[str]:
    return ["train", "--train", c.inp("t.txt", SENTENCES), "--out", str(c.out / "run"), "--no-progress", *extra]


def _without(model: Path, name: str) -> str:
    (model / name).unlink()
    return str(model)


def _vocab(model: Path, text: str) -> str:
    (model / "vocab.txt").write_text(text)
    return str(model)


def _truncate_weights(model: Path) -> str:
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return str(model)


@pytest.mark.parametrize("builder, message", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES])
def test_bad_input_fails_on_one_line_and_leaves_nothing(ctx, capsys, builder, message):
    argv = builder(ctx)
    inputs_before = sorted(p.name for p in ctx.inp_dir.rglob("*"))
    rc, _, err = run_cli(argv, capsys)
    assert rc == 1, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"pyelmo {argv[0]}: error: "), lines[0]
    import re

    assert re.search(message, lines[0]), lines[0]
    assert list(ctx.out.iterdir()) == [], "partial output left behind"
    assert sorted(p.name for p in ctx.inp_dir.rglob("*")) == inputs_before, "input folder changed"
    assert not (ctx.root / "PWNED").exists(), "a pickle was unpickled"


def test_perplexity_and_export_take_the_model_by_option_anywhere(ctx, capsys):
    """``--model`` before or after the paths gives the same results; a model given by position is refused."""
    import json as _json

    text = ctx.inp("t.txt", "the cat sat\na dog\n")
    results = []
    for argv in (["perplexity", "--model", str(ctx.trained), text, "--json"],
                 ["perplexity", text, "--json", "--model", str(ctx.trained)]):
        rc, out, err = run_cli(argv, capsys)
        assert rc == 0, err
        results.append(_json.loads(out))  # stdout is the JSON document alone
    assert all(r == results[0] for r in results) and results[0]["predictions"] == 7
    written = []
    for i, argv in enumerate((["export", "--model", str(ctx.trained), "{out}"],
                              ["export", "{out}", "--format", "bilm-hdf5", "--model", str(ctx.trained)])):
        out_dir = ctx.root / f"export-{i}"
        rc, _, err = run_cli([a.replace("{out}", str(out_dir)) for a in argv], capsys)
        assert rc == 0, err
        written.append({p.name: p.read_bytes() for p in sorted(out_dir.iterdir()) if p.suffix != ".hdf5"})
        assert {"options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt"} <= {p.name for p in out_dir.iterdir()}
    assert all(w == written[0] for w in written)
    with pytest.raises(SystemExit):  # MODEL OUTDIR: one path too many
        main(["export", str(ctx.trained), str(ctx.out / "e")])
    assert "unrecognized arguments" in capsys.readouterr().err


def test_case_count():
    """The battery's size, as docs/RELIABILITY.md reports it."""
    assert len({c[0] for c in ERROR_CASES}) == len(ERROR_CASES) >= 80


# -- existing outputs: refused unless --overwrite (content untouched) ------------------------------
@pytest.mark.parametrize("command", ["embed", "vocab", "export", "train"])
def test_existing_output_refused_then_overwritten(ctx, capsys, command):
    text = ctx.inp("t.txt", SENTENCES)
    if command == "embed":
        target = ctx.out / "out.h5"
        argv = ["embed", text, str(target), "--no-progress", *REL]
    elif command == "vocab":
        target = ctx.out / "vocab.txt"
        argv = ["vocab", "build", text, str(ctx.out) + "/"]
    elif command == "export":
        target = ctx.out / "weights.hdf5"
        argv = ["export", "--model", str(ctx.trained), str(ctx.out)]
    else:
        target = ctx.out / "run.json"
        argv = ["train", "--set", "lstm.dim=8", "--set", "lstm.projection_dim=4", "--set", "char_cnn.filters=[[1,4]]",
                "--set", "train.max_steps=1", "--set", "train.threads=1", "--train", text, "--out", str(ctx.out),
                "--no-progress"]
    target.write_text("precious")
    before = sorted(p.name for p in ctx.out.iterdir())
    rc, _, err = run_cli(argv, capsys)
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "--overwrite" in err, err
    assert target.read_text() == "precious"
    assert sorted(p.name for p in ctx.out.iterdir()) == before
    rc, _, err = run_cli(argv + ["--overwrite"], capsys)
    assert rc == 0, err
    assert target.read_bytes() != b"precious"
    assert not [p for p in ctx.out.rglob(".*.tmp")]


# -- inputs with a documented, successful handling ------------------------------------------------
def _embed_ok(ctx, capsys, text, *extra):
    rc, out, err = run_cli(embed(ctx, text, *extra), capsys)
    assert rc == 0, err
    assert [p.name for p in ctx.out.iterdir()] == ["out.h5"]
    with h5py.File(ctx.o(), "r") as f:
        index = json.loads(f["sentence_to_index"][0]) if "sentence_to_index" in f else None
        arrays = {k: f[k][...] for k in f if k != "sentence_to_index"}
    return arrays, index


def test_embed_empty_file_writes_an_empty_hdf5(ctx, capsys):
    arrays, index = _embed_ok(ctx, capsys, "")
    assert arrays == {} and index == {}


def test_embed_crlf_and_bom_are_stripped(ctx, capsys):
    arrays, index = _embed_ok(ctx, capsys, b"\xef\xbb\xbfthe bank\r\nthe river bank\r\n")
    assert index == {"the bank": "0", "the river bank": "1"}
    assert arrays["0"].shape == (3, 2, 32) and arrays["1"].shape == (3, 3, 32)


def test_embed_blank_lines_with_skip_flag_become_empty_entries(ctx, capsys):
    arrays, index = _embed_ok(ctx, capsys, "a b\n\n  \nc\n", "--skip-blank-lines")
    assert [arrays[str(i)].shape[1] for i in range(4)] == [2, 0, 0, 1]


def test_embed_nul_byte_is_an_ordinary_character(ctx, capsys):
    arrays, index = _embed_ok(ctx, capsys, b"a \x00 b\n")
    assert arrays["0"].shape == (3, 3, 32) and np.isfinite(arrays["0"]).all()
    assert list(index) == ["a \x00 b"]


def test_embed_10000_character_token_uses_its_first_bytes(ctx, capsys, tiny_model):
    from pyelmo.embedding.embedder import ElmoEmbedder

    arrays, _ = _embed_ok(ctx, capsys, "a " + "x" * 10_000 + " b\n")
    assert arrays["0"].shape == (3, 3, 32) and np.isfinite(arrays["0"]).all()
    # a token is cut to its first 48 UTF-8 bytes (50 ids with the word markers)
    cut = ElmoEmbedder(tiny_model).embed_sentence(["a", "x" * 48, "b"])
    np.testing.assert_allclose(arrays["0"], cut, atol=1e-5)


def test_embed_emoji_cjk_rtl_and_combining_marks(ctx, capsys):
    line = "🙂 👍🏽 👨‍👩‍👧 漢字 テスト שלום עולם مرحبا e\u0301 n\u0303 \u202eabc"
    arrays, index = _embed_ok(ctx, capsys, line + "\n")
    assert arrays["0"].shape == (3, len(line.split()), 32) and np.isfinite(arrays["0"]).all()
    assert list(index) == [line]


def test_embed_negative_token_cache_size_means_no_cache(ctx, capsys):
    arrays, _ = _embed_ok(ctx, capsys, "a b\n", "--token-cache-size", "-1")
    assert arrays["0"].shape == (3, 2, 32)


def test_similarity_control_characters_are_normalised(ctx, capsys):
    rc, out, err = run_cli(["similarity", "the\x00 bank", "the river\u200b bank", "--word", "bank", *REL], capsys)
    assert rc == 0, err
    assert "bank" in out


def test_vocab_crlf_bom_nul_and_missing_output_folder(ctx, capsys):
    text = ctx.inp("t.txt", b"\xef\xbb\xbfthe cat\r\nthe\x00dog\rcat\n")
    rc, _, err = run_cli(["vocab", "build", text, str(ctx.out / "new" / "deeper" / "v.txt")], capsys)
    assert rc == 0, err  # the output folder is created
    words = (ctx.out / "new" / "deeper" / "v.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert words == ["<S>", "</S>", "<UNK>", "cat", "the", "the\x00dog"]


def test_perplexity_blank_lines_skipped_and_long_token(ctx, capsys):
    text = ctx.inp("t.txt", "\n\nthe cat " + "y" * 10_000 + "\n\n")
    rc, out, err = run_cli(["perplexity", "--model", str(ctx.trained), text, "--json"], capsys)
    assert rc == 0, err
    result = json.loads(out)
    assert result["predictions"] == 4 and np.isfinite(result["average"])  # 3 words + </S>


def test_predict_only_the_blank_and_huge_k(ctx, capsys):
    rc, out, err = run_cli(["predict", "___", "-k", "100000", "--model", str(ctx.trained)], capsys)
    assert rc == 0, err
    vocab_size = len((ctx.trained / "vocab.txt").read_text().split("\n")) - 1
    assert len(out.strip().splitlines()) == 1 + vocab_size - 3  # header + every word but the specials


# -- public loaders called directly -------------------------------------------------------------------
def test_loaders_refuse_pickle_without_unpickling(tmp_path):
    from pyelmo.training.checkpoints import CheckpointError, load_checkpoint
    from pyelmo.lm.vocab import DataError, Vocabulary

    sentinel = tmp_path / "PWNED"
    blob = pickle.dumps(Payload(sentinel))
    (tmp_path / "p.pt").write_bytes(blob)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "p.pt")
    import torch

    torch.save({"x": Payload(sentinel)}, tmp_path / "t.pt")  # a real torch file holding the payload
    with pytest.raises(CheckpointError):
        load_checkpoint(tmp_path / "t.pt")
    (tmp_path / "options.json").write_bytes(blob)
    with pytest.raises(WeightFileError, match="not valid JSON"):
        load_options(tmp_path / "options.json")
    (tmp_path / "vocab.txt").write_bytes(blob)
    with pytest.raises(DataError):
        Vocabulary.load(tmp_path / "vocab.txt")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"options": json.loads(OPTIONS.read_text())}))
    (tmp_path / "m" / "model.safetensors").write_bytes(blob)
    with pytest.raises(WeightFileError):
        from_pretrained(tmp_path / "m")
    assert not sentinel.exists()


def test_vocabulary_and_sentence_readers(tmp_path):
    from pyelmo.embedding.store import read_sentences
    from pyelmo.lm.vocab import DataError, Vocabulary

    (tmp_path / "dup.txt").write_text("<S>\n</S>\n<UNK>\na\na\n")
    with pytest.raises(DataError, match="'a' twice"):
        Vocabulary.load(tmp_path / "dup.txt")
    (tmp_path / "nospecial.txt").write_text("a\nb\n")
    with pytest.raises(DataError, match="must start with"):
        Vocabulary.load(tmp_path / "nospecial.txt")
    (tmp_path / "bad.txt").write_bytes(b"<S>\n</S>\n<UNK>\n\xff\n")
    with pytest.raises(DataError, match=r"bad.txt: line 4 is not UTF-8"):
        Vocabulary.load(tmp_path / "bad.txt")
    with pytest.raises(DataError, match="vocabulary file not found"):
        Vocabulary.load(tmp_path / "missing.txt")
    (tmp_path / "s.txt").write_bytes(b"a\n\xff\n")
    with pytest.raises(InputError, match="line 2"):
        list(read_sentences(tmp_path / "s.txt"))


def test_model_loader_arguments():
    from pyelmo.modelio.resolve import load

    with pytest.raises(WeightFileError, match="needs its options file"):
        load(None, WEIGHTS)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files whatever their permissions")
@pytest.mark.parametrize("what", ["input", "options"])
def test_unreadable_file(ctx, capsys, what):
    path = Path(ctx.inp("locked", "a b\n" if what == "input" else OPTIONS.read_text()))
    path.chmod(0)
    try:
        if what == "input":
            argv = ["embed", str(path), ctx.o(), *REL]
        else:
            argv = ["embed", ctx.inp("i.txt", "a\n"), ctx.o(), "--options-file", str(path), "--weight-file", str(WEIGHTS)]
        rc, _, err = run_cli(argv, capsys)
        assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "not readable" in err or "cannot read" in err or "Permission denied" in err
        assert list(ctx.out.iterdir()) == []
    finally:
        path.chmod(0o644)


# -- embed's --threads and --device ---------------------------------------------------------------
def test_embed_threads_0_is_a_one_line_error(ctx, capsys):
    rc, _, err = run_cli(embed(ctx, "a\n", "--threads", "0"), capsys)
    assert rc == 1 and "threads" in err


def test_embed_unknown_device_is_a_one_line_error(ctx, capsys):
    rc, _, err = run_cli(embed(ctx, "a\n", "--device", "nosuchdevice"), capsys)
    assert rc == 1 and "device" in err


# -- a real process: exit codes and stderr ---------------------------------------------------------
SUBPROCESS_CASES = ["embed-blank-line", "embed-invalid-utf8", "hdf5-truncated-tail", "safetensors-is-pickle",
                    "train-config-wrong-type", "vocab-invalid-utf8"]


@pytest.mark.slow
def test_real_process_exit_codes_and_no_traceback(ctx):
    cases = {c[0]: c for c in ERROR_CASES}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    for name in SUBPROCESS_CASES:
        _, builder, message = cases[name]
        argv = builder(ctx)
        proc = subprocess.run([sys.executable, "-m", "pyelmo", *argv], capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 1, (name, proc.stderr)
        assert "Traceback" not in proc.stderr, (name, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)
        assert list(ctx.out.iterdir()) == [], name
        assert not (ctx.root / "PWNED").exists()
    # --debug shows the traceback instead
    proc = subprocess.run([sys.executable, "-m", "pyelmo", "--debug", *cases["embed-blank-line"][1](ctx)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "InputError" in proc.stderr
