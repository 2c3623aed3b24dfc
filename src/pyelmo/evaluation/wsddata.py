"""The WSD data (paper section 5.3): WordNet 3.0's example sentences as contexts of ambiguous lemmas.

For every single-word, polysemous lemma of each part of speech, the example sentences of
each of its senses that contain the lemma or an inflection of it (WordNet's ``*.exc``
exception lists and detachment rules, i.e. NLTK's morphy), tokenized Moses-style as the
corpus. Only lemmas with at least two senses that have such an example are kept. Each
context is assigned to train/dev/test by :func:`wsd_split` (60/10/30). The method and the
evaluation are :mod:`pyelmo.evaluation.wsd`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from pyelmo.corpus.splits import hash_bucket
from pyelmo.corpus.wordnet import wordnet_dir
from pyelmo.evaluation.common import EvaluationError, tokenize
from pyelmo.fileio import write_text_atomic

POS_NAMES = {"n": "noun", "v": "verb", "a": "adjective", "r": "adverb"}
DATASET_VERSION = "wsd-wordnet-examples-2"

#: WordNet's lexicographer files (the ``lexnames`` file, absent from Debian's wordnet-base).
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_LEX_POS = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}
_WN_FILES = [f"{k}.{p}" for k in ("data", "index") for p in ("noun", "verb", "adj", "adv")] + \
    [f"{p}.exc" for p in ("noun", "verb", "adj", "adv")] + ["cntlist.rev", "lexnames"]


# --------------------------------------------------------------------------- the split


def wsd_split(pos: str, lemma: str, sentence: str) -> str:
    """THE train/dev/test split of a WSD context: ``sha1("pos|lemma|sentence") mod 100``:
    ``< 60`` train, ``< 70`` dev, else test."""
    b = hash_bucket(f"{pos}|{lemma}|{sentence}", 100)
    return "train" if b < 60 else ("dev" if b < 70 else "test")


# --------------------------------------------------------------------------- WordNet via NLTK


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{_LEX_POS[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES))


def prepare_wordnet_dir(source: str | os.PathLike, work_dir: str | os.PathLike) -> Path:
    """A folder NLTK's ``WordNetCorpusReader`` can read: copies of the database files of
    ``source`` plus a ``lexnames`` file when the source lacks one."""
    src = wordnet_dir(source)
    h = hashlib.sha1(str(src.resolve()).encode())
    for name in _WN_FILES:  # a changed source gets a fresh copy
        if (src / name).exists():
            st = (src / name).stat()
            h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    key = h.hexdigest()[:12]
    dest = Path(work_dir) / f"wordnet-nltk-{key}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    for name in _WN_FILES:
        s, d = src / name, dest / name
        if d.exists():
            d.unlink()
        if s.exists():
            shutil.copyfile(s, d)  # NLTK refuses symbolic and hard links
        elif name.endswith(".exc"):
            d.write_text("", encoding="utf-8")
        elif name == "lexnames":
            d.write_text(lexnames_text(), encoding="utf-8")
    marker.write_text(str(src) + "\n", encoding="utf-8")
    return dest


def open_wordnet(source: str | os.PathLike, work_dir: str | os.PathLike):
    """NLTK's ``WordNetCorpusReader`` on a local WordNet 3.0 (no NLTK download involved)."""
    try:
        import nltk
        from nltk.corpus.reader.wordnet import WordNetCorpusReader
    except ImportError:  # pragma: no cover
        raise EvaluationError("the WSD evaluation needs nltk: pip install 'pyelmo[eval]'") from None

    class _LocalWordNet(WordNetCorpusReader):
        """Reads WordNet 3.0 itself, so no mapping from another WordNet version is needed."""

        def map_wn(self, version: str = "wordnet"):
            return None

    root = prepare_wordnet_dir(source, work_dir)
    resolved = str(root.resolve())
    if resolved not in [str(p) for p in nltk.data.path]:
        nltk.data.path.append(resolved)  # NLTK only reads corpora under its data path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _LocalWordNet(resolved, None)


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class WsdInstance:
    """One sense-labelled context: the target is ``tokens[index]``."""

    lemma: str
    pos: str  # n, v, a (adjectives and satellites), r
    sense: str  # synset name, e.g. play.n.01
    sense_rank: int  # 0 = WordNet's first (most frequent) sense of the lemma
    first_sense: str
    n_senses: int
    tokens: tuple[str, ...]
    index: int
    split: str

    @property
    def key(self) -> tuple[str, str]:
        return self.lemma, self.pos


def find_target(tokens: Sequence[str], lemma: str, pos: str, wn) -> int | None:
    """Index of the first token that is ``lemma`` or an inflection of it (morphy), else None."""
    for i, tok in enumerate(tokens):
        low = tok.lower()
        if low == lemma:
            return i
        if low.isalpha() or "-" in low or "'" in low:
            try:
                if lemma in wn._morphy(low, pos):
                    return i
            except (KeyError, IndexError):
                continue
    return None


def lemma_senses(wn, lemma: str, pos: str) -> list:
    """The synsets of exactly ``lemma`` (not of other base forms) in WordNet's order."""
    return [s for s in wn.synsets(lemma, pos) if any(l.name().lower() == lemma for l in s.lemmas())]


def build_instances(wn, progress: bool = False, limit_lemmas: int | None = None) -> list[WsdInstance]:
    """Every sense-labelled context of WordNet's example sentences (see the module docstring)."""
    from tqdm import tqdm

    token_cache: dict[str, list[str]] = {}
    out: list[WsdInstance] = []
    lemmas = [(pos, lemma) for pos in POS_NAMES for lemma in sorted(set(wn.all_lemma_names(pos)))
              if "_" not in lemma and " " not in lemma]
    kept = 0
    for pos, lemma in tqdm(lemmas, desc="WordNet examples", unit="lemma", disable=not progress):
        if limit_lemmas is not None and kept >= limit_lemmas:
            break
        synsets = lemma_senses(wn, lemma, pos)
        if len(synsets) < 2:
            continue
        found: list[WsdInstance] = []
        for rank, syn in enumerate(synsets):
            for example in syn.examples():
                toks = token_cache.get(example)
                if toks is None:
                    toks = token_cache[example] = tokenize(example)
                idx = find_target(toks, lemma, pos, wn)
                if idx is None:
                    continue
                found.append(WsdInstance(lemma, pos, syn.name(), rank, synsets[0].name(), len(synsets),
                                         tuple(toks), idx, wsd_split(pos, lemma, example)))
        if len({i.sense for i in found}) >= 2:
            out.extend(found)
            kept += 1
    return out


def load_instances(wordnet_source: str | os.PathLike, work_dir: str | os.PathLike, progress: bool = True,
                   limit_lemmas: int | None = None) -> list[WsdInstance]:
    """``build_instances`` with its result cached as JSON in ``work_dir`` (keyed by the files)."""
    src = wordnet_dir(wordnet_source)
    h = hashlib.sha1(DATASET_VERSION.encode())
    for name in sorted(_WN_FILES):
        p = src / name
        if p.exists():
            st = p.stat()
            h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    h.update(str(limit_lemmas).encode())
    cache = Path(work_dir) / f"wsd-instances-{h.hexdigest()[:16]}.json"
    if cache.exists():
        try:
            rows = json.loads(cache.read_text(encoding="utf-8"))
            return [WsdInstance(**{**r, "tokens": tuple(r["tokens"])}) for r in rows]
        except (ValueError, TypeError, KeyError):
            pass
    wn = open_wordnet(src, work_dir)
    instances = build_instances(wn, progress=progress, limit_lemmas=limit_lemmas)
    if not instances:
        raise EvaluationError(f"no sense-labelled WordNet example sentences found in {src}")
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    write_text_atomic(cache, json.dumps([asdict(i) for i in instances], ensure_ascii=False))
    return instances
