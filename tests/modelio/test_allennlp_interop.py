"""AllenNLP drop-in: their ``Elmo`` state dicts, ``word_inputs``/``vocab_to_cache``, empty sentences, string input,
and AllenNLP's own ELMo tests (``allennlp/tests/modules/elmo_test.py`` and the ELMo character indexer's tests)
ported to ``from pyelmo import Elmo, batch_to_ids`` on the same fixture model."""

from __future__ import annotations

import inspect
import json
import re
from collections import Counter
from pathlib import Path

import h5py

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
from pyelmo.runtime.options import RunOptions

FIXTURE = Path(__file__).parents[1] / "fixtures" / "allennlp-elmo"
REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"


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
    # an id outside the cache: AllenNLP runs the batch on the character ids instead
    ids = batch_to_ids(inputs["sentences"])
    oov = torch.tensor(inputs["word_ids"])
    oov[0, 0] = len(inputs["vocab"])
    with torch.no_grad():
        fallback = elmo(ids, oov)
    for i in range(2):
        torch.testing.assert_close(fallback["elmo_representations"][i], expected[f"representation_{i}"],
                                   atol=1e-5, rtol=0)


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


# -- AllenNLP's elmo_test.py, ported -------------------------------------------------------
OPTIONS, WEIGHTS = str(REF / "options.json"), str(REF / "lm_weights.hdf5")
SENTENCES = [["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "from", "Elmo", "."]]
ALLENNLP_ARGUMENTS = ["options_file", "weight_file", "num_output_representations", "requires_grad", "do_layer_norm",
                      "dropout", "vocab_to_cache", "keep_sentence_boundaries", "scalar_mix_parameters", "module"]
TOP_LAYER = [-1e4, -1e4, 0.0]  # a fixed mix that is the top biLM layer (softmax weights 0, 0, 1)
TOKEN_LAYER = [0.0, -1e4, -1e4]  # ... and the context-independent token layer


def allennlp_vocab(sentences: list[list[str]]) -> tuple[list[str], torch.Tensor]:
    """AllenNLP's ``Vocabulary.from_instances`` for a ``SingleIdTokenIndexer`` (padding, unknown, then the words
    by count) and the sentences' word ids, padded with 0: the ``tokens`` tensor its ``Batch`` makes."""
    counts = Counter(word for sentence in sentences for word in sentence)
    vocab = ["@@PADDING@@", "@@UNKNOWN@@", *(w for w, _ in sorted(counts.items(), key=lambda x: -x[1]))]
    index = {w: i for i, w in enumerate(vocab)}
    ids = torch.zeros(len(sentences), max(map(len, sentences)), dtype=torch.long)
    for row, sentence in enumerate(sentences):
        ids[row, :len(sentence)] = torch.tensor([index[w] for w in sentence])
    return vocab, ids


def test_signature_is_allennlps_with_pyelmos_own_arguments_keyword_only():
    parameters = list(inspect.signature(Elmo).parameters.values())
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == ALLENNLP_ARGUMENTS
    assert all(p.kind is p.KEYWORD_ONLY for p in parameters[len(positional):])
    # a call written positionally for AllenNLP: vocab_to_cache 7th, keep_sentence_boundaries 8th
    vocab, word_ids = allennlp_vocab(SENTENCES)
    elmo = Elmo(OPTIONS, WEIGHTS, 1, False, False, 0.0, vocab, True, TOP_LAYER)
    out = elmo(batch_to_ids(SENTENCES), word_ids)
    assert out["elmo_representations"][0].shape == (2, 7 + 2, 32)
    assert elmo._vocab_char_ids.shape[0] == len(vocab)
    assert not elmo.scalar_mixes[0].scalar_parameters.requires_grad


def test_elmo_bilm():
    """The top layer for the 10 batches of 3 reference sentences, states carried from batch to batch as the
    reference was made (``options=RunOptions.inference(stateful=True)``: pyelmo is stateless by default)."""
    sentences = json.loads((REF / "sentences.json").read_text())
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, scalar_mix_parameters=TOP_LAYER,
                options=RunOptions.inference(stateful=True))
    for i in range(10):
        batch = [sentences[k][i].split() for k in range(3)]
        with torch.no_grad():
            out = elmo(batch_to_ids(batch))
        lengths = out["mask"].sum(1).tolist()
        assert lengths == [len(sentence) for sentence in batch]
        for k in range(3):
            with h5py.File(REF / f"lm_embeddings_{k}.hdf5", "r") as f:
                expected = np.concatenate(f[str(i)][...], axis=-1)
            np.testing.assert_allclose(out["elmo_representations"][0][k, :lengths[k]].numpy(), expected,
                                       atol=1e-5, rtol=0)


def test_elmo_char_cnn_cache_does_not_raise_error_for_uncached_words():
    oov_vocab, oov_ids = allennlp_vocab([["This", "is", "OOV"], ["so", "is", "this"]])
    vocab, in_vocab_ids = allennlp_vocab([["here", "is"], ["a", "vocab"]])
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, vocab_to_cache=vocab)
    plain = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0)
    with torch.no_grad():
        elmo(batch_to_ids([["here", "is"], ["a", "vocab"]]), in_vocab_ids)
        chars = batch_to_ids([["This", "is", "OOV"], ["so", "is", "this"]])
        assert int(oov_ids.max()) >= len(vocab)  # ids the cache does not hold
        out = elmo(chars, oov_ids)
        expected = plain(chars)  # the characters-only output
    assert torch.equal(out["mask"], expected["mask"])
    torch.testing.assert_close(out["elmo_representations"][0], expected["elmo_representations"][0],
                               atol=1e-6, rtol=0)


def test_elmo_bilm_can_cache_char_cnn_embeddings():
    sentences = [["This", "is", "a", "sentence"], ["Here", "'s", "one"], ["Another", "one"]]
    vocab, word_ids = allennlp_vocab(sentences)
    chars = batch_to_ids(sentences)
    with torch.no_grad():
        no_cache = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0).eval()(chars)
        cached = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0, vocab_to_cache=vocab).eval()(chars, word_ids)
    assert torch.equal(no_cache["mask"], cached["mask"])
    for a, b in zip(cached["elmo_representations"], no_cache["elmo_representations"]):
        np.testing.assert_array_almost_equal(a.numpy(), b.numpy(), decimal=6)


def test_elmo():
    elmo = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0)
    output = elmo(batch_to_ids(SENTENCES))
    representations, mask = output["elmo_representations"], output["mask"]
    assert len(representations) == 2
    assert list(representations[0].size()) == [2, 7, 32]
    assert list(representations[1].size()) == [2, 7, 32]
    assert list(mask.size()) == [2, 7]
    assert elmo.get_output_dim() == 32


def test_elmo_keep_sentence_boundaries():
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, keep_sentence_boundaries=True)
    output = elmo(batch_to_ids(SENTENCES))
    assert len(output["elmo_representations"]) == 1
    assert list(output["elmo_representations"][0].size()) == [2, 7 + 2, 32]  # with <S> and </S>
    assert list(output["mask"].size()) == [2, 7 + 2]


def test_elmo_4D_input():
    sentences = [SENTENCES, [["1", "2"], ["1", "2", "3", "4", "5", "6", "7"]],
                 [["1", "2", "3", "4", "50", "6", "7"], []]]
    elmo = Elmo(OPTIONS, WEIGHTS, 2, dropout=0.0)
    all_character_ids = [batch_to_ids(batch) for batch in sentences]
    character_ids = torch.cat([ids.unsqueeze(1) for ids in all_character_ids], dim=1)  # (2, 3, 7, 50)
    with torch.no_grad():
        embeddings_4d = elmo(character_ids)
        embeddings_3d = [elmo(ids) for ids in all_character_ids]
    for k in range(3):
        np.testing.assert_array_almost_equal(embeddings_4d["elmo_representations"][0][:, k].numpy(),
                                             embeddings_3d[k]["elmo_representations"][0].numpy())


def test_elmo_with_module():
    bilm = pyelmo.load_bilm_hdf5(OPTIONS, WEIGHTS)
    elmo = Elmo(None, None, 2, dropout=0.0, module=bilm)
    assert elmo.bilm is bilm
    representations = elmo(batch_to_ids(SENTENCES))["elmo_representations"]
    assert len(representations) == 2
    for k in range(2):
        assert list(representations[k].size()) == [2, 7, 32]
    with pytest.raises(InputError, match="not both"):
        Elmo(OPTIONS, None, 2, module=bilm)
    with pytest.raises(InputError, match="pyelmo BiLM"):
        Elmo(None, None, 2, module=torch.nn.Linear(2, 2))


def test_elmo_without_a_model_is_an_error_not_the_shipped_model():
    with pytest.raises(InputError, match="'english'"):
        Elmo(None, None, 1)


@pytest.mark.parametrize("requires_grad", [True, False])
def test_elmo_requires_grad(requires_grad):
    elmo = Elmo(OPTIONS, WEIGHTS, 1, requires_grad=requires_grad, dropout=0.0)
    char_ids = torch.from_numpy(np.random.default_rng(0).integers(0, 262, (3, 4, 50)))
    elmo(char_ids)["elmo_representations"][0].sum().backward()
    grads = [p.grad for p in elmo.bilm.parameters()]
    if requires_grad:
        assert all(grad is not None for grad in grads)
    else:
        assert all(grad is None for grad in grads)


def test_elmo_token_representation():
    """The context-independent layer of the vocabulary (in 10 'sentences' of 50 tokens) against bilm-tf's
    ``dump_token_embeddings``; the biLM's layer 0 is the token representation twice."""
    words = (REF / "vocab_test.txt").read_text().strip().split("\n")
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, scalar_mix_parameters=TOKEN_LAYER)
    with torch.no_grad():
        out = elmo(batch_to_ids([words[k * 50:(k + 1) * 50] for k in range(10)]))
    actual = out["elmo_representations"][0][out["mask"]][:, :16].numpy()
    with h5py.File(REF / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(actual) == len(words)
    np.testing.assert_allclose(actual, expected[:len(words)], atol=1e-5, rtol=0)


def test_elmo_token_representation_bos_eos():
    """The tokens "<S>" and "</S>" are the sentence boundaries' own representations."""
    elmo = Elmo(OPTIONS, WEIGHTS, 1, dropout=0.0, keep_sentence_boundaries=True, scalar_mix_parameters=TOKEN_LAYER)
    for correct_index, token in [(0, "<S>"), (2, "</S>")]:
        with torch.no_grad():
            embeddings = elmo(batch_to_ids([[token]]))["elmo_representations"][0]
        np.testing.assert_allclose(embeddings[0, correct_index].numpy(), embeddings[0, 1].numpy(), atol=1e-6)


# -- AllenNLP's ELMoTokenCharactersIndexer tests, ported to batch_to_ids --------------------
def _padded(*ids: int) -> list[int]:
    return list(ids) + [261] * (50 - len(ids))


@pytest.mark.parametrize("token, expected", [
    ("<S>", _padded(259, 257, 260)),
    ("</S>", _padded(259, 258, 260)),
    (chr(256) + "t", _padded(259, 197, 129, 117, 260)),
])
def test_char_ids(token, expected):
    assert batch_to_ids([[token]])[0, 0].tolist() == expected


def test_long_token_is_cut_and_padding_tokens_are_zeros():
    ids = batch_to_ids([["a" * 60], ["b", "c"]])
    assert ids.shape == (2, 2, 50)
    assert ids[0, 0].tolist() == [259] + [98] * 48 + [260]
    assert ids[0, 1].tolist() == [0] * 50


def test_a_key_allennlps_elmo_has_no_counterpart_for_is_refused():
    own = Elmo(BiLM(pyelmo.preset("small")), None, 1).state_dict()
    assert to_allennlp(own)  # every key of pyelmo's Elmo has one
    for extra in ["bilm.directions.0.1.cell_norm.weight", "bilm.something_new"]:
        with pytest.raises(StateDictError, match=re.escape(extra)):
            to_allennlp({**own, extra: torch.zeros(3)})
