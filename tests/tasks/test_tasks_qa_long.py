"""The reader on long passages: the span search and training stay linear in the passage (seconds each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import torch

from pyelmo.cli import main

from pyelmo.tasks.model import ModelConfig
from pyelmo.tasks.reader import TRAIN_WINDOW, Reader, _predict_batches, best_spans, match_flags, train_window
from pyelmo.tasks.squad import read_squad

from test_tasks_qa import _train_args, qa  # noqa: F401 (the fixture)


def _quadratic_spans(start, end, max_tokens):
    """The search over the full ``(T, T)`` table of start-end scores, as the reader first did."""
    scores = start.log_softmax(-1).unsqueeze(2) + end.log_softmax(-1).unsqueeze(1)
    T = scores.shape[1]
    allowed = torch.ones(T, T, dtype=torch.bool).triu().tril(max_tokens - 1)
    best = scores.masked_fill(~allowed, float("-inf")).flatten(1).argmax(-1)
    return [(int(i) // T, int(i) % T) for i in best]


def test_span_search_picks_the_quadratic_search_s_span():
    g = torch.Generator().manual_seed(0)
    for _ in range(500):
        B, T, K = (int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 5), (1, 40), (1, 50)))
        # small integers: many ties, which both must break alike (earliest start, then earliest end)
        start, end = (torch.randint(-3, 3, (B, T), generator=g).float() for _ in range(2))
        for b, n in enumerate(torch.randint(1, T + 1, (B,), generator=g).tolist()):
            start[b, n:] = end[b, n:] = float("-inf")  # padding
        assert best_spans(start, end, K) == _quadratic_spans(start, end, K)


def test_prediction_batches_bound_the_padded_tokens(monkeypatch):
    monkeypatch.setattr("pyelmo.tasks.reader.PREDICT_TOKENS", 100)
    lengths = [10, 60, 5, 30, 250, 20, 40]
    batches = list(_predict_batches(lengths, batch_size=3))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [[lengths[i] for i in b] for b in batches] == [[5, 10, 20], [30, 40], [60], [250]]


def test_training_window_holds_the_answer():
    tokens = tuple(f"w{i}" for i in range(3 * TRAIN_WINDOW))
    for k, span in enumerate([(0, 0), (5, 9), (TRAIN_WINDOW, TRAIN_WINDOW + 2), (len(tokens) - 1,) * 2, (10, 520)]):
        e = SimpleNamespace(id=f"q{k}", tokens=tokens, span=span)
        a, b = train_window(e)
        assert a <= span[0] <= span[1] < b <= len(tokens) and b - a == max(TRAIN_WINDOW, span[1] - span[0] + 1)
        assert train_window(e) == (a, b)  # the same every epoch
    assert train_window(SimpleNamespace(id="s", tokens=tokens[:50], span=(3, 4))) == (0, 50)


# the quadratic table of a 50,000-token passage is 10 GB: the limit leaves the reader 1.5 GB
LIMITED = """
import resource, sys
from pyelmo.cli import main
size = int(next(l for l in open('/proc/self/status') if l.startswith('VmSize')).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (3 << 29), resource.RLIM_INFINITY))
sys.exit(main(sys.argv[1:]))
"""


def test_a_50000_token_passage_trains_and_predicts_in_bounded_memory(qa):  # noqa: F811
    sentence = "Anna has a red car. Bruno owns the blue bike, they say. "
    context = sentence * 4000 + "Clara owns the green boat."
    long_qa = {"id": "long", "context": context, "question": "Who owns the boat?",
               "answers": [{"text": "Clara", "answer_start": context.rindex("Clara")}]}
    assert len(read_squad_text(qa, long_qa).tokens) > 50_000
    doc = json.loads((qa / "train.json").read_text())
    doc["data"][0]["paragraphs"].append({"context": context, "qas": [{k: long_qa[k] for k in ("id", "question",
                                                                                             "answers")}]})
    (qa / "long-train.json").write_text(json.dumps(doc))
    (qa / "long.jsonl").write_text(json.dumps(long_qa) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(*argv):
        return subprocess.run([sys.executable, "-c", LIMITED, *argv], capture_output=True, text=True, env=env)

    train = _train_args(qa, qa / "long-train.json", "model", "--features", "static", "--max-epochs", "1")
    train[train.index("--dev") + 1] = str(qa / "long.jsonl")  # dev: the long passage (searched whole)
    proc = run(*train)
    assert proc.returncode == 0, proc.stderr
    proc = run("task", "predict", str(qa / "model"), str(qa / "long.jsonl"), str(qa / "pred.json"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads((qa / "pred.json").read_text())["long"]
    assert answer and answer in context and len(answer.split()) <= 30


def read_squad_text(folder, record):
    path = folder / "one.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return read_squad(path)[0]


def test_match_flags_mark_the_words_the_other_text_has():
    e = SimpleNamespace(tokens=("The", "red", "car", "is", "Anna", "'s", "."),
                        question=("whose", "car", "is", "red", "?"))
    passage, question = match_flags([e, SimpleNamespace(tokens=("a",), question=("A", "b"))])
    assert passage.tolist() == [[0, 1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]]  # lower case; padding 0
    assert question.tolist() == [[0, 1, 1, 1, 0], [1, 0, 0, 0, 0]]
    # a training window: only the window's tokens are flagged, against the whole question
    assert match_flags([e], [(1, 3)])[0].tolist() == [[1, 1]]


def test_the_reader_reads_the_match_flags():
    torch.manual_seed(0)
    model = Reader(ModelConfig(kind="qa", n_labels=2, static_dim=3, static_size=5, hidden=4, match=True)).eval()
    assert model.encoder.input_size == 3 + 1
    ids, mask = torch.tensor([[2, 3, 4, 5]]), torch.ones(1, 4, dtype=torch.bool)
    question = (torch.tensor([[3, 6]]), None, mask[:, :2], torch.tensor([[1.0, 0.0]]))
    with torch.no_grad():
        flagged = model.logits((ids, None, mask, torch.tensor([[0.0, 1.0, 0.0, 0.0]])), question)
        unflagged = model.logits((ids, None, mask, torch.zeros(1, 4)), question)
    assert not torch.allclose(flagged[0], unflagged[0])


def test_a_reader_saved_before_match_flags_loads_and_answers(qa, monkeypatch, capsys):  # noqa: F811
    import pyelmo.tasks.train as train

    monkeypatch.setattr(train, "ModelConfig", lambda **k: ModelConfig(**{**k, "match": False}))
    assert main(_train_args(qa, qa / "train.json", "old", "--features", "static", "--max-epochs", "1")) == 0
    config = json.loads((qa / "old" / "config.json").read_text())
    del config["model"]["match"]  # as written before the field existed
    (qa / "old" / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["task", "evaluate", str(qa / "old"), "--test", str(qa / "dev.json"), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 6


def test_unset_training_options_take_the_kind_s_defaults(qa, capsys):  # noqa: F811
    from pyelmo.tasks.options import TrainOptions

    reader, tagger = TrainOptions().for_kind("qa"), TrainOptions().for_kind("tag")
    assert (reader.hidden, reader.batch_size, reader.lr, reader.dropout) == (64, 16, 2e-3, 0.4)
    assert (tagger.hidden, tagger.batch_size, tagger.lr, tagger.dropout) == (128, 32, 1e-3, 0.2)
    assert TrainOptions(hidden=8).for_kind("qa").hidden == 8  # given: kept
    assert main(_train_args(qa, qa / "train.json", "never", "--lr", "-0.1")) == 1
    assert "--lr must not be negative" in capsys.readouterr().err and not (qa / "never").exists()
