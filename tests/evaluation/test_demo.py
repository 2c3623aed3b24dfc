"""The demo, similarity and predict commands, and the nearest-sense evaluation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.lm.predict import WordPredictor
from pyelmo.evaluation.senses import nearest_sense_accuracy, read_sense_examples, sense_accuracy_per_layer


from pyelmo.modelio.weights import save_pretrained

SENSES = Path(__file__).parents[1] / "data" / "senses.tsv"


@pytest.fixture
def lm_dir(tiny_model, tmp_path):
    vocab = ["<S>", "</S>", "<UNK>", "the", "bank", "river", "money", ".", "boat", "near"]
    torch.manual_seed(0)
    weight, bias = torch.randn(len(vocab), 16), torch.randn(len(vocab))
    directory = save_pretrained(tiny_model, tmp_path / "lm", extra_tensors={"softmax.weight": weight,
                                                                            "softmax.bias": bias})
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return directory


def _small_png(path: Path, software: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    fig.savefig(path, metadata={"Software": software})
    plt.close(fig)


def test_demo_prints_table_and_writes_png(lm_dir, tmp_path, capsys, monkeypatch):
    from pyelmo.evaluation.sensefigure import is_demo_figure

    monkeypatch.chdir(tmp_path)
    png = tmp_path / "pyelmo-demo.png"  # the default --out, in the current folder
    _small_png(png, "pyelmo demo")  # as an earlier run left it
    assert main(["demo", "--model", str(lm_dir)]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == f"wrote the figure to {png} (replacing the one an earlier run wrote)"
    assert is_demo_figure(png) and png.stat().st_size > 10_000
    rows = [line for line in out.splitlines() if line.startswith(("bank:", "apple:", "play:"))]
    assert len(rows) == 1 + 1 + 3
    for row in rows:  # layer 0 is context-independent: identical vectors for identical word forms
        if not row.startswith("apple:"):  # "apple" / "Apple" differ in their characters
            assert row.split()[-4] == "1.000"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("mean cosine similarity")))
    table = [line.replace("layer ", "layer_").split() for line in lines[start + 2 : start + 2 + 3 * 4]]
    assert [(r[0], r[1]) for r in table[:4]] == [
        ("bank", "layer_0"), ("bank", "layer_1"), ("bank", "layer_2"), ("bank", "average")]
    for r in table:  # same-sense and different-sense means are cosines; the gap is their difference
        same, diff, gap = float(r[2]), float(r[3]), float(r[4])
        assert -1 <= diff <= 1 and -1 <= same <= 1 and gap == pytest.approx(same - diff, abs=2e-3)
        if r[1] == "layer_0":  # layer 0 sees only the characters: no gap by construction
            assert r[2:5] == ["1.000", "1.000", "+0.000"]


@pytest.mark.skipif(importlib.util.find_spec("jieba") is None, reason="the zh extra is not installed")
@pytest.mark.parametrize("font", [None, "installed"])
def test_demo_in_chinese(lm_dir, tmp_path, capsys, monkeypatch, font):
    import warnings

    from pyelmo.evaluation import demo_zh
    from pyelmo.evaluation.sensefigure import is_demo_figure

    if font is None:  # no font with Chinese characters: the figure names the words in pinyin
        monkeypatch.setattr(demo_zh, "chinese_font", lambda: None)
    elif demo_zh.chinese_font() is None:
        pytest.skip("no font with Chinese characters installed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no missing glyphs
        assert main(["demo", "--lang", "zh", "--model", str(lm_dir), "--out", str(tmp_path / "zh.png")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("苹果:", "运动:"))]
    assert [r.split(":")[0] for r in rows] == ["苹果", "运动"]
    assert all(r.split()[-4] == "1.000" for r in rows)  # layer 0: the same characters, the same vector
    words = tuple(demo_zh.SENSE_CONTEXTS)
    table = [line.replace("layer ", "layer_").split() for line in out.splitlines() if line.startswith(tuple(w + " " for w in words))]
    assert [(r[0], r[1]) for r in table] == [(w, n) for w in words for n in ("layer_0", "layer_1", "layer_2", "average")]
    assert table[0][2:6] == ["1.000", "1.000", "+0.000", "fruit"]
    assert is_demo_figure(tmp_path / "zh.png")


def test_demo_replaces_only_its_own_figure(lm_dir, tmp_path, capsys, monkeypatch):
    from pyelmo.cli.demo import _check_plot_path

    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "pyelmo-demo.png"
    _small_png(mine, "someone else")
    before = mine.read_bytes()
    assert main(["demo", "--model", str(lm_dir)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("pyelmo demo: error: --out pyelmo-demo.png exists and is not a figure pyelmo demo wrote: "
                   f"choose another --out, or replace it with --overwrite")
    assert mine.read_bytes() == before
    assert _check_plot_path(str(mine), overwrite=True) is False  # --overwrite: replaced, no error
    _small_png(mine, "pyelmo demo")
    assert _check_plot_path(str(mine), overwrite=False) is True  # an earlier demo figure: replaced


def test_sense_separation_on_hand_made_vectors():
    from pyelmo.evaluation.demo import format_separation, separation_of

    # 4 contexts, 2 senses; layer 0 identical, layer 1 perfectly separated (+ the average layer).
    layer0 = np.ones((4, 2))
    layer1 = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    vectors = np.stack([layer0, layer1, (layer0 + layer1) / 2], axis=1)
    sep = separation_of(vectors, "w", ["a", "a", "b", "b"])
    assert sep.senses == {"a": 2, "b": 2}
    assert sep.within["layer 0"] == pytest.approx(1.0) and sep.across["layer 0"] == pytest.approx(1.0)
    unit = layer1 / np.linalg.norm(layer1, axis=1, keepdims=True)
    assert sep.within["layer 1"] == pytest.approx(unit[0] @ unit[1])
    assert sep.across["layer 1"] == pytest.approx(np.mean([unit[i] @ unit[j] for i in (0, 1) for j in (2, 3)]))
    assert sep.within["layer 1"] > 0.99 > 0.2 > sep.across["layer 1"]
    text = format_separation([sep])
    assert "w       layer 1" in text and f"{sep.within['layer 1'] - sep.across['layer 1']:+8.3f}" in text


def test_similarity_needs_the_word_in_both(lm_dir, capsys):
    assert main(["similarity", "I like the bank.", "The river bank.", "--word", "bank", "--model", str(lm_dir)]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()[-2:]
    assert header.split()[-7:] == ["layer", "0", "layer", "1", "layer", "2", "average"]
    values = [float(v) for v in row.split()[-4:]]
    assert values[0] == 1.0  # layer 0 is context-independent: the same word form, the same vector
    assert all(v < 0.9995 for v in values[1:])  # the contextual layers see two different sentences
    assert main(["similarity", "I like it.", "The river bank.", "--word", "bank", "--model", str(lm_dir)]) == 1
    assert "not a token" in capsys.readouterr().err


def test_predict_ranks_vocabulary_words(lm_dir, capsys):
    assert main(["predict", "The boat stopped near the river ___ .", "-k", "5", "--model", str(lm_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and not any("<S>" in line or "<UNK>" in line for line in lines[1:])
    predictions = WordPredictor.from_pretrained(lm_dir).predict("the ___ .".split(), k=7)
    assert sum(p for _, p in predictions.combined) <= 1.0 + 1e-6
    assert [w for w, _ in predictions.forward] != [] and len(predictions.backward) == 7
    assert main(["predict", "no blank here", "--model", str(lm_dir)]) == 1


def test_predict_direction_sees_only_its_side(lm_dir):
    lm = WordPredictor.from_pretrained(lm_dir)
    f1, b1 = lm.log_probs("the boat near the bank".split(), 2)
    f2, b2 = lm.log_probs("the boat money river .".split(), 2)
    torch.testing.assert_close(f1, f2)  # same left context
    assert not torch.allclose(b1, b2)


def test_predict_refuses_model_without_softmax(tiny_model, tmp_path, capsys):
    save_pretrained(tiny_model, tmp_path / "m")
    assert main(["predict", "a ___ b", "--model", str(tmp_path / "m")]) == 1
    assert "softmax" in capsys.readouterr().err


def test_nearest_sense_accuracy_on_hand_made_vectors():
    vectors = np.array([[1, 0], [0.9, 0.1], [0.8, 0.3], [0, 1], [0.1, 0.9], [0.2, 1.0]])
    words, senses = ["w"] * 6, ["a", "a", "a", "b", "b", "b"]
    assert nearest_sense_accuracy(vectors, words, senses) == 1.0
    assert nearest_sense_accuracy(np.ones((6, 2)), words, senses) == 0.5  # ties: chance


def test_sense_set_and_layer_zero_at_chance(tiny_model):
    examples = read_sense_examples(SENSES)
    words = {e.word for e in examples}
    assert len(words) >= 12
    for word in words:
        senses = {e.sense for e in examples if e.word == word}
        assert len(senses) == 2
        assert all(sum(e.sense == s and e.word == word for e in examples) >= 3 for s in senses)
    scores = sense_accuracy_per_layer(ElmoEmbedder(tiny_model), examples)
    assert scores["layer 0"] == pytest.approx(0.5)
    assert set(scores) == {"layer 0", "layer 1", "layer 2", "average"}


def test_similarity_by_token_index_and_aligned_table(lm_dir, capsys):
    """--index picks a later occurrence; the table's columns line up whatever the label length."""
    args = ["similarity", "a bank , the bank", "the bank", "--model", str(lm_dir)]
    assert main([*args, "--index", "4", "1"]) == 0
    later = capsys.readouterr().out.strip().splitlines()
    assert main([*args, "--word", "bank"]) == 0
    first = capsys.readouterr().out.strip().splitlines()
    assert later[1].split()[-4] == first[1].split()[-4] == "1.000"  # layer 0: the same word form
    assert later[1].split()[-3:] != first[1].split()[-3:]  # another occurrence, another context
    assert len({len(line) for line in later}) == 1  # header and row aligned
    assert main([*args, "--index", "9"]) == 1
    assert "outside its" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("jieba") is None, reason="the zh extra is not installed")
def test_chinese_sense_contexts_segment_the_word_alone():
    from pyelmo.evaluation import demo_zh
    from pyelmo.evaluation.senses import read_sense_examples
    from pyelmo.text.tokenize import tokenize

    assert len(demo_zh.SENSE_CONTEXTS) >= 5
    for word, senses in demo_zh.SENSE_CONTEXTS.items():
        assert len(senses) >= 2 and all(len(s) >= 3 for s in senses.values())
        for sentence in (s for group in senses.values() for s in group):
            assert word in tokenize(sentence, "zh"), sentence
    held_out = read_sense_examples(SENSES.with_name("senses-zh.tsv"))  # each word a token of its sentence, or it raises
    assert {e.word for e in held_out} == set(demo_zh.SENSE_CONTEXTS)
    demo_sentences = {"".join(tokenize(s, "zh")) for g in demo_zh.SENSE_CONTEXTS.values() for v in g.values() for s in v}
    assert not demo_sentences & {"".join(e.tokens) for e in held_out}  # held out: none of the demo's
    for e in held_out:
        assert list(e.tokens) == tokenize("".join(e.tokens), "zh")  # stored as jieba segments it


def test_pairwise_auc_on_hand_made_vectors():
    from pyelmo.evaluation.senses import pairwise_auc

    # word w: same-sense pairs (0,1) and (2,3) both above every different-sense pair -> 1.0; reversed -> 0.0
    good = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    assert pairwise_auc(good, ["w"] * 4, ["a", "a", "b", "b"]) == {"w": 1.0}
    # labels a, b, b, a: the same-sense pairs (0,3) and (1,2) (cosine 0.0995) beat only the different pair (0,2)
    # (cosine 0) of the four: 2 wins of 8
    assert pairwise_auc(good, ["w"] * 4, ["a", "b", "b", "a"]) == {"w": 0.25}
    assert pairwise_auc(np.ones((4, 2)), ["w"] * 4, ["a", "a", "b", "b"]) == {"w": 0.5}  # all tied: chance
