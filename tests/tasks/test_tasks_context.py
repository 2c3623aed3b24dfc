"""``--bilm-context sentence``: the biLM reads each sentence of an example on its own (seconds each)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyelmo.cli import main
from pyelmo.errors import InputError
from pyelmo.tasks.data import read_classify
from pyelmo.corpus.sentences import sentence_spans
from pyelmo.tasks.features import LayerCache
from pyelmo.tasks.options import TrainOptions
from pyelmo.tasks.saved import load_task

from test_tasks import BILM_ARGS, _train, data  # noqa: F401  (the fixture)

FIRST, SECOND = ["The", "cat", "sat", "on", "the", "mat", "."], ["A", "dog", "barked", "!"]


@pytest.mark.parametrize("tokens,expected", [
    (FIRST + SECOND, [FIRST, SECOND]),
    (["Mr", ".", "Smith", "left", ".", "He", "ran", "."], [["Mr", ".", "Smith", "left", "."], ["He", "ran", "."]]),
    (["She", "said", '"', "never", ".", '"', "Then", "left", "."], [["She", "said", '"', "never", ".", '"'], ["Then", "left", "."]]),
    (["What", "?", "?", "?", "No", "thanks", "!"], [["What", "?", "?", "?"], ["No", "thanks", "!"]]),
    (["it", "rose", "5.5", "%", ".", "but", "fell", "."], [["it", "rose", "5.5", "%", ".", "but", "fell", "."]]),
    (["a", "title", "without", "a", "stop"], [["a", "title", "without", "a", "stop"]]),
])
def test_sentence_spans(tokens, expected):
    assert [tokens[a:b] for a, b in sentence_spans(tokens, 60)] == expected


def test_long_sentences_are_cut_into_equal_chunks():
    assert sentence_spans(list("abcdefghij"), 4) == [(0, 4), (4, 7), (7, 10)]
    assert sentence_spans(FIRST + SECOND, 3) == [(0, 3), (3, 5), (5, 7), (7, 9), (9, 11)]


def test_sentence_context_equals_the_sentences_embedded_separately(tiny_model, tmp_path):
    from pyelmo import ElmoEmbedder

    line = FIRST + SECOND
    embedder = ElmoEmbedder(tiny_model)
    separate = np.concatenate([embedder.embed_sentence(FIRST), embedder.embed_sentence(SECOND)], axis=1)
    sentence = LayerCache(tiny_model, dtype=np.float32, progress=False, context="sentence", max_tokens=60)
    sentence.add([line])
    np.testing.assert_allclose(sentence[line], separate, atol=1e-5, rtol=0)
    whole = LayerCache(tiny_model, dtype=np.float32, progress=False)
    whole.add([line])
    assert sentence[line].shape == whole[line].shape
    assert not np.allclose(whole[line][1:], separate[1:], atol=1e-3)  # the context changes the LSTM layers
    np.testing.assert_allclose(whole[line][0], separate[0], atol=1e-5)  # ... but not the token layer
    # on disk: the sentence context has its own entries, read back without computing
    LayerCache(tiny_model, progress=False, cache_dir=tmp_path).add([line])
    LayerCache(tiny_model, progress=False, cache_dir=tmp_path, context="sentence", max_tokens=60).add([line])
    assert len(list(tmp_path.glob("layers-*.npz"))) == 2
    again = LayerCache(tiny_model, progress=False, cache_dir=tmp_path, context="sentence", max_tokens=60)
    again._compute = None
    again.add([line])
    np.testing.assert_allclose(again[line], separate, atol=2e-3)  # float16 on disk


def test_sentence_context_round_trips_through_the_saved_model(data):  # noqa: F811
    for name in ("train", "dev", "test"):  # two sentences per example
        rows = (data / f"{name}.tsv").read_text().splitlines()
        (data / f"{name}.tsv").write_text("".join(f"{r} . It was . The end\n" for r in rows))
    out = _train(data, "classify", features="elmo", max_epochs=3, bilm_context="sentence")
    saved = json.loads((out / "config.json").read_text())
    assert saved["options"]["bilm_context"] == "sentence" and saved["bilm"]["max_tokens"] == 100
    runner = load_task(out, progress=False)
    assert runner.cache.context == "sentence" and runner.cache.max_tokens == 100
    test = read_classify(data / "test.tsv")
    assert load_task(out, progress=False).predict(test) == runner.predict(test)
    line = _train(data, "classify", out="line", features="elmo", max_epochs=1, bilm_context="line")
    assert json.loads((line / "config.json").read_text())["options"]["bilm_context"] == "line"
    assert load_task(line, progress=False).cache.context == "line"
    default = _train(data, "classify", out="default", features="elmo", max_epochs=1)  # classify: sentence
    assert json.loads((default / "config.json").read_text())["options"]["bilm_context"] == "sentence"
    cli = data / "cli"
    assert main(["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
                 "--out", str(cli), *BILM_ARGS, "--features", "elmo", "--bilm-context", "sentence",
                 "--hidden", "8", "--max-epochs", "1", "--min-steps", "0", "--quiet"]) == 0
    assert json.loads((cli / "config.json").read_text())["options"]["bilm_context"] == "sentence"
    with pytest.raises(InputError, match="--bilm-context"):
        TrainOptions(bilm_context="paragraph").check()
