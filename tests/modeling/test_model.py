"""biLM behaviour beyond the fixtures: batch independence, odd tokens, long input, gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.rows import PackedRows
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder


def test_packed_rows_read_each_direction_within_lengths():
    rows = PackedRows(torch.tensor([2, 4]), 4)  # flat position = row * 4 + step
    assert rows.batch_sizes == [2, 2, 1, 1]
    assert rows.forward_src.tolist() == [4, 0, 5, 1, 6, 7]
    assert rows.backward_src.tolist() == [7, 1, 6, 0, 5, 4]  # each row's positions reversed within its length
    both = rows.both_directions(rows.forward_src.float())
    assert both[1].tolist() == rows.backward_src.float().tolist()


def test_sentence_alone_equals_sentence_in_batch(tiny_model):
    embedder = ElmoEmbedder(tiny_model)
    alone = embedder.embed_sentence("The bank was closed .".split())
    batch = embedder.embed_batch([
        "a much longer sentence that pads the short one with many extra tokens here".split(),
        "The bank was closed .".split(),
        ["x"],
    ])
    assert np.abs(alone - batch[1]).max() <= 1e-5
    again = embedder.embed_sentence("The bank was closed .".split())
    np.testing.assert_array_equal(alone, again)  # stateless: nothing carried over


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(["the", "bank", "river", "money", ".", "é", "漢字", "🙂"]), max_size=7),
                min_size=1, max_size=5), st.randoms())
def test_stateless_outputs_invariant_to_batch_order(tiny_model, batch, rng):
    embedder = ElmoEmbedder(tiny_model)
    reference = embedder.embed_batch(batch)
    order = list(range(len(batch)))
    rng.shuffle(order)
    shuffled = embedder.embed_batch([batch[i] for i in order])
    for j, i in enumerate(order):
        assert reference[i].shape == shuffled[j].shape
        np.testing.assert_allclose(reference[i], shuffled[j], atol=1e-5, rtol=0)


@pytest.mark.parametrize("tokens", [
    ["a"], ["x" * 500], ["漢字", "テスト", "中文"], ["🙂", "👍🏽"], ["e\u0301", "n\u0303"], ["<S>", "hello", "</S>"],
    ["שלום", "עולם"], ["مرحبا"],
])
def test_unusual_tokens(tiny_model, tokens):
    out = ElmoEmbedder(tiny_model).embed_sentence(tokens)
    assert out.shape == (3, len(tokens), 32)
    assert np.isfinite(out).all()


def test_empty_sentence_and_long_sentence(tiny_model):
    embedder = ElmoEmbedder(tiny_model)
    empty, one = embedder.embed_batch([[], ["word"]])
    assert empty.shape == (3, 0, 32) and one.shape == (3, 1, 32)
    assert embedder.embed_batch([]) == []
    long = embedder.embed_sentence(["token"] * 2000)
    assert long.shape == (3, 2000, 32) and np.isfinite(long).all()


def test_layer_zero_is_context_independent(tiny_model):
    embedder = ElmoEmbedder(tiny_model)
    a = embedder.embed_sentence("I deposited money in the bank .".split())
    b = embedder.embed_sentence("The boat stopped near the river bank .".split())
    np.testing.assert_allclose(a[0, 5], b[0, 6], atol=1e-6)
    assert np.abs(a[2, 5] - b[2, 6]).max() > 1e-3
    np.testing.assert_array_equal(a[0, :, :16], a[0, :, 16:])  # [h0, h0]


@pytest.mark.parametrize("skip", [True, False])
def test_gradients_flow_and_masked_positions_are_zero(skip):
    torch.manual_seed(0)
    config = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 4), (2, 4)), n_highway=1, embedding_dim=4),
                        lstm=LSTMConfig(dim=8, projection_dim=4, n_layers=2, use_skip_connections=skip))
    model = BiLM(config, dropout=0.1).train()
    out = model(batch_to_ids([["a", "b", "c"], ["d"]]))
    assert out.layers.shape == (3, 2, 3, 8)
    assert out.layers[:, 1, 1:].abs().max() == 0
    out.layers.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("planned", [False, True])
def test_a_call_without_final_states_runs_the_boundary_steps_once_with_the_same_layers(skip, planned):
    """Stateless, without the final states, the ``<S>``/``</S>`` steps every sentence shares run once on one
    row and the dropped ones do not run (``BiLM._shared_start``): the same layers, empty sentences included."""
    torch.manual_seed(0)
    config = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 4), (2, 4)), n_highway=1, embedding_dim=4),
                        lstm=LSTMConfig(dim=8, projection_dim=4, n_layers=2, use_skip_connections=skip,
                                        cell_clip=3.0, proj_clip=3.0))
    model, options = BiLM(config).eval(), None
    if planned:
        embedder = ElmoEmbedder(model)
        model, options = embedder.model, embedder.options
    batches = [[["a", "b", "c"], ["d"], [], ["a", "b", "c", "d", "e"]], [["x"]], [[], []], [["a"] * 40, ["a"]]]
    for batch in batches:
        ids = batch_to_ids(batch)
        with torch.no_grad():
            full = model(ids, options=options)
            shared = model(ids, options=options, final_state=False)
        assert shared.final_state is None and full.final_state is not None
        assert shared.layers.shape == full.layers.shape
        assert torch.equal(shared.mask, full.mask)
        torch.testing.assert_close(shared.layers, full.layers, atol=1e-6, rtol=0)
        assert not shared.layers[:, ~shared.mask].any()  # nothing past a sentence's end


def test_token_encoder_once_per_distinct_token_has_the_same_values_and_gradients():
    """Training runs the token encoder on distinct tokens only; values and gradients are unchanged."""
    from pyelmo.modeling.encoder import TokenEncoder, encode_distinct

    torch.manual_seed(0)
    encoder = TokenEncoder(CharCNNConfig(filters=((1, 4), (2, 8), (3, 8)), n_highway=2, embedding_dim=4), 6)
    ids = batch_to_ids([["the", "cat", "the", "a"], ["a", "the"], []])  # repeats and padding rows
    grads = []
    for fn in (encoder, lambda x: encode_distinct(encoder, x)):
        encoder.zero_grad()
        out = fn(ids)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in encoder.parameters()]))
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=1e-6, rtol=0)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


class _GivenIds(torch.nn.Module):
    """An input module for a lexicon-sized encoder: the rows are the character ids, the word id a function of them."""

    def forward(self, rows):
        return rows, rows[:, 1] % 7


def test_one_token_encoder_holds_a_lexicon_and_a_word_embedding():
    """Characters of another vocabulary (its own padding id) and a word vector before the CNN's in the
    projection; the fused convolution equals the reference; the options carry the sizes, a byte model's do not."""
    from pyelmo.modeling.encoder import FusedConvMax, TokenEncoder

    config = CharCNNConfig(filters=((1, 4), (2, 8), (3, 8)), n_highway=1, embedding_dim=4, max_characters_per_token=6,
                           n_lexicon_characters=20, lexicon_padding_id=3, word_dim=5, n_words=7)
    assert ElmoConfig.from_options(ElmoConfig(char_cnn=config).to_options()).char_cnn == config
    assert set(ElmoConfig().to_options()["char_cnn"]) == {"activation", "filters", "n_highway", "embedding",
                                                         "n_characters", "max_characters_per_token"}
    torch.manual_seed(0)
    encoder = TokenEncoder(config, 6, _GivenIds())
    assert encoder.char_embedding.num_embeddings == 20 and encoder.projection.in_features == 5 + 20
    ids = torch.tensor([[0, 5, 19, 3, 3, 3], [0, 2, 2, 2, 1, 3], [0, 7, 3, 3, 3, 3]])
    got = encoder(ids)
    chars = encoder.char_embedding(ids).transpose(1, 2)
    x = torch.relu(torch.cat([conv(chars).max(dim=-1).values for conv in encoder.convolutions], dim=-1))
    x = encoder.highways[0](x)
    torch.testing.assert_close(got, encoder.projection(torch.cat([encoder.word_embedding(ids[:, 1] % 7), x], -1)))
    encoder.conv_max = FusedConvMax()
    torch.testing.assert_close(encoder(ids), got)
    plain = TokenEncoder(CharCNNConfig(filters=((1, 4),), n_highway=0, embedding_dim=4), 6)
    assert sorted(plain.state_dict()) == ["char_embedding.weight", "convolutions.0.bias", "convolutions.0.weight",
                                          "projection.bias", "projection.weight"]
