"""R's serialization format (``.rds``/``.rdb`` payloads, lazy-load databases), data types only.

Used to read the R data packages among the pretraining sources (janeaustenr, modeldata).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from pathlib import Path
from typing import Iterable, Iterator

from pyelmo.errors import InputError


class RFormatError(InputError):
    """An R serialization stream that this reader does not understand."""


class RVector(list):
    """An R vector as a Python list, with its R attributes in ``attrs``."""

    def __init__(self, values=(), rtype: int = 0, attrs: dict | None = None) -> None:
        super().__init__(values)
        self.rtype = rtype
        self.attrs = attrs or {}


_PAIRLISTS = (2, 3, 5, 6, 17)  # LISTSXP, CLOSXP, PROMSXP, LANGSXP, DOTSXP


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
        """The next object of the stream."""
        flags = self.int()
        t = flags & 0xFF
        if t in (254, 242, 253, 241, 251, 252, 247):  # NILVALUE, envs, missing, unbound
            return None
        if t == 255:  # REFSXP
            return self._reference(flags)
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
            return self._string()
        if t == 4:  # ENVSXP
            return self._environment()
        if t in _PAIRLISTS:
            return self._pairlist(flags)
        if t == 238:  # ALTREP: class info, state, attributes
            self.item()
            state = self.item()
            attr = self.item()
            return RVector(state if isinstance(state, list) else [state], t, self._attrs(attr))
        v = self._vector(t)
        if flags & (1 << 9):
            v.attrs = self._attrs(self.item())
        return v

    def _reference(self, flags: int):
        idx = flags >> 8
        if idx == 0:
            idx = self.int()
        if not 0 < idx <= len(self.refs):
            raise RFormatError("bad R reference index")
        return self.refs[idx - 1]

    def _string(self) -> str | None:
        n = self.int()
        if n == -1:
            return None
        raw = self._take(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")

    def _environment(self) -> RVector:
        """Locked, enclosure, frame, hashtab, attributes (inert: nothing is evaluated)."""
        env = RVector([], 4)
        self.refs.append(env)
        self.int()
        env.extend([self.item(), self.item(), self.item()])
        env.attrs = self._attrs(self.item())
        return env

    def _pairlist(self, flags: int) -> RVector:
        """A pairlist-like object: ``(tag, car)`` pairs along the CDR chain."""
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        out = RVector([], 2)
        while True:
            attrs = self.item() if has_attr else None
            tag = self.item() if has_tag else None
            car = self.item()
            out.append((tag, car))
            if attrs is not None and not out.attrs:
                out.attrs = self._attrs(attrs)
            nflags = self.int()
            if (nflags & 0xFF) in _PAIRLISTS:
                has_attr = bool(nflags & (1 << 9))
                has_tag = bool(nflags & (1 << 10))
                continue
            self.i -= 4
            self.item()  # the final CDR (normally NULL)
            return out

    def _vector(self, t: int) -> RVector:
        """A vector of type ``t`` (its attributes follow, read by ``item``)."""
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self.length()
            vals = list(struct.unpack(f">{n}i", self._take(4 * n)))
            return RVector([None if x == -(2**31) else x for x in vals], t)
        if t == 14:
            n = self.length()
            return RVector(struct.unpack(f">{n}d", self._take(8 * n)), t)
        if t == 15:
            n = self.length()
            return RVector(struct.unpack(f">{2 * n}d", self._take(16 * n)), t)
        if t == 24:
            return RVector(self._take(self.length()), t)
        if t in (16, 19, 20):  # STRSXP, VECSXP, EXPRSXP
            n = self.length()
            return RVector([self.item() for _ in range(n)], t)
        raise RFormatError(f"unsupported R object type {t}")

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
