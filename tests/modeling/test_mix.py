"""ScalarMix and the Elmo module keep AllenNLP's contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.embedding.elmo import Elmo
from pyelmo.modeling.mix import ScalarMix


def test_scalar_mix_starts_as_average_and_learns():
    layers = [torch.full((2, 3, 4), float(v)) for v in (1, 2, 6)]
    mix = ScalarMix(3)
    out = mix(layers)
    torch.testing.assert_close(out, torch.full((2, 3, 4), 3.0))
    out.sum().backward()
    assert mix.scalar_parameters.grad is not None and mix.gamma.grad is not None
    assert mix.scalar_parameters.grad.abs().sum() > 0


def test_fixed_mix_and_regulariser():
    mix = ScalarMix(3, initial_scalar_parameters=[0.0, 0.0, 1.0], trainable=False)
    assert not mix.scalar_parameters.requires_grad
    assert mix.regularization(0.5).item() == pytest.approx(0.5)
    assert mix.weights.argmax().item() == 2


def test_layer_norm_uses_unmasked_elements_only():
    x = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    padded = x.clone()
    padded[0, 3:] = 1000.0  # garbage in masked positions must not change the statistics
    mix = ScalarMix(1, do_layer_norm=True)
    a, b = mix([x], mask), mix([padded], mask)
    torch.testing.assert_close(a[mask], b[mask])
    normed = a[mask]
    assert normed.mean().abs() < 1e-5 and (normed.var(unbiased=False) - 1).abs() < 1e-4


def test_elmo_two_representations_with_own_mixes(tiny_model):
    elmo = Elmo(tiny_model, None, num_output_representations=2, dropout=0.0)
    ids = batch_to_ids([["The", "bank", "."], ["Hi"]])
    out = elmo(ids)
    reps = out["elmo_representations"]
    assert len(reps) == 2 and reps[0].shape == (2, 3, 32) and elmo.get_output_dim() == 32
    assert out["mask"].tolist() == [[True, True, True], [True, False, False]]
    torch.testing.assert_close(reps[0], reps[1])
    with torch.no_grad():
        elmo.scalar_mixes[1].scalar_parameters[2] = 3.0
    reps = elmo(ids)["elmo_representations"]
    assert (reps[0] - reps[1]).abs().max() > 1e-4
    reps[0].sum().backward()
    assert elmo.scalar_mixes[0].scalar_parameters.grad is not None
    assert all(p.grad is None for p in elmo.bilm.parameters())


def test_elmo_requires_grad_trains_bilm_and_boundaries(tiny_model):
    elmo = Elmo(tiny_model, None, 1, requires_grad=True, dropout=0.0, keep_sentence_boundaries=True)
    out = elmo(batch_to_ids([["a", "b"]]))
    assert out["elmo_representations"][0].shape == (1, 4, 32)
    out["elmo_representations"][0].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in elmo.bilm.parameters())


def test_elmo_loads_released_files_and_extra_dims(allennlp_reference):
    elmo = Elmo(str(allennlp_reference.options), str(allennlp_reference.weights), 1, dropout=0.0)
    ids = batch_to_ids([["a", "b"], ["c"]]).unsqueeze(0).expand(3, -1, -1, -1)
    out = elmo(ids)
    assert out["elmo_representations"][0].shape == (3, 2, 2, 32)
    assert out["mask"].shape == (3, 2, 2)


def test_scalar_mix_is_softmax_weighted_and_scaled_by_gamma():
    """Independent expectation: numpy softmax of w, gamma applied once (not squared)."""
    w = np.array([1.0, -0.5, 2.0])
    gamma = 2.5
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(3, 2, 4, 5)).astype(np.float32)
    mix = ScalarMix(3, initial_scalar_parameters=w.tolist())
    with torch.no_grad():
        mix.gamma.fill_(gamma)
    out = mix([torch.from_numpy(layer) for layer in layers]).detach().numpy()
    softmax = np.exp(w) / np.exp(w).sum()
    expected = gamma * np.tensordot(softmax, layers, axes=1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mix.weights.detach().numpy(), softmax, rtol=1e-6)


def test_elmo_dropout_zeroes_and_rescales_in_training_only(tiny_model):
    ids = batch_to_ids([["The", "bank", "closed", "early", "."], ["Rivers", "flood", "banks"]])
    reference = Elmo(tiny_model, None, 1, dropout=0.0)(ids)["elmo_representations"][0].detach()
    elmo = Elmo(tiny_model, None, 1, dropout=0.5)
    torch.manual_seed(0)
    dropped = elmo(ids)["elmo_representations"][0].detach()
    nonzero = reference != 0
    zeroed = (dropped == 0) & nonzero
    assert 0.3 < zeroed.sum().item() / nonzero.sum().item() < 0.7  # about half the values dropped
    kept = nonzero & ~zeroed
    torch.testing.assert_close(dropped[kept], 2 * reference[kept])  # survivors scaled by 1 / (1 - p)
    elmo.eval()
    torch.testing.assert_close(elmo(ids)["elmo_representations"][0].detach(), reference)
