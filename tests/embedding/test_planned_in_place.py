"""An inference-only owner that loads its own biLM plans it in place, once (one copy of its weights); a biLM
handed in stays as it is (a planned copy of it runs), and the vectors are the same bits either way."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from pyelmo.embedding.elmo import Elmo
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import save_pretrained
from pyelmo.runtime.linear import PlannedLinear

SENTENCES = [["the", "cat", "sat"], ["a"], ["bank", "of", "the", "river", "bank"]]


def _kinds(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, (nn.Linear, PlannedLinear))}


def _no_copies(options) -> bool:
    """No planned copy of a biLM was made for ``options`` (only the fused convolutions' weight is derived)."""
    from pyelmo.modeling.bilm import BiLM

    return not any(isinstance(kept[2], BiLM) for kept in options.products._derived.values())


def _mixed(elmo: Elmo) -> torch.Tensor:
    with torch.no_grad():
        return elmo(batch_to_ids(SENTENCES))["elmo_representations"][0]


def test_a_frozen_elmo_plans_the_bilm_it_loads_and_gives_the_planned_copys_bits(tiny_model, tmp_path):
    folder = save_pretrained(tiny_model, tmp_path / "model")
    ours = Elmo(str(folder), None, 1, dropout=0.0)
    handed = Elmo(None, None, 1, dropout=0.0, module=copy.deepcopy(tiny_model))
    assert all(issubclass(kind, PlannedLinear) for kind in _kinds(ours.bilm))
    assert _kinds(handed.bilm) == {nn.Linear}  # handed in: free to train, a planned copy runs
    assert torch.equal(_mixed(ours), _mixed(handed))
    assert _no_copies(ours.options) and not _no_copies(handed.options)
    trainable = Elmo(str(folder), None, 1, dropout=0.0, requires_grad=True)
    assert _kinds(trainable.bilm) == {nn.Linear}  # differentiable: unplanned


def test_load_state_dict_on_a_planned_elmo_gives_a_fresh_elmo_of_those_weights(tiny_model, tmp_path):
    ours = Elmo(str(save_pretrained(tiny_model, tmp_path / "a")), None, 1, dropout=0.0)
    before = _mixed(ours)
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.1)
    fresh = Elmo(str(save_pretrained(other, tmp_path / "b")), None, 1, dropout=0.0)
    ours.load_state_dict(fresh.state_dict())
    assert torch.equal(_mixed(ours), _mixed(fresh)) and not torch.equal(_mixed(ours), before)


def test_an_embedder_plans_a_bilm_handed_in_in_place_only_when_asked(tiny_model):
    handed = ElmoEmbedder(copy.deepcopy(tiny_model))
    taken = ElmoEmbedder(copy.deepcopy(tiny_model), plan_in_place=True)
    assert _kinds(handed.model) == {nn.Linear}
    assert all(issubclass(kind, PlannedLinear) for kind in _kinds(taken.model))
    for a, b in zip(handed.embed_sentences(SENTENCES), taken.embed_sentences(SENTENCES)):
        assert np.array_equal(a, b)
    assert _no_copies(taken.options) and not _no_copies(handed.options)
