"""A BiDAF-style reader (Seo et al. 2017, the ELMo paper's SQuAD baseline family) over static and ELMo features.

Question and passage tokens get features as in the other task models (a frozen static vector, with
dropout here, and/or a :class:`ScalarMix` of the cached biLM layers, here one mix for the passage and
one for the question) and, with ``config.match``, a flag: the token is in the other text
(:func:`match_flags`) -> a shared BiLSTM encoder (H for the passage, U for the question; with ``elmo_output``,
ELMo at the output of the task RNN too: ``H = [encoder(passage); ELMo_out(passage)]``, likewise U,
from a second pair of mixes of the same layers) -> BiDAF's attention:
similarity ``S_tj = w . [h_t; u_j; h_t * u_j]``, context-to-question ``U~ = softmax_j(S) U``,
question-to-context ``h~ = softmax_t(max_j S) H`` -> ``G = [H; U~; H * U~; H * h~]`` -> a modelling
BiLSTM (M) -> start logits from ``[G; M]``, end logits from ``[G; M2]`` with ``M2 = BiLSTM(M)``.
Loss: the cross-entropy of the gold start and end.  Decoding: the span ``start <= end`` with the
highest ``log p(start) + log p(end)`` no longer than ``max_answer_tokens``.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from pyelmo.tasks.data import Example
from pyelmo.tasks.features import make_batch
from pyelmo.tasks.model import ModelConfig, TaskModel, add_static, elmo_mixes, static_vectors

LABELS = ["start", "end"]  # what a reader's config.json lists as its labels
TRAIN_WINDOW = 400  # passage tokens a training example reads at most (train_window)
PREDICT_TOKENS = 16384  # padded passage tokens of a prediction batch (one longer passage goes alone)


def _lstm(lstm: nn.LSTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    lengths = mask.sum(1).cpu()
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]


class Reader(nn.Module):
    """The reader of a ``kind="qa"`` :class:`ModelConfig` (``static_table`` ``(V, d)``: the frozen word table)."""

    def __init__(self, config: ModelConfig, static_table: torch.Tensor | None = None) -> None:
        super().__init__()
        self.config = c = config
        in_dim = add_static(self, c, static_table) + int(c.match)
        self.output_mix = bool(c.elmo_layers and c.elmo_output)
        if c.elmo_layers:  # mixes 0, 1: passage, question at the encoder's input; 2, 3: at its output
            self.mixes = elmo_mixes(c, 4 if self.output_mix else 2)
            in_dim += c.elmo_dim
        if in_dim == int(c.match):
            raise ValueError("a reader needs static vectors, ELMo or both")
        h = c.hidden
        d = 2 * h + (c.elmo_dim if self.output_mix else 0)  # the width of H and U
        self.encoder = nn.LSTM(in_dim, h, batch_first=True, bidirectional=True)
        self.similarity = nn.Linear(3 * d, 1)
        self.modelling = nn.LSTM(4 * d, h, batch_first=True, bidirectional=True)
        self.end_lstm = nn.LSTM(2 * h, h, batch_first=True, bidirectional=True)
        self.start_out = nn.Linear(4 * d + 2 * h, 1)
        self.end_out = nn.Linear(4 * d + 2 * h, 1)
        self.dropout = nn.Dropout(c.dropout)

    elmo = TaskModel.elmo
    mix_penalty = TaskModel.mix_penalty

    def _encode(self, text, which: int) -> torch.Tensor:
        """H (``which`` 0: the passage) or U (1: the question), ``(B, T, d)``; ``text``: ``(static, layers,
        mask[, match])``, ``match`` the ``(B, T)`` flags of :func:`match_flags`."""
        static, layers, mask = text[:3]
        parts = [self.dropout(static_vectors(self, static))] if self.config.static_dim else []
        if self.config.elmo_layers:
            parts.append(self.elmo(layers, which, mask))
        if self.config.match:
            parts.append(text[3].unsqueeze(-1))
        out = _lstm(self.encoder, torch.cat(parts, dim=-1), mask)
        if self.output_mix:
            out = torch.cat([out, self.elmo(layers, 2 + which, mask)], dim=-1)
        return self.dropout(out)

    def logits(self, passage, question) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end logits ``(B, T)`` (padding -inf); ``passage``, ``question``: ``(static, layers, mask[,
        match])``."""
        pmask, qmask = passage[2], question[2]
        H, U = self._encode(passage, 0), self._encode(question, 1)  # (B, T, d), (B, J, d)
        w = self.similarity.weight.view(3, -1)
        S = ((H @ w[0]).unsqueeze(2) + (U @ w[1]).unsqueeze(1) + (H * w[2]) @ U.transpose(1, 2)
             + self.similarity.bias)  # (B, T, J)
        S = S.masked_fill(~qmask.unsqueeze(1), float("-inf"))
        c2q = S.softmax(-1) @ U
        b = S.max(-1).values.masked_fill(~pmask, float("-inf")).softmax(-1)  # (B, T)
        q2c = (b.unsqueeze(1) @ H).expand_as(H)
        G = torch.cat([H, c2q, H * c2q, H * q2c], dim=-1)
        M = self.dropout(_lstm(self.modelling, G, pmask))
        M2 = self.dropout(_lstm(self.end_lstm, M, pmask))
        start = self.start_out(torch.cat([G, M], -1)).squeeze(-1).masked_fill(~pmask, float("-inf"))
        end = self.end_out(torch.cat([G, M2], -1)).squeeze(-1).masked_fill(~pmask, float("-inf"))
        return start, end

    def loss(self, passage, question, spans: torch.Tensor) -> torch.Tensor:
        start, end = self.logits(passage, question)
        return nn.functional.cross_entropy(start, spans[:, 0]) + nn.functional.cross_entropy(end, spans[:, 1])

    @torch.no_grad()
    def predict(self, passage, question, max_tokens: int) -> list[tuple[int, int]]:
        """The best span ``(start, end)`` per passage, ``start <= end < start + max_tokens``."""
        return best_spans(*self.logits(passage, question), max_tokens)


def best_spans(start: torch.Tensor, end: torch.Tensor, max_tokens: int) -> list[tuple[int, int]]:
    """Per row of the ``(B, T)`` logits, the span ``start <= end < start + max_tokens`` with the highest
    ``log p(start) + log p(end)``; ties go to the earliest start, then the shortest span.  The scores are
    ``(B, T, K)``, one per start and length ``K = min(max_tokens, T)``: linear in the passage."""
    start, end = start.log_softmax(-1), end.log_softmax(-1)
    T = start.shape[1]
    K = min(max_tokens, T)
    padded = nn.functional.pad(end, (0, K - 1), value=float("-inf"))  # an end past the passage: never chosen
    scores = start.unsqueeze(2) + padded.unfold(1, K, 1)  # [b, t, k]: start t, end t + k
    best = scores.flatten(1).argmax(-1)
    return [(int(i) // K, int(i) // K + int(i) % K) for i in best]


def match_flags(examples, windows=None) -> tuple[torch.Tensor, torch.Tensor]:
    """DrQA's exact-match feature (Chen et al. 2017): 1.0 for a passage token whose lower case is a
    question token's, and likewise for the question; ``(B, T)`` and ``(B, J)``, padding 0."""
    windows = windows or [(0, len(e.tokens)) for e in examples]
    passages = [e.tokens[a:b] for e, (a, b) in zip(examples, windows)]
    out = []
    for texts, others in ((passages, [e.question for e in examples]), ([e.question for e in examples], passages)):
        flags = torch.zeros(len(texts), max(len(t) for t in texts))
        for i, (text, other) in enumerate(zip(texts, others)):
            seen = {w.lower() for w in other}
            flags[i, :len(text)] = torch.tensor([float(w.lower() in seen) for w in text])
        out.append(flags)
    return out[0], out[1]


def _predict_batches(lengths: Sequence[int], batch_size: int):
    """Indices by passage length, in batches of at most ``batch_size`` and ``PREDICT_TOKENS`` padded tokens."""
    batch: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batch and (len(batch) == batch_size or (len(batch) + 1) * lengths[i] > PREDICT_TOKENS):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def train_window(example) -> tuple[int, int]:
    """The passage tokens ``[a, b)`` a training step reads: all of a passage of at most ``TRAIN_WINDOW``
    tokens, else ``TRAIN_WINDOW`` of them (more for a longer answer) around the gold span, placed by a
    hash of the id (the same every epoch), so that memory does not grow with the passage."""
    n, (first, last) = len(example.tokens), example.span
    width = max(TRAIN_WINDOW, last - first + 1)
    if n <= width:
        return 0, n
    lo, hi = max(0, last - width + 1), min(first, n - width)
    a = lo + zlib.crc32(example.id.encode("utf-8")) % (hi - lo + 1)
    return a, a + width


class QARunner:
    """A reader with its features: predicts answer texts and scores them (trained or loaded); ``kind``: qa's
    :class:`pyelmo.tasks.kind.TaskKind`."""

    def __init__(self, kind, model: Reader, labels: list[str], static, cache, saved: dict | None = None,
                 max_answer_tokens: int = 30) -> None:
        self.kind, self.model, self.labels, self.saved = kind, model, labels, saved
        self.static, self.cache = static, cache
        self.max_answer_tokens = (saved or {}).get("options", {}).get("max_answer_tokens", max_answer_tokens)

    def _batch(self, examples, labelled: bool):
        """``(passage, question, gold spans or None)``; passage and question are ``(static, layers, mask)``.
        ``labelled`` (training): each passage only its :func:`train_window`, the spans in it."""
        windows = [train_window(e) for e in examples] if labelled else None
        parts = []
        for texts, win in (([e.tokens for e in examples], windows), ([e.question for e in examples], None)):
            b = make_batch([Example(t, None, 0) for t in texts], self.static, self.cache, windows=win)
            parts.append((b.static, b.layers, b.mask))
        if self.model.config.match:
            parts = [(*part, flags) for part, flags in zip(parts, match_flags(examples, windows))]
        spans = torch.tensor([(e.span[0] - a, e.span[1] - a) for e, (a, _) in zip(examples, windows)]) \
            if windows else None
        return parts[0], parts[1], spans

    def loss(self, examples) -> torch.Tensor:
        return self.model.loss(*self._batch(examples, True))

    def predict(self, examples: Sequence, batch_size: int = 32, desc: str = "") -> list[str]:
        """The answer text per example (an exact substring of its context), in input order; a batch holds
        at most ``batch_size`` passages and (unless one is longer) ``PREDICT_TOKENS`` padded passage tokens."""
        if self.cache is not None:
            self.cache.add([t for e in examples for t in e.texts], desc=f"biLM layers {desc}".strip())
        self.model.eval()
        out: list = [None] * len(examples)
        for rows in _predict_batches([len(e.tokens) for e in examples], batch_size):
            passage, question, _ = self._batch([examples[i] for i in rows], False)
            for i, (a, b) in zip(rows, self.model.predict(passage, question, self.max_answer_tokens)):
                out[i] = examples[i].answer_text(a, b)
        return out

    def evaluate(self, examples: Sequence, desc: str = "") -> dict:
        """SQuAD v1.1's exact match and F1 (percent) on answered ``examples``."""
        return self.kind.metrics(examples, self.predict(examples, desc=desc))

    def score(self, metrics: dict) -> float:
        """The dev score early stopping maximises (the kind's, percent)."""
        return self.kind.dev_score(metrics)
