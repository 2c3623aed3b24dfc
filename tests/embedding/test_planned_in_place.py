"""An inference-only owner that loads its own biLM plans it in place, once (one copy of its weights); a biLM
planned already runs as it is; any other biLM handed in stays as it is (an embedder plans a copy of it, a
frozen Elmo runs its own modules without autograd)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from pyelmo.embedding.elmo import Elmo
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import InputError
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import save_pretrained
from pyelmo.runtime.linear import PlannedLinear
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.planning import plan_model, planned_products

SENTENCES = [["the", "cat", "sat"], ["a"], ["bank", "of", "the", "river", "bank"]]


def _kinds(model: nn.Module) -> set[type]:
    return {type(m) for m in model.modules() if isinstance(m, (nn.Linear, PlannedLinear))}


def _mixed(elmo: Elmo) -> torch.Tensor:
    with torch.no_grad():
        return elmo(batch_to_ids(SENTENCES))["elmo_representations"][0]


def test_a_frozen_elmo_plans_the_bilm_it_loads_and_runs_one_handed_in_as_it_is(tiny_model, tmp_path):
    folder = save_pretrained(tiny_model, tmp_path / "model")
    ours = Elmo(str(folder), None, 1, dropout=0.0)
    handed = Elmo(None, None, 1, dropout=0.0, module=copy.deepcopy(tiny_model))
    planned = Elmo(None, None, 1, dropout=0.0, module=plan_model(copy.deepcopy(tiny_model), RunOptions.inference()))
    assert all(issubclass(kind, PlannedLinear) for kind in _kinds(ours.bilm))
    assert _kinds(handed.bilm) == {nn.Linear}  # handed in: free to train, its own modules run
    assert torch.equal(_mixed(ours), _mixed(planned))  # the same plan: the same bits
    assert (_mixed(ours) - _mixed(handed)).abs().max() < 1e-5  # the same function
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


def test_an_embedder_plans_a_copy_of_a_bilm_handed_in_and_runs_a_planned_one_as_it_is(tiny_model):
    mine = copy.deepcopy(tiny_model)
    handed = ElmoEmbedder(mine)
    planned = plan_model(copy.deepcopy(tiny_model), RunOptions.inference())
    taken = ElmoEmbedder(planned)
    assert _kinds(mine) == {nn.Linear} and handed.model is not mine  # the caller's biLM is left as it is
    assert all(issubclass(kind, PlannedLinear) for kind in _kinds(handed.model))
    assert taken.model is planned and taken.options.products is planned_products(planned)
    for a, b in zip(handed.embed_sentences(SENTENCES), taken.embed_sentences(SENTENCES)):
        assert np.array_equal(a, b)
    with pytest.raises(InputError, match="planned already"):
        ElmoEmbedder(planned, precision="int8")
