"""AllenNLP drop-in: their ``Elmo`` state dicts, ``word_inputs``/``vocab_to_cache``, empty sentences, string input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import pyelmo
from pyelmo import Elmo, batch_to_ids
from pyelmo.modeling.bilm import BiLM
from pyelmo.errors import InputError, WeightFileError
from pyelmo.modelio.allennlp import StateDictError, from_allennlp, to_allennlp
from pyelmo.modelio.weights import load_options

FIXTURE = Path(__file__).parent / "fixtures" / "allennlp-elmo"
REF = Path(__file__).parent / "fixtures" / "reference" / "allennlp"


def random_elmo(n: int = 2, **kwargs) -> Elmo:
    """An Elmo of the reference model's size with random weights (nothing from the HDF5 file)."""
    torch.manual_seed(1)
    return Elmo(BiLM(load_options(REF / "options.json")), None, n, dropout=0.0, **kwargs).eval()


def test_allennlp_state_dict_gives_allennlp_outputs():
    """The state dict AllenNLP's own Elmo saved (noised weights, random mixes) -> their outputs to 1e-5."""
    state = load_file(str(FIXTURE / "elmo_state_dict.safetensors"))
    expected = load_file(str(FIXTURE / "outputs.safetensors"))
    inputs = json.loads((FIXTURE / "inputs.json").read_text())
    elmo = random_elmo()
    elmo.load_state_dict(state)
    with torch.no_grad():
        out = elmo(batch_to_ids(inputs["sentences"]))
    assert torch.equal(out["mask"].long(), expected["mask"])
    for i in range(2):
        got, want = out["elmo_representations"][i], expected[f"representation_{i}"]
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert out["elmo_representations"][0][3].abs().max() == 0  # the empty sentence: all padding


def test_a_task_models_state_dict_loads_its_elmo_part():
    """An AllenNLP model's weights.th holds the Elmo under a prefix, next to its own layers."""
    state = load_file(str(FIXTURE / "elmo_state_dict.safetensors"))
    task = {f"_text_field_embedder.token_embedder_elmo._elmo.{k}": v for k, v in state.items()}
    task["tag_projection_layer._module.weight"] = torch.zeros(5, 32)
    a, b = random_elmo(), random_elmo()
    a.load_state_dict(state)
    b.load_state_dict(task)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key])
    twice = {**task, **{f"other._elmo.{k}": v for k, v in state.items()}}
    with pytest.raises(WeightFileError, match="2 .*AllenNLP Elmo modules"):
        random_elmo().load_state_dict(twice)


def _unchanged_after_refusal(elmo: Elmo, state: dict, match: str, strict: bool = True) -> None:
    before = {key: value.clone() for key, value in elmo.state_dict().items()}
    with pytest.raises(StateDictError, match=match) as refused:
        elmo.load_state_dict(state, strict=strict)
    assert isinstance(refused.value, RuntimeError) and "\n" not in str(refused.value)
    for key, value in elmo.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} changed by a refused load"


def test_a_state_dict_that_does_not_fit_is_refused_whole():
    """Keys and shapes are checked before any tensor is copied; the error names the key and both shapes."""
    allennlp = load_file(str(FIXTURE / "elmo_state_dict.safetensors"))
    bias = "_elmo_lstm._elmo_lstm.backward_layer_1.state_linearity.bias"
    impossible = {**allennlp, bias: torch.zeros(3)}  # cannot hold four gates: it used to fail inside the mapping
    _unchanged_after_refusal(random_elmo(), impossible, re.escape(f"{bias!r} has shape (3,), this module's is (256,)"))
    highway = "_elmo_lstm._token_embedder._highways._layers.1.weight"
    _unchanged_after_refusal(random_elmo(), {**allennlp, highway: torch.zeros(1, 124)}, re.escape(highway),
                             strict=False)

    ours = random_elmo().state_dict()
    ours = {key: value + 1 for key, value in ours.items()}
    last = list(ours)[-1]  # every tensor before it fits and would be copied by torch alone
    wrong = {**ours, last: torch.zeros(2, 2)}
    _unchanged_after_refusal(random_elmo(), wrong, re.escape(f"{last!r} has shape (2, 2), this module's is (1,)"))
    _unchanged_after_refusal(random_elmo(), {k: v for k, v in ours.items() if k != last}, f"missing key {last!r}")
    _unchanged_after_refusal(random_elmo(), {**ours, "extra.weight": torch.zeros(1)}, "unexpected key 'extra.weight'")
    _unchanged_after_refusal(random_elmo(), {**ours, last: [1.0]}, "is a list, not a tensor")
    _unchanged_after_refusal(random_elmo(), {**ours, 3: torch.zeros(1)}, "key 3 is not a name")
    _unchanged_after_refusal(random_elmo(), list(ours.items()), "got a list")
    partial = random_elmo()
    partial.load_state_dict({k: v for k, v in ours.items() if k != last}, strict=False)  # not strict: the rest loads
    assert torch.equal(partial.state_dict()[list(ours)[0]], ours[list(ours)[0]])


def test_word_inputs_with_vocab_to_cache_match_allennlp():
    state = load_file(str(FIXTURE / "elmo_state_dict.safetensors"))
    expected = load_file(str(FIXTURE / "outputs.safetensors"))
    inputs = json.loads((FIXTURE / "inputs.json").read_text())
    elmo = random_elmo(vocab_to_cache=inputs["vocab"])
    elmo.load_state_dict(state)
    with torch.no_grad():
        out = elmo(batch_to_ids(inputs["sentences"]), torch.tensor(inputs["word_ids"]))
        words_only = elmo(None, torch.tensor(inputs["word_ids"]))
    for i in range(2):
        want = expected[f"word_inputs_representation_{i}"]
        torch.testing.assert_close(out["elmo_representations"][i], want, atol=1e-5, rtol=0)
        torch.testing.assert_close(words_only["elmo_representations"][i], want, atol=1e-5, rtol=0)
    with pytest.raises(InputError, match="outside the cached vocabulary"):
        elmo(None, torch.tensor([[len(inputs["vocab"])]]))


def test_word_inputs_without_a_cached_vocabulary_warn_and_use_characters():
    elmo = random_elmo(1)
    ids = batch_to_ids([["a", "b"]])
    with torch.no_grad(), pytest.warns(UserWarning, match="no vocab_to_cache"):
        out = elmo(ids, torch.tensor([[1, 2]]))
        assert torch.equal(out["elmo_representations"][0], elmo(ids)["elmo_representations"][0])


def test_state_dict_conversion_round_trips_and_matches_key_names():
    elmo = random_elmo()
    with torch.no_grad():
        for mix in elmo.scalar_mixes:
            mix.scalar_parameters.normal_()
    ours = elmo.state_dict()
    theirs = to_allennlp(ours)
    assert sorted(theirs) == json.loads((FIXTURE / "inputs.json").read_text())["state_dict_keys"]
    back = from_allennlp(theirs)
    assert sorted(back) == sorted(ours)
    for key in ours:
        torch.testing.assert_close(back[key], ours[key], atol=1e-7, rtol=0)


@pytest.mark.parametrize("grad", [False, True])
def test_empty_sentences_give_zero_length_outputs(grad):
    elmo = random_elmo(1)
    with torch.set_grad_enabled(grad):
        out = elmo(batch_to_ids([["a", "b"], []]))
        assert out["elmo_representations"][0].shape == (2, 2, 32)
        assert out["mask"].tolist() == [[True, True], [False, False]]
        only_empty = elmo(batch_to_ids([[]]))
        assert only_empty["elmo_representations"][0].shape == (1, 0, 32)
        assert only_empty["mask"].shape == (1, 0)
        nothing = elmo(batch_to_ids([]))
        assert nothing["elmo_representations"][0].shape == (0, 0, 32)


def test_embed_sentence_rejects_a_string_and_tokenizes_on_request(tiny_model):
    embedder = pyelmo.ElmoEmbedder(tiny_model)
    with pytest.raises(InputError, match="list of tokens, not a string"):
        embedder.embed_sentence("The bank closed.")
    with pytest.raises(InputError, match="not a string"):
        embedder.embed_batch(["The bank closed."])
    got = embedder.embed_sentence("The bank closed.", tokenize=True)
    np.testing.assert_array_equal(got, embedder.embed_sentence(["The", "bank", "closed", "."]))
