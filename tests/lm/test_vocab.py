from collections import Counter

import pytest

from pyelmo.cli import main
from pyelmo.lm.vocab import SPECIALS, DataError, Vocabulary, build_vocab, text_files, vocab_from_files


def test_order_specials_ties_and_limits():
    counts = Counter({"b": 3, "a": 3, "c": 5, "d": 1, "<S>": 9})
    v = build_vocab(counts)
    assert v.words == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d"]  # ties alphabetical, specials once
    assert build_vocab(counts, max_size=5).words == ["<S>", "</S>", "<UNK>", "c", "a"]
    assert build_vocab(counts, min_count=3).words[3:] == ["c", "a", "b"]
    assert v.id("c") == 3 and v.id("zzz") == 2 and v.encode(["a", "q"]) == [4, 2]


def test_save_load_and_files(tmp_path):
    (tmp_path / "corpus" / "train").mkdir(parents=True)
    (tmp_path / "corpus" / "train" / "x.txt").write_text("β α α\n\n γ β α\n", encoding="utf-8")
    files = text_files(tmp_path / "corpus")
    v = vocab_from_files(files)
    assert v.words == list(SPECIALS) + ["α", "β", "γ"]
    path = v.save(tmp_path / "vocab.txt")
    assert path.read_text(encoding="utf-8").splitlines()[3] == "α"
    assert Vocabulary.load(path).words == v.words
    with pytest.raises(DataError):
        Vocabulary(["a", "b", "c"])
    with pytest.raises(DataError):
        text_files(tmp_path / "missing")


def test_cli_build(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "t.txt").write_text("a b b c c c\n")
    assert main(["vocab", "build", str(tmp_path / "d"), str(tmp_path / "out") + "/", "--max-size", "5"]) == 0
    assert (tmp_path / "out" / "vocab.txt").read_text().split() == ["<S>", "</S>", "<UNK>", "c", "b"]
    assert main(["vocab", "build", str(tmp_path / "nothing"), str(tmp_path / "v.txt")]) == 1
    err = capsys.readouterr().err
    assert "data not found" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["vocab", "build", str(tmp_path / "d"), str(tmp_path / "v.txt"), "--max-size", "-1"]) == 1
