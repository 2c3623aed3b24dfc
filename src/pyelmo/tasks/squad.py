"""Reading-comprehension data in SQuAD v1.1's format: a reader keeping each token's character span.

* JSON: ``{"data": [{"paragraphs": [{"context": ..., "qas": [{"id", "question", "answers":
  [{"text", "answer_start"}]}]}]}]}`` (SQuAD v1.1 as released);
* JSONL: one question per line, ``{"id", "context", "question", "answers": [...]}``.

Contexts are tokenized with :func:`pyelmo.text.tokenize.tokenize` one whitespace-separated chunk at a
time, and every token keeps its ``(start, end)`` character span in the raw context (a chunk whose
tokens the tokenizer normalised is kept whole), so a predicted token span is an exact substring.
Every error names the file and the item (a question id, or a line of a JSONL file).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pyelmo.errors import InputError
from pyelmo.fileio import check_input_file


@dataclass(frozen=True)
class QAExample:
    """One question about a context: its tokens, their character spans, the gold answers and the first one's tokens."""

    id: str
    context: str
    tokens: tuple[str, ...]              # the context's tokens
    offsets: tuple[tuple[int, int], ...]  # each context token's [start, end) in ``context``
    question: tuple[str, ...]            # the question's tokens
    answers: tuple[str, ...]             # gold answer texts (empty when unlabelled)
    span: tuple[int, int] | None         # token [start, end] (inclusive) of the first answer

    @property
    def texts(self) -> tuple[tuple[str, ...], ...]:
        """What the biLM reads: the context and the question."""
        return (self.tokens, self.question)

    def answer_text(self, start: int, end: int) -> str:
        """The context's characters covered by tokens ``start..end`` (inclusive)."""
        return self.context[self.offsets[start][0]:self.offsets[end][1]]


def tokenize_with_offsets(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The tokens of ``text`` and each one's ``[start, end)`` character span in it."""
    from pyelmo.text.tokenize import tokenize

    tokens, offsets = [], []
    for chunk in re.finditer(r"\S+", text):
        pieces, spans, pos = tokenize(chunk.group()) or [chunk.group()], [], 0
        for piece in pieces:
            at = chunk.group().find(piece, pos)
            if at < 0:  # normalised by the tokenizer (quotes, control characters): keep the chunk whole
                pieces, spans = [chunk.group()], [(0, len(chunk.group()))]
                break
            spans.append((at, at + len(piece)))
            pos = at + len(piece)
        tokens += pieces
        offsets += [(chunk.start() + a, chunk.start() + b) for a, b in spans]
    return tokens, offsets


def _records(path: Path) -> list[tuple[str, dict, str]]:
    """``(where, question record, context)`` for each question of a SQuAD JSON or JSONL file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not valid UTF-8") from None
    out = []
    lines = text.splitlines()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        doc = None
        first = next((line for line in lines if line.strip()), "")
        try:
            json.loads(first)
        except json.JSONDecodeError:  # not JSONL either
            raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if doc is not None and not (isinstance(doc, dict) and "context" in doc):
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise InputError(f"{path}: expected SQuAD JSON ({{\"data\": [...]}}) or JSONL")
        for a, article in enumerate(doc["data"]):
            paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
            if not isinstance(paragraphs, list):
                raise InputError(f"{path}: data[{a}] has no 'paragraphs' list")
            for p, para in enumerate(paragraphs):
                where = f"data[{a}].paragraphs[{p}]"
                if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                    raise InputError(f"{path}: {where} has no 'qas' list")
                out += [(f"{where}.qas[{q}]", qa, para.get("context")) for q, qa in enumerate(para["qas"])]
        return out
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            qa = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(qa, dict):
            raise InputError(f"{path}:{number}: expected a JSON object per line")
        out.append((f"line {number}", qa, qa.get("context")))
    return out


def read_squad(path: str | os.PathLike, labelled: bool = True, training: bool = False) -> list[QAExample]:
    """The questions of a SQuAD v1.1 JSON or JSONL file; ``training``: every question needs an answer."""
    p = check_input_file(path, "data file")
    examples, seen = [], set()
    for where, qa, context in _records(p):
        qid = qa.get("id")
        if not isinstance(qid, str) or not qid:
            raise InputError(f"{p}: {where}: no 'id'")
        where = f"{where} (id {qid})"
        if qid in seen:
            raise InputError(f"{p}: {where}: duplicate id")
        seen.add(qid)
        if not isinstance(context, str) or not context.strip():
            raise InputError(f"{p}: {where}: empty context")
        question = qa.get("question")
        q_tokens = tokenize_with_offsets(question)[0] if isinstance(question, str) else []
        if not q_tokens:
            raise InputError(f"{p}: {where}: empty question")
        tokens, offsets = tokenize_with_offsets(context)
        answers = qa.get("answers", []) if labelled else []
        if not isinstance(answers, list):
            raise InputError(f"{p}: {where}: 'answers' is not a list")
        texts, span = [], None
        for k, answer in enumerate(answers):
            text, start = (answer.get("text"), answer.get("answer_start")) if isinstance(answer, dict) else (0, 0)
            if not isinstance(text, str) or not text.strip() or not isinstance(start, int) or isinstance(start, bool):
                raise InputError(f"{p}: {where}: answers[{k}] needs a non-empty 'text' and an integer 'answer_start'")
            if context[start:start + len(text)] != text or start < 0:
                raise InputError(f"{p}: {where}: answers[{k}]: the context at answer_start {start} is "
                                 f"{context[max(start, 0):max(start, 0) + len(text)]!r}, not {text!r}")
            texts.append(text)
            if span is None:
                span = _token_span(offsets, start, start + len(text))
        if training and not texts:
            raise InputError(f"{p}: {where}: no answer (every training question needs one)")
        examples.append(QAExample(qid, context, tuple(tokens), tuple(offsets), tuple(q_tokens), tuple(texts), span))
    if not examples:
        raise InputError(f"{p}: no questions (the file is empty)")
    return examples


def _token_span(offsets, start: int, end: int) -> tuple[int, int]:
    """The tokens that overlap the characters ``[start, end)``: ``(first, last)``."""
    inside = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
    return inside[0], inside[-1]


def predictions_json(examples, answers) -> str:
    """SQuAD's prediction file: ``{"id": "answer text"}``."""
    return json.dumps({e.id: a for e, a in zip(examples, answers)}, ensure_ascii=False, indent=1) + "\n"
