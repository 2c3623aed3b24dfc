"""Throwaway: an LSTM cell with layer norm trains (differentiable) and embeds under the default plan, agreeing."""

from __future__ import annotations

import torch

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5, save_bilm_hdf5, save_pretrained

SENTENCES = [["The", "bank", "of", "the", "river", "."], ["Money", "in", "a", "bank"], ["x"]]


def _tiny(layer_norm: bool) -> BiLM:
    torch.manual_seed(0)
    config = ElmoConfig(CharCNNConfig(filters=((1, 8), (2, 8)), n_highway=1, embedding_dim=8),
                        LSTMConfig(dim=16, projection_dim=8, n_layers=2, layer_norm=layer_norm))
    return BiLM(config)


def test_layer_norm_trains_and_embeds_the_same(tmp_path):
    model = _tiny(True)
    with torch.no_grad():  # a non-trivial gain and shift per direction
        for direction in model.directions:
            for layer in direction:
                layer.cell_norm.weight.uniform_(0.5, 1.5)
                layer.cell_norm.bias.uniform_(-0.2, 0.2)
    ids = batch_to_ids(SENTENCES)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.directions[1][0].cell_norm.weight.detach().clone()
    model(ids).layers.square().sum().backward()
    assert model.directions[1][0].cell_norm.weight.grad.abs().sum() > 0
    optimizer.step()
    assert not torch.equal(before, model.directions[1][0].cell_norm.weight)
    model.eval()
    with torch.no_grad():
        expected = model(ids)
    saved = save_pretrained(model, tmp_path / "model")
    assert from_pretrained(saved).config.lstm.layer_norm
    embedder = ElmoEmbedder(str(saved))  # the default inference plan, planned in place
    assert embedder.model.planned_products is not None
    for row, vectors in enumerate(embedder.embed_batch(SENTENCES)):
        n = len(SENTENCES[row])
        assert abs(torch.from_numpy(vectors) - expected.layers[:, row, :n]).max() <= 1e-5
    save_bilm_hdf5(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    again = load_bilm_hdf5(tmp_path / "options.json", tmp_path / "weights.hdf5")
    with torch.no_grad():
        assert torch.allclose(again(ids).layers, expected.layers, atol=1e-6)


def test_layer_norm_off_adds_no_parameters():
    plain, normed = _tiny(False), _tiny(True)
    assert set(plain.state_dict()) < set(normed.state_dict())
    assert "layer_norm" not in plain.config.to_options()["lstm"]
    off = torch.nn.Module.state_dict(plain)
    assert not any("cell_norm" in name for name in off)
