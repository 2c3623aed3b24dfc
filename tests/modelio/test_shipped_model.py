"""The English model shipped inside the package: loads offline, round-trips, tells senses apart."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import pyelmo
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.cli import main
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modelio.hub import SHIPPED
from pyelmo.lm.predict import WordPredictor
from pyelmo.evaluation.senses import read_sense_examples, sense_accuracy_per_layer
from pyelmo.modelio.weights import load_bilm_hdf5, save_bilm_hdf5

SENSES = Path(__file__).parents[1] / "data" / "senses.tsv"


@pytest.fixture(scope="module")
def embedder():
    return ElmoEmbedder()


def test_package_ships_a_small_model():
    files = {p.name: p.stat().st_size for p in SHIPPED["english"].folder.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.txt", "MODEL_CARD.md"} <= set(files)
    assert sum(files.values()) <= 60 * 2**20


def test_default_load_and_released_format_round_trip(tmp_path):
    model = pyelmo.load()
    save_bilm_hdf5(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    again = load_bilm_hdf5(tmp_path / "options.json", tmp_path / "weights.hdf5")
    ids = batch_to_ids([["I", "deposited", "money", "in", "the", "bank", "."]])
    with torch.no_grad():
        assert torch.equal(model(ids).layers, again(ids).layers)


def test_bank_differs_only_above_layer_zero(embedder):
    money = embedder.embed_sentence("I deposited money in the bank .".split())
    river = embedder.embed_sentence("The boat stopped near the river bank .".split())
    a, b = money[:, 5], river[:, 6]
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert cos[0] == pytest.approx(1.0, abs=1e-5)
    assert (cos[1:] < 0.99).all()


def test_nearest_sense_accuracy_is_measured_per_layer(embedder):
    """Layer 0 sits at chance by construction; the contextual layers' figures are in the model card."""
    scores = sense_accuracy_per_layer(embedder, read_sense_examples(SENSES))
    assert scores["layer 0"] == pytest.approx(0.5)
    assert set(scores) == {"layer 0", "layer 1", "layer 2", "average"}


def test_demo_and_predict_run_with_the_shipped_model(tmp_path, capsys):
    assert main(["demo", "--plot", str(tmp_path / "d.png")]) == 0
    assert "bank:" in capsys.readouterr().out
    predictions = WordPredictor.from_pretrained().predict("The boat stopped near the river ___ .".split(), k=10)
    assert len(predictions.combined) == 10


def test_predict_ranks_words_that_fit_the_whole_sentence():
    """The forward LM alone puts punctuation first after "the river"; the whole sentence's probability
    ranks nouns that "." can follow, "shore" and "side" among them (MODEL_CARD.md)."""
    sentence = "The boat stopped near the river ___ .".split()
    predictions = WordPredictor.from_pretrained().predict(sentence, k=10)
    combined = [w for w, _ in predictions.combined]
    assert predictions.forward[0][0] in {".", ","}
    assert all(w.isalpha() for w in combined)
    assert {"shore", "side"} <= set(combined)


def test_the_readme_shows_what_predict_prints(capsys):
    """Every `$ pyelmo predict ...` block of the README is the shipped model's real output."""
    import shlex

    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```console\n\$ pyelmo (predict .*?)\n(.*?)```", readme, flags=re.S)
    assert blocks
    for command, shown in blocks:
        assert main(shlex.split(command)) == 0
        printed = capsys.readouterr().out
        want, got = (text.strip().splitlines() for text in (shown, printed))
        assert len(got) == len(want), (command, printed)
        for a, b in zip(got, want):
            a, b = a.split(), b.split()
            assert [w for w in a if not _number(w)] == [w for w in b if not _number(w)], (command, a, b)
            assert [float(w) for w in a if _number(w)] == pytest.approx([float(w) for w in b if _number(w)],
                                                                       abs=2e-4), (command, a, b)


def _number(word: str) -> bool:
    return bool(re.fullmatch(r"\d+\.\d+", word))


def test_shipped_model_is_a_trained_language_model(tmp_path):
    """Full-softmax perplexity on the 96 sense-test sentences (modern English the corpus never
    saw verbatim): an untrained model of this vocabulary gives about 30,000; the shipped one
    measured 122.7 (MODEL_CARD.md); the bound catches a wrong or damaged model."""
    from pyelmo.lm.model import perplexity

    text = tmp_path / "sentences.txt"
    text.write_text("\n".join(" ".join(e.tokens) for e in read_sense_examples(SENSES)) + "\n", encoding="utf-8")
    result = perplexity(SHIPPED["english"].folder, [text])
    assert result.average < 200


def test_the_readme_sentence_vectors_example_prints_what_it_shows(capsys):
    """The README's sentence-vector example, run as it stands, prints its last comment line."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"### Sentence vectors\n.*?```python\n(.*?)```", readme, flags=re.S)
    exec(compile(code, "README.md", "exec"), {})
    shown, printed = code.strip().splitlines()[-1].lstrip("# ").split(), capsys.readouterr().out.split()
    assert [w for w in printed if not _number(w)] == [w for w in shown if not _number(w)], printed
    assert [float(w) for w in printed if _number(w)] == pytest.approx([float(w) for w in shown if _number(w)], abs=2e-3)


def test_chinese_model_card_perplexity_is_what_pyelmo_perplexity_measures(capsys):
    """The Chinese model card's test-split figures, as `pyelmo perplexity --json` prints them on that split
    (shipped as tests/data/corpus-zh-test.txt)."""
    import json

    card = (SHIPPED["chinese"].folder / "MODEL_CARD.md").read_text(encoding="utf-8")
    row = re.search(r"\| test \(([\d,]+) predictions\) \| ([\d.]+) \| ([\d.]+) \| \*\*([\d.]+)\*\* \|", card)
    assert row, "the model card's test row"
    assert main(["perplexity", "--model", "chinese", "--json",
                 str(Path(__file__).parents[1] / "data" / "corpus-zh-test.txt")]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["predictions"] == int(row.group(1).replace(",", ""))
    assert [round(measured[k], 1) for k in ("forward", "backward", "average")] == [float(row.group(i)) for i in (2, 3, 4)]
