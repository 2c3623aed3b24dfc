"""``pyelmo task ... qa``: SQuAD v1.1 data and metrics, the BiDAF-style reader, and bad input (seconds each)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.tasks.metrics import answer_f1, normalize_answer, squad_metrics
from pyelmo.tasks.model import ModelConfig
from pyelmo.errors import InputError
from pyelmo.tasks.options import TrainOptions
from pyelmo.tasks.reader import QARunner, Reader
from pyelmo.tasks.squad import read_squad, tokenize_with_offsets
from pyelmo.tasks.saved import load_task
from pyelmo.tasks.train import train_task

from taskdata import BILM_ARGS

NAMES, COLORS, THINGS = ["Anna", "Bruno", "Clara", "David"], ["red", "blue", "green"], ["car", "bike", "boat"]
WORDS = NAMES + COLORS + THINGS + ["has", "a", "owns", "the", "they", "say", "What", "color", "is", "Who", "'s", "?", "."]


def _squad(rng: random.Random, n: int, prefix: str) -> dict:
    """``n`` short passages with three questions each; every answer is a word of its passage."""
    paragraphs = []
    for k in range(n):
        who, col, thing = rng.sample(NAMES, 2), rng.sample(COLORS, 2), rng.sample(THINGS, 2)
        first = f"{who[0]} has a {col[0]} {thing[0]}."
        context = f"{first} {who[1]} owns the {col[1]} {thing[1]}, they say."
        second = len(first) + 1
        qas = [(f"What color is {who[0]}'s {thing[0]}?", col[0], context.index(col[0])),
               (f"Who owns the {thing[1]}?", who[1], second),
               (f"What color is the {thing[1]}?", col[1], context.index(col[1], second))]
        paragraphs.append({"context": context, "qas": [
            {"id": f"{prefix}{k}-{j}", "question": q, "answers": [{"text": a, "answer_start": s}]}
            for j, (q, a, s) in enumerate(qas)]})
    return {"version": "1.1", "data": [{"title": "things", "paragraphs": paragraphs}]}


@pytest.fixture
def qa(tmp_path) -> Path:
    rng = random.Random(0)
    for name, n in (("train", 4), ("dev", 2)):
        (tmp_path / f"{name}.json").write_text(json.dumps(_squad(rng, n, name)))
    vec = np.random.default_rng(0).normal(size=(len(WORDS), 6))
    (tmp_path / "vec.txt").write_text("".join(w + " " + " ".join(f"{x:.5f}" for x in v) + "\n"
                                              for w, v in zip(WORDS, vec)))
    return tmp_path


def _train_args(qa: Path, train: Path, out: str = "model", *extra: str) -> list[str]:
    return ["task", "train", "qa", "--train", str(train), "--dev", str(qa / "dev.json"), "--out", str(qa / out),
            *BILM_ARGS, "--static-vectors", str(qa / "vec.txt"), "--hidden", "8", "--batch-size", "4",
            "--lr", "0.02", "--min-steps", "0", "--quiet", *extra]


def test_token_offsets_give_back_exact_substrings():
    text = "Bruno's car  cost $5,000.\u201cFine\u201d, he said\u2014twice."
    tokens, offsets = tokenize_with_offsets(text)
    assert tokens[:4] == ["Bruno", "'s", "car", "cost"]
    assert all(text[a:b] == t for t, (a, b) in zip(tokens, offsets))
    assert [a for a, _ in offsets] == sorted(a for a, _ in offsets)
    assert tokenize_with_offsets("a \x01 b") == (["a", "\x01", "b"], [(0, 1), (2, 3), (4, 5)])  # nothing dropped


def test_json_and_jsonl_give_the_same_questions_with_gold_token_spans(qa):
    doc = json.loads((qa / "train.json").read_text())
    (qa / "train.jsonl").write_text("".join(json.dumps({"context": p["context"], **q}) + "\n"
                                            for p in doc["data"][0]["paragraphs"] for q in p["qas"]))
    from_json, from_jsonl = read_squad(qa / "train.json"), read_squad(qa / "train.jsonl")
    assert from_json == from_jsonl and len(from_json) == 12
    for e in from_json:
        assert e.answer_text(*e.span) == e.answers[0]
    # an answer inside a token ("5,000" in "$5,000") maps to the token that holds it
    (qa / "inside.jsonl").write_text(json.dumps({"id": "x", "context": "It cost $5,000.", "question": "How much?",
                                                 "answers": [{"text": "5,000", "answer_start": 9}]}) + "\n")
    e = read_squad(qa / "inside.jsonl")[0]
    assert "5,000" in e.answer_text(*e.span)


@pytest.mark.parametrize("text,normalized", [
    ("The  Quick, brown fox!", "quick brown fox"), ("an apple a day", "apple day"), ("Theater", "theater"),
    ("the", ""),
])
def test_answer_normalisation(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_and_f1_by_hand():
    cases = [("the cat sat", ["a cat sat on"]),        # P 2/2, R 2/3: F1 0.8, EM 0
             ("Paris", ["paris, France", "Paris."]),    # the second gold matches: EM 1, F1 1
             ("blue car", ["red car", "car"]),          # max(F1 1/2, F1 2/3) = 2/3, EM 0
             ("an", ["the"])]                           # both normalise to "": EM 1, F1 0 (no common token)
    assert answer_f1("the cat sat", "a cat sat on") == pytest.approx(0.8)
    assert answer_f1("blue car", "car") == pytest.approx(2 / 3)
    metrics = squad_metrics([g for _, g in cases], [p for p, _ in cases])
    assert metrics["n"] == 4 and metrics["exact_match"] == pytest.approx(50.0)
    assert metrics["f1"] == pytest.approx(100 * (0.8 + 1 + 2 / 3 + 0) / 4)


def test_decoding_keeps_start_before_end_and_the_length_limit(monkeypatch):
    model = Reader(ModelConfig(kind="qa", n_labels=2, static_dim=2, static_size=1, hidden=2))
    start = torch.tensor([[0.0, 0.0, 0.0, 9.0, 0.0, 0.0]])
    end = torch.tensor([[0.0, 8.0, 0.0, 0.0, 1.0, 7.0]])  # the best end (1) is before the best start (3)
    monkeypatch.setattr(model, "logits", lambda p, q: (start, end))
    assert model.predict(None, None, max_tokens=30) == [(3, 5)]
    assert model.predict(None, None, max_tokens=2) == [(3, 4)]  # 3..5 is three tokens
    assert model.predict(None, None, max_tokens=1) == [(3, 3)]


def test_train_evaluate_predict(qa, capsys):
    out = qa / "model"
    assert main(_train_args(qa, qa / "train.json", "model", "--max-epochs", "30", "--patience", "30")) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["kind"] == "qa" and saved["labels"] == ["start", "end"] and saved["options"]["max_answer_tokens"] == 30
    # the reader learns the toy task (answers a word of the passage chosen by the question)
    assert saved["training"]["best_dev"] > 60, saved["training"]["history"]  # F1, percent
    capsys.readouterr()
    assert main(["task", "evaluate", str(out), "--test", str(qa / "dev.json"), "--json", "--quiet"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"exact_match", "f1", "n", "scale"} and metrics["n"] == 6
    assert metrics["f1"] == pytest.approx(saved["training"]["best_dev"])  # the best epoch was restored
    pred = qa / "pred.json"
    assert main(["task", "predict", str(out), str(qa / "dev.json"), str(pred), "--quiet"]) == 0
    answers = json.loads(pred.read_text())
    contexts = {q.id: q.context for q in read_squad(qa / "dev.json")}
    assert set(answers) == set(contexts) and all(answers[i] and answers[i] in contexts[i] for i in answers)
    capsys.readouterr()
    assert main(["task", "predict", str(out), str(qa / "dev.json"), str(pred), "--quiet"]) == 1
    assert "exists" in capsys.readouterr().err
    # JSONL questions without answers (predict needs none), each answer a piece of its own context
    (qa / "new.jsonl").write_text("".join(json.dumps({"id": f"n{i}", "context": c, "question": "Who owns the boat?"})
                                          + "\n" for i, c in enumerate(["Clara owns the boat.", "The boat is red."])))
    assert main(["task", "predict", str(out), str(qa / "new.jsonl"), str(qa / "new.json"), "--quiet"]) == 0
    new = json.loads((qa / "new.json").read_text())
    assert new["n0"] in "Clara owns the boat." and new["n1"] in "The boat is red."
    # a hand-edited answer length is one line naming the field
    (out / "config.json").write_text(json.dumps({**saved, "options": {**saved["options"], "max_answer_tokens": 0}}))
    assert main(["task", "evaluate", str(out), "--test", str(qa / "dev.json"), "--quiet"]) == 1
    assert "'options.max_answer_tokens'" in capsys.readouterr().err


@pytest.fixture
def recorded(monkeypatch) -> list[dict]:
    """Each dev evaluation during training: the reader's logits on all of dev (one batch) and its answers."""
    evaluations: list[dict] = []
    evaluate = QARunner.evaluate

    def recording(self, examples, desc=""):
        answers = self.predict(examples)  # (caches the layers, eval mode)
        evaluations.append({"logits": self.model.logits(*self._batch(examples, False)[:2]), "answers": answers})
        return evaluate(self, examples, desc)

    monkeypatch.setattr(QARunner, "evaluate", torch.no_grad()(recording))
    return evaluations


def test_elmo_output_train_evaluate_predict_reload(qa, capsys, recorded):
    """--elmo-output: output mixes of passage and question (four mixes), saved and reloaded exactly."""
    out = qa / "model"
    assert main(_train_args(qa, qa / "train.json", "model", "--features", "static+elmo", "--elmo-output",
                            "--max-epochs", "3", "--patience", "3")) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["model"]["elmo_output"] and saved["features"] == "static+elmo"
    from safetensors.torch import load_file

    weights = load_file(str(out / "model.safetensors"))
    assert sorted(k for k in weights if k.endswith("scalar_parameters")) == [
        f"mixes.{i}.scalar_parameters" for i in range(4)]
    capsys.readouterr()
    assert main(["task", "evaluate", str(out), "--test", str(qa / "dev.json"), "--json", "--quiet"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) == {"exact_match", "f1", "n", "scale"} and metrics["n"] == 6
    pred = qa / "pred.json"
    assert main(["task", "predict", str(out), str(qa / "dev.json"), str(pred), "--quiet"]) == 0
    answers = json.loads(pred.read_text())
    contexts = {q.id: q.context for q in read_squad(qa / "dev.json")}
    assert set(answers) == set(contexts) and all(answers[i] and answers[i] in contexts[i] for i in answers)
    # the reloaded reader is the best epoch's: the same logits and answers as at that dev evaluation
    history = saved["training"]["history"]
    best = recorded[history.index(max(history, key=lambda h: h["dev"]["f1"]))]
    runner = load_task(out, progress=False)
    dev = read_squad(qa / "dev.json")
    assert runner.predict(dev) == best["answers"] == [answers[e.id] for e in dev]
    with torch.no_grad():
        for got, want in zip(runner.model.logits(*runner._batch(dev, False)[:2]), best["logits"]):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("top_only", [False, True])
def test_output_mixes_reach_the_spans_and_the_mix_penalty(top_only):
    """H = [encoder(passage); ELMo_out(passage)], U likewise: the output mixes get gradients from the span
    loss, and the L2 penalty covers all four mixes (input and output, passage and question)."""
    h, layers, dim = 3, 3, 4
    model = Reader(ModelConfig(kind="qa", n_labels=2, elmo_layers=layers, elmo_dim=dim, elmo_output=True,
                               top_only=top_only, hidden=h))
    assert len(model.mixes) == 4 and all(m.mixture_size == (1 if top_only else layers) for m in model.mixes)
    assert model.similarity.in_features == 3 * (2 * h + dim)
    torch.manual_seed(0)
    pmask, qmask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2]), torch.tensor([[True] * 3, [True, True, False]])
    passage, question = (None, torch.randn(2, layers, 5, dim), pmask), (None, torch.randn(2, layers, 3, dim), qmask)
    model.loss(passage, question, torch.tensor([[1, 2], [0, 0]])).backward()
    for mix in model.mixes:
        assert mix.gamma.grad.abs() > 0
    model.zero_grad()
    weights = [[0.0] * 3, [0.0] * 3, [0.5, -1.0, 2.0], [1.0, 0.0, -3.0]]  # only the output mixes are off 0
    with torch.no_grad():
        for mix, w in zip(model.mixes, weights):
            mix.scalar_parameters.copy_(torch.tensor(w[-mix.mixture_size:]))
    penalty = model.mix_penalty(0.1)
    n = model.mixes[0].mixture_size
    expected = 0.1 * sum(x * x for w in weights[2:] for x in w[-n:])  # 1.525 (all layers), 1.3 (the top one)
    assert expected > 0 and float(penalty.detach()) == pytest.approx(expected)
    penalty.backward()
    for mix in model.mixes[2:]:
        torch.testing.assert_close(mix.scalar_parameters.grad, 0.2 * mix.scalar_parameters.detach())


def test_elmo_output_without_elmo_is_refused(qa, capsys):
    assert main(_train_args(qa, qa / "train.json", "never", "--features", "static", "--elmo-output")) == 1
    err = capsys.readouterr().err
    assert "--elmo-output needs ELMo features" in err and not (qa / "never").exists()
    with pytest.raises(InputError, match="--elmo-output needs ELMo features"):  # the other kinds alike, before reading
        train_task("classify", qa / "missing.tsv", qa / "missing.tsv", qa / "never",
                   TrainOptions(features="static", elmo_output=True, progress=False))


@pytest.mark.parametrize("mutate,message", [
    (lambda d: "{\"data\": [", "not valid JSON"),
    (lambda d: json.dumps({"id": "a", "context": "Anna.", "question": "Who?"}) + "\n{broken\n", ":2: not valid JSON"),
    (lambda d: d["data"][0]["paragraphs"][1]["qas"][0]["answers"][0].update(answer_start=0), "train1-0"),
    (lambda d: d["data"][0]["paragraphs"][2].update(context="  "), "empty context"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][2].update(question=" "), "empty question"),
    (lambda d: d["data"][0]["paragraphs"][3]["qas"][1].update(id="train0-0"), "duplicate id"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][1].update(answers=[]), "no answer"),
])
def test_bad_train_file_one_line_nothing_written(qa, capsys, mutate, message):
    doc = json.loads((qa / "train.json").read_text())
    changed = mutate(doc)
    bad = qa / "bad.json"
    bad.write_text(changed if isinstance(changed, str) else json.dumps(doc))
    rc = main(_train_args(qa, bad, "never"))
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and message in err and str(bad) in err, err
    assert not (qa / "never").exists() and not list(qa.glob(".never*"))
