"""``pyelmo predict``'s rankings: each direction at the blank, and the whole sentence's probability."""

from __future__ import annotations

import string

import pytest
import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.lm.model import LanguageModel
from pyelmo.lm.predict import WordPredictor
from pyelmo.lm.vocab import BOS_ID, EOS_ID, SPECIALS, Vocabulary

WORDS = list(SPECIALS) + [a + b for a in string.ascii_lowercase[:6] for b in "xyz"]  # 3 + 18 words


def _model() -> LanguageModel:
    cfg = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 4), (2, 4)), n_highway=1, embedding_dim=4),
                     lstm=LSTMConfig(dim=8, projection_dim=6, n_layers=2))
    torch.manual_seed(0)
    lm = LanguageModel(cfg, len(WORDS)).eval()
    with torch.no_grad():  # a random softmax with some spread, so that the rankings differ
        lm.softmax_weight.mul_(8.0)
    return lm


def _predictor(candidates: int) -> WordPredictor:
    return WordPredictor(_model(), Vocabulary(WORDS), candidates=candidates, batch_size=5)


def _sentence_log_probs(lm: LanguageModel, vocab: Vocabulary, sentence: list[str]) -> torch.Tensor:
    """Forward + backward log-probability of the whole sentence from the training loss (full softmax,
    the differentiable backend: the predictor runs the inference one)."""
    targets = torch.tensor([[BOS_ID, *vocab.encode(sentence), EOS_ID]])
    with torch.no_grad():
        return -lm(batch_to_ids([sentence]), targets).sum()


@pytest.mark.parametrize("position", [0, 2, 3])
def test_combined_is_the_whole_sentence_probability_over_all_words(position):
    """With every word a candidate, the combined distribution is P(sentence with w) of both LMs
    renormalised over the vocabulary: the parts left out of ``sentence_log_probs`` cancel."""
    lm, vocab = _model(), Vocabulary(WORDS)
    predictor = WordPredictor(lm, vocab, candidates=len(WORDS), batch_size=5)
    tokens = ["ax", "by", "cz", "dx"]
    got = predictor.predict(tokens, position, k=len(WORDS) - len(SPECIALS)).combined
    brute = torch.stack([_sentence_log_probs(lm, vocab, tokens[:position] + [w] + tokens[position + 1:])
                         for w in WORDS[len(SPECIALS):]])
    expected = brute.softmax(0)
    ranked = sorted(zip(WORDS[len(SPECIALS):], expected.tolist()), key=lambda x: -x[1])
    assert [w for w, _ in got] == [w for w, _ in ranked]
    assert [p for _, p in got] == pytest.approx([p for _, p in ranked], abs=1e-5)


def test_candidates_zero_is_the_product_of_the_two_directions():
    predictor = _predictor(candidates=0)
    tokens = ["ax", "by", "cz"]
    forward, backward = predictor.log_probs(tokens, 1)
    product = torch.log_softmax(forward + backward, dim=-1)[len(SPECIALS):].exp()
    got = predictor.predict(tokens, 1, k=3).combined
    top = product.topk(3)
    assert [w for w, _ in got] == [WORDS[int(i) + len(SPECIALS)] for i in top.indices]
    assert [p for _, p in got] == pytest.approx(top.values.tolist(), abs=1e-6)


def test_few_candidates_rank_only_words_from_the_directions_top_lists():
    predictor = _predictor(candidates=2)
    tokens = ["ax", "by", "cz"]
    forward, backward = predictor.log_probs(tokens, 1)
    allowed = {int(i) + len(SPECIALS) for s in (forward, backward, forward + backward)
               for i in s[len(SPECIALS):].topk(2).indices}
    combined = predictor._rescored(tokens, 1, forward, backward, k=2)
    assert set(torch.isfinite(combined).nonzero().flatten().tolist()) == allowed
    assert float(combined.exp().sum()) == pytest.approx(1.0, abs=1e-5)
    assert {w for w, _ in predictor.predict(tokens, 1, k=2).combined} <= {WORDS[i] for i in allowed}


WORDS = ["<S>", "</S>", "<UNK>", "the", "bank", "river", "money", ".", "boat", "near", "we", "sat", "on"]


def _plans(monkeypatch) -> list[object]:
    """The models ``plan_model`` plans from now on."""
    from pyelmo.runtime import planning

    planned, real = [], planning.plan_model

    def spy(model, options, *args):
        planned.append(model)
        return real(model, options, *args)

    monkeypatch.setattr(planning, "plan_model", spy)
    return planned


def test_a_predictor_that_loads_its_model_plans_it_in_place(tiny_model, tmp_path, monkeypatch):
    from lmfolder import lm_folder
    from pyelmo.runtime.linear import PlannedLinear

    folder = lm_folder(tiny_model, tmp_path / "lm", WORDS)
    sentence = "we sat on the ___ bank .".split()
    own = LanguageModel.from_pretrained(folder)
    handed = WordPredictor(own, own.vocab)  # a model handed in: left as it is, its own modules run
    planned = _plans(monkeypatch)
    loaded = WordPredictor.from_pretrained(folder)
    assert planned == [loaded.bilm] and isinstance(loaded.bilm.directions[0][0].input_gates, PlannedLinear)
    assert isinstance(handed.bilm.directions[0][0].input_gates, torch.nn.Linear)
    for got, want in zip(loaded.log_probs(sentence, 4), handed.log_probs(sentence, 4)):
        assert (got - want).abs().max() < 1e-5


def test_perplexity_runs_the_model_it_loads_planned_in_place(tiny_model, tmp_path, monkeypatch):
    from lmfolder import lm_folder
    from pyelmo.lm.model import evaluate, perplexity
    from pyelmo.lm.text import TokenizedText

    folder = lm_folder(tiny_model, tmp_path / "lm", WORDS)
    text = tmp_path / "text.txt"
    text.write_text("we sat on the bank .\nthe boat near the river bank .\n", encoding="utf-8")
    own = LanguageModel.from_pretrained(folder)
    want = evaluate(own, TokenizedText([text], own.vocab, 100, own.bilm.config.char_cnn.max_characters_per_token))
    planned = _plans(monkeypatch)
    got = perplexity(folder, [text], max_length=100)
    assert len(planned) == 1  # the biLM it loaded, in place
    assert got.tokens == want.tokens and got.average == pytest.approx(want.average, rel=1e-5)
