"""The ``cloze`` task data: reading comprehension from BBC News articles in the cloze style of
the CNN/Daily Mail corpus, written as SQuAD v1.1 JSON.

For each article (one per distinct title + body; splits from
:func:`pyelmo.corpus.splits.doc_split`, as the ``bbc`` task):

* the **passage** is the first ``PASSAGE_SENTENCES`` sentences of the body;
* the **questions** are the title and then the later body sentences (never one of the
  passage's), at most ``QUESTIONS_PER_ARTICLE``, each with one phrase replaced by
  ``@placeholder``;
* the phrase is a run of capitalised words (two or more letters each) that also occurs in the
  passage, not at a sentence start there (a question's first word is left out of a run when the
  passage has it in lower case: "The", "Dollar"); among a question's runs, one that occurs once in the
  passage wins, then the longest, then the first; the **answer** is its first such occurrence in
  the passage.

A dev or test article whose title or passage is also an article's of an earlier split (train,
then dev) is dropped: the source repeats some articles with small edits, and no test passage
may be seen in training.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable, NamedTuple

PLACEHOLDER = "@placeholder"
PASSAGE_SENTENCES = 5
QUESTIONS_PER_ARTICLE = 3
MIN_QUESTION_WORDS = 4  # besides the placeholder
#: Questions kept per split (None: all); a cap keeps whole articles, smallest SHA-1 of the doc id first.
CAPS = {"train": None, "dev": None, "test": None}

_RUN = re.compile(r"(?<![\w'\u2019-])[A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+)*(?![\w-])")
_OPENERS = "\"'\u201c\u2018("
_SENTENCE_START = frozenset(".!?" + _OPENERS)


class Article(NamedTuple):
    doc_id: str
    title: str
    body: str


def _norm(text: str) -> str:
    return " ".join(text.split())


def _occurrences(phrase: str, passage: str) -> list[int]:
    """Where ``phrase`` occurs in ``passage`` as whole words and not at a sentence start."""
    pattern = re.compile(r"(?<![\w'\u2019-])" + re.escape(phrase) + r"(?![\w-])")
    starts = []
    for m in pattern.finditer(passage):
        before = passage[: m.start()].rstrip()
        if before and before[-1] not in _SENTENCE_START:
            starts.append(m.start())
    return starts


def cloze_question(sentence: str, passage: str) -> tuple[str, str, int] | None:
    """``(question, answer text, answer_start)`` for one sentence, or None when no capitalised run
    of it occurs in ``passage`` (or too few words would be left around the placeholder)."""
    lower = set(re.findall(r"[a-z]+", passage))
    best = None
    for m in _RUN.finditer(sentence):
        begin, phrase = m.start(), m.group()
        first = phrase.split(" ", 1)[0]
        if not sentence[:begin].strip(_OPENERS) and first.lower() in lower:
            # a sentence's first word, capitalised only there ("The", "Dollar"): not part of a name
            begin, phrase = begin + len(first) + 1, phrase[len(first) + 1:]
        starts = _occurrences(phrase, passage) if phrase else []
        if not starts:
            continue
        rank = (len(starts) != 1, -len(phrase.split()), begin)
        if best is None or rank < best[0]:
            best = (rank, begin, phrase, starts[0])
    if best is None:
        return None
    _, begin, phrase, start = best
    question = sentence[:begin] + PLACEHOLDER + sentence[begin + len(phrase):]
    if len(question.split()) - 1 < MIN_QUESTION_WORDS:
        return None
    return question, phrase, start


def _sentences(body: str) -> list[str]:
    from pyelmo.corpus.sentences import split_sentences

    return [_norm(s) for paragraph in body.split("\n") if paragraph.strip()
            for s in split_sentences(_norm(paragraph))]


def article_entry(article: Article) -> dict | None:
    """One SQuAD ``data`` entry (title, one paragraph with its questions), or None without questions."""
    sentences = _sentences(article.body)
    if len(sentences) <= PASSAGE_SENTENCES:
        return None  # a later sentence is needed for more than the title's question
    passage = " ".join(sentences[:PASSAGE_SENTENCES])
    qas, seen = [], set()
    for sentence in [_norm(article.title), *sentences[PASSAGE_SENTENCES:]]:
        if len(qas) >= QUESTIONS_PER_ARTICLE:
            break
        found = None if sentence in passage else cloze_question(sentence, passage)
        if found is None or found[0] in seen:
            continue
        question, text, start = found
        assert passage[start : start + len(text)] == text, (article.doc_id, text)
        seen.add(question)
        qas.append({"id": f"{article.doc_id}/{len(qas)}", "question": question,
                    "answers": [{"text": text, "answer_start": start}]})
    if not qas:
        return None
    return {"title": _norm(article.title), "paragraphs": [{"context": passage, "qas": qas}]}


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _capped(entries: list[dict], cap: int | None) -> list[dict]:
    """Whole articles, smallest SHA-1 of the first question id first, until ``cap`` questions; original order."""
    if cap is None:
        return entries
    keep, n = set(), 0
    for i in sorted(range(len(entries)), key=lambda i: _sha(entries[i]["paragraphs"][0]["qas"][0]["id"])):
        qas = len(entries[i]["paragraphs"][0]["qas"])
        if n + qas > cap:
            continue
        keep.add(i)
        n += qas
    return [e for i, e in enumerate(entries) if i in keep]


def build_cloze(splits: dict[str, Iterable[Article]], caps: dict[str, int | None] = CAPS) -> dict[str, str]:
    """SQuAD v1.1 JSON text per split name from articles already split (in the order train, dev, test)."""
    from pyelmo.corpus.sentences import init_worker

    init_worker()  # the sentence splitter hands very long pieces to pysbd
    out, seen_texts, earlier = {}, set(), set()
    for name, articles in splits.items():
        entries, keys_here = [], set()
        for article in articles:
            key = _norm(article.title + "\n" + article.body).lower()
            if key in seen_texts:
                continue  # a repeated article counts once
            seen_texts.add(key)
            entry = article_entry(article)
            if entry is None:
                continue
            keys = {entry["title"].lower(), entry["paragraphs"][0]["context"].lower()}
            if keys & earlier:
                continue  # a near-copy of an article of an earlier split
            keys_here |= keys
            entries.append(entry)
        earlier |= keys_here
        data = _capped(entries, caps.get(name))
        out[name] = json.dumps({"version": "1.1", "data": data}, ensure_ascii=False) + "\n"
    return out
