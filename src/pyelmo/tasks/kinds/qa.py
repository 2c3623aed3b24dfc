"""``qa``: reading comprehension, an answer span per question.  Data: SQuAD v1.1 JSON or JSONL
(:mod:`pyelmo.tasks.squad`).  Model: the BiDAF-style reader of :mod:`pyelmo.tasks.reader`.  Metrics: SQuAD's
exact match and F1; predictions: SQuAD's ``{"id": "answer"}`` file."""

from __future__ import annotations

import json

from pyelmo.tasks.kind import KindOption, TaskKind, register
from pyelmo.tasks.metrics import squad_metrics
from pyelmo.tasks.squad import predictions_json, read_squad


class QA(TaskKind):
    name, order, extension, context = "qa", 3, "json", "sentence"
    help = "qa (SQuAD)"
    description = ("reading comprehension, a BiDAF-style reader (BiLSTM encoder, bidirectional attention, modelling "
                   "BiLSTM, start and end of the answer).  Data: SQuAD v1.1 JSON (data -> paragraphs -> context, "
                   "qas -> id, question, answers[text, answer_start]) or JSONL with id, context, question, answers "
                   "per line.  evaluate: SQuAD's exact match and F1; predict: SQuAD's {\"id\": \"answer\"} file.")
    predict_help = ("INPUT is SQuAD JSON or JSONL (answers, if any, are ignored); OUTPUT is SQuAD's prediction file, "
                    "{\"id\": \"answer text\"}, each answer an exact substring of its context.")
    #: The reader's are chosen for small sets as well as the cloze set (docs/TASKS.md, "A small set: the
    #: learning curve"): its modelling BiLSTM reads 8 x hidden inputs a token and dominates its cost.
    defaults = {"hidden": 64, "batch_size": 16, "lr": 2e-3, "dropout": 0.4}
    model_switches = {"match": True}
    options = (KindOption("--max-answer-tokens", "max_answer_tokens",
                          "the longest answer (in tokens) the reader predicts (default 30)", int, "N"),)

    def read(self, path, pretokenized=False, labelled=True) -> list:
        """Questions; labelled ones each need an answer (to train on, or to score)."""
        return read_squad(path, labelled, training=labelled)

    def count(self, text) -> int:
        """The questions of a SQuAD v1.1 JSON text."""
        return sum(len(p["qas"]) for d in json.loads(text)["data"] for p in d["paragraphs"])

    def labels(self, examples) -> list[str]:
        from pyelmo.tasks.reader import LABELS

        return list(LABELS)

    def check(self, examples, path, training=True, trust_format=False) -> None:
        """Nothing to guess: read_squad checked the answers, and a JSON file says what it is."""

    def unseen(self, examples, labels):
        return 0, []

    def model(self, config, static_table=None):
        from pyelmo.tasks.reader import Reader

        return Reader(config, static_table)

    def runner(self, model, labels, static, cache, saved=None):
        from pyelmo.tasks.reader import QARunner

        return QARunner(self, model, labels, static, cache, saved)

    def metrics(self, examples, predictions) -> dict:
        return squad_metrics([e.answers for e in examples], predictions)

    def dev_score(self, metrics: dict) -> float:
        return metrics["f1"]

    def headline(self, metrics: dict) -> str:
        return "F1"

    def write(self, path, examples, predictions) -> str:
        return predictions_json(examples, predictions)


register(QA())
