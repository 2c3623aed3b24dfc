"""``tag``: a tag per token.  Data: CoNLL style, ``token<TAB>tag`` per line, a blank line between sentences
(:func:`read_tagged`).  Model: :class:`pyelmo.tasks.model.Tagger` (BiLSTM + CRF).  Metrics: token accuracy, and
span F1 for BIO/BIOES tags."""

from __future__ import annotations

from pyelmo.tasks.data import MIN_SENTENCE, WARN_SENTENCE, read_tagged, swap_guess, tagged_output
from pyelmo.tasks.kind import TaskKind, register
from pyelmo.tasks.metrics import tag_metrics


class Tag(TaskKind):
    name, order, extension = "tag", 2, "conll"  # context: the default, "line" (an example is one sentence)
    help = "tag (CoNLL)"
    description = ("BiLSTM + CRF.  Data: CoNLL style, token<TAB>tag per line (the tag is the last column), a blank "
                   "line between sentences, -DOCSTART- lines skipped.")
    predict_help = ("INPUT is CoNLL style (the first column is the token); OUTPUT is the input with the predicted tag "
                    "appended as the last column.")
    unit_names = ("token has the tag", "tokens have")

    def read(self, path, pretokenized=False, labelled=True) -> list:
        return read_tagged(path, labelled)

    def count(self, text) -> int:
        return text.count("\n\n")

    def units(self, examples) -> list[str]:
        return [t for e in examples for t in e.label]

    def layout_guesses(self, examples, path):
        tokens = sum(len(e.tokens) for e in examples)
        tags = len({t for e in examples for t in e.label})
        words = len({t for e in examples for t in e.tokens})
        looks, strong = swap_guess(tokens, tags, words)
        if looks:
            yield strong, (f"{path}: {tags} different tags and {words} different tokens in {tokens} lines: the "
                           f"last column should be the tag (token<TAB>tag); is this a classify file?")
        if len(examples) == 1 and tokens >= WARN_SENTENCE:
            yield tokens >= MIN_SENTENCE, (f"{path}: no blank line between sentences, so all {tokens} lines are one "
                                           f"sentence: a tag file has a blank line after each sentence (is this a "
                                           f"classify file? 'pyelmo task train classify' reads label<TAB>text)")

    def model(self, config, static_table=None):
        from pyelmo.tasks.model import Tagger

        return Tagger(config, static_table)

    def label_ids(self, examples, index, length):
        import torch

        labels = torch.full((len(examples), length), -1, dtype=torch.long)
        for i, e in enumerate(examples):
            labels[i, :len(e.label)] = torch.tensor([index.get(t, -1) for t in e.label])
        return labels

    def named(self, prediction, labels):
        return [labels[t] for t in prediction]

    def metrics(self, examples, predictions) -> dict:
        return tag_metrics([e.label for e in examples], predictions)

    def dev_score(self, metrics: dict) -> float:
        """Span F1 for BIO/BIOES tags, else token accuracy."""
        return metrics["span_f1"] if metrics.get("span_f1") is not None else metrics["accuracy"]

    def headline(self, metrics: dict) -> str:
        return "span F1" if metrics.get("span_f1") is not None else "accuracy"

    def write(self, path, examples, predictions) -> str:
        return tagged_output(path, examples, predictions)


register(Tag())
