"""Training's products keep the LSTM's projection clip: through the public API only (``use_products`` and
``BiLM.forward``), so the test holds whatever runs the training loop underneath."""

from __future__ import annotations

import copy

import pytest
import torch

import pyelmo
from pyelmo.training.config import config_from_dict
from pyelmo.training.step import use_products
from tinyconfig import tiny_train_config

CLIP = 0.05
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["A", "dog", "barked"], ["Hi"]]


def _bilm(proj_clip: float | None) -> pyelmo.BiLM:
    torch.manual_seed(0)
    config = config_from_dict(tiny_train_config(lstm__proj_clip=proj_clip, lstm__n_layers=2)).model_config()
    return pyelmo.BiLM(config)


@pytest.mark.parametrize("products", ["plain", "fused"])
def test_training_products_apply_the_projection_clip(products):
    ids = pyelmo.batch_to_ids(SENTENCES)
    clipped, unclipped = _bilm(CLIP), _bilm(None)
    unclipped.load_state_dict(clipped.state_dict())
    with torch.no_grad():
        free = unclipped(ids).layers
    assert free[1].abs().max() > 2 * CLIP  # the first LSTM level's outputs are projections: the clip binds

    plain = clipped(ids)
    trainee = copy.deepcopy(clipped)
    use_products(trainee, products)
    trained = trainee(ids)
    assert plain.layers[1].abs().max() <= CLIP + 1e-7
    torch.testing.assert_close(trained.layers, plain.layers, atol=1e-5, rtol=0)
    for got, want in zip(trained.final_state, plain.final_state):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)

    # and the gradients: the clip's zero gradient beyond its bound
    plain_grads = torch.autograd.grad(plain.layers.square().sum(), list(clipped.parameters()))
    trained_grads = torch.autograd.grad(trained.layers.square().sum(), list(trainee.parameters()))
    for got, want in zip(trained_grads, plain_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
