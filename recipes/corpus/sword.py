"""SWORD Bible and commentary modules (Debian's ``sword-*`` packages): their verse files and OSIS/ThML markup."""

from __future__ import annotations

import html
import re
import struct
import zlib
from pathlib import Path
from typing import Iterator

from pyelmo.errors import InputError
from recipes.corpus.textclean import TAG, squash

_OSIS_DROP = re.compile(r"<(note|rdg|reference type=\"annotateRef\")\b[^>]*?(?<!/)>.*?</\1\s*>", re.S)
_OSIS_DROP2 = re.compile(r"<note\b[^>]*?(?<!/)>.*?</note\s*>", re.S)
_OSIS_BREAK = re.compile(
    r"</?(?:div|p|lg|title|head|chapter|verse|row|cell|table|list|item|milestone|br|scripRef\s+passage[^>]*|h\d)\b[^>]*>",
    re.I,
)
_OSIS_SPACE = re.compile(r"</?(?:l|lb|w|seg|transChange|q|foreign|name|hi|a|i|b|em|span|font|sup|sub)\b[^>]*>", re.I)
_VERSE_NO = re.compile(r"^(?:Verses?|Ver\.|v\.)\s*\d+(?:\s*[-\u2013,:]\s*\d+)*\.?\s*|^\(?\d+(?:[-\u2013:]\d+)*\)\s*|^\d+\.\s+(?=[A-Z])")


def osis_to_paragraphs(markup: str) -> list[str]:
    """Plain-text paragraphs from OSIS/ThML markup: notes dropped, block tags break paragraphs."""
    s = _OSIS_DROP2.sub(" ", markup)
    s = _OSIS_DROP.sub(" ", s)
    s = _OSIS_BREAK.sub("\n\n", s)
    s = _OSIS_SPACE.sub("", s)
    s = TAG.sub(" ", s)
    s = html.unescape(s)
    out = []
    for par in re.split(r"\n\s*\n", s):
        par = squash(par)
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
