"""``classify``: a label per text.  Data: UTF-8 TSV, ``label<TAB>text`` per line (:func:`read_classify`).
Model: :class:`pyelmo.tasks.model.Classifier`.  Metrics: accuracy and macro-F1.  (torch is imported only
when a model runs: the command line lists the kinds without it.)"""

from __future__ import annotations

from pyelmo.tasks.data import MIN_CONLL_EXAMPLES, classify_output, read_classify, swap_guess
from pyelmo.tasks.kind import KindOption, TaskKind, register
from pyelmo.tasks.metrics import classify_metrics


class Classify(TaskKind):
    name, order, extension, context = "classify", 1, "tsv", "sentence"
    help = "classify (TSV)"
    description = ("BiLSTM + max pooling + linear layer.  Data: UTF-8 TSV, label<TAB>text per line (text tokenized "
                   "with pyelmo's tokenizer; --pretokenized: split on whitespace).")
    predict_help = ("INPUT has one text per line (a label<TAB> column, if any, is ignored; blank lines are skipped); "
                    "OUTPUT gets label<TAB>probability<TAB>text per text, the text as in INPUT.")
    options = (KindOption("--pretokenized", "pretokenized", "the text is already tokenized (split on whitespace)"),)

    def read(self, path, pretokenized=False, labelled=True) -> list:
        return read_classify(path, pretokenized, labelled)

    def count(self, text) -> int:
        return text.count("\n")

    def units(self, examples) -> list[str]:
        return [e.label for e in examples]

    def layout_guesses(self, examples, path):
        n, labels = len(examples), len({e.label for e in examples})
        blank_gaps = any(b.line > a.line + 1 for a, b in zip(examples, examples[1:]))
        if blank_gaps and sum(len(e.tokens) == 1 for e in examples) >= 0.9 * n:
            yield n >= MIN_CONLL_EXAMPLES, (f"{path} looks like a CoNLL tag file (one token<TAB>tag per line, blank "
                                            f"lines between sentences), not label<TAB>text: train a tagger with "
                                            f"'pyelmo task train tag'")
        texts = len({e.tokens for e in examples})
        looks, strong = swap_guess(n, labels, texts)
        if looks:
            yield strong, (f"{path}: {labels} different labels and {texts} different texts in {n} examples: the "
                           f"first column should be the label (label<TAB>text); is the text first?")

    def model(self, config, static_table=None):
        from pyelmo.tasks.model import Classifier

        return Classifier(config, static_table)

    def label_ids(self, examples, index, length):
        import torch

        return torch.tensor([index.get(e.label, -1) for e in examples])

    def named(self, prediction, labels):
        label, p = prediction
        return labels[label], p

    def metrics(self, examples, predictions) -> dict:
        return classify_metrics([e.label for e in examples], [p[0] for p in predictions])

    def write(self, path, examples, predictions) -> str:
        return classify_output(path, examples, predictions)


register(Classify())
