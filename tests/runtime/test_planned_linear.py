"""Planned linear layers (pyelmo.runtime.linear): planning a biLM (pyelmo.runtime.planning.plan_model) swaps
its nn.Linears, once; the weights and state kept, and ``load_state_dict`` still loads."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import model_fingerprint
from pyelmo.runtime.linear import PLANNED, BFloat16Linear, ExactLinear, Int8Linear, PlannedLinear
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.planning import plan_model
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import Quantization

SENTENCES = [["the", "cat", "sat"], ["a"], ["bank", "of", "the", "river", "bank"]]


def _linears(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.Linear, PlannedLinear))]


def test_each_precision_has_one_registered_class():
    assert PLANNED == {"float32": ExactLinear, "bfloat16": BFloat16Linear, "int8": Int8Linear}


@pytest.mark.parametrize("plan", [ExecutionPlan(), ExecutionPlan(kernels="mm"),
                                  ExecutionPlan(precision="int8", quantization=Quantization(0))])
def test_a_planned_linear_computes_the_linear(plan):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40)
    x = torch.randn(5, 24)
    planned = plan_model(nn.Sequential(linear), RunOptions(plan))[0]
    assert isinstance(planned, PLANNED[plan.precision])
    with torch.no_grad():
        want = linear(x)
        tolerance = 0.05 if plan.precision == "int8" else 1e-5
        torch.testing.assert_close(planned(x), want, rtol=tolerance, atol=tolerance)
        acc = torch.ones(5, 40)
        torch.testing.assert_close(planned.add_to(acc, x), 1 + want - linear.bias, rtol=tolerance, atol=tolerance)


def test_planning_swaps_every_linear_once_and_keeps_the_state(tiny_model):
    import copy

    fingerprint = model_fingerprint(tiny_model)
    options = RunOptions.inference()
    planned = plan_model(tiny_model, options)
    assert planned is tiny_model and all(isinstance(m, ExactLinear) for m in _linears(tiny_model))
    assert all(m.products is options.products for m in _linears(tiny_model))  # what ran is recorded there
    assert model_fingerprint(tiny_model) == fingerprint  # float32: the same weights under the same names
    assert not any(p.requires_grad for p in tiny_model.parameters())  # no autograd
    with pytest.raises(ValueError, match="planned already"):
        plan_model(tiny_model, RunOptions.inference())
    with pytest.raises(ValueError, match="inference"):
        plan_model(copy.deepcopy(tiny_model), RunOptions())
    with torch.no_grad():
        layers = tiny_model(batch_to_ids(SENTENCES)).layers
    assert layers.abs().max() > 0 and options.products.decisions


def test_two_biLMs_planned_alike_give_the_same_bits(tiny_model):
    import copy

    runs = []
    for _ in range(2):
        options = RunOptions.inference()
        model = plan_model(copy.deepcopy(tiny_model), options)
        runs.append((model(batch_to_ids(SENTENCES), options=options).layers, options.products.decisions))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


def _other_weights(model):
    """The same architecture with other weights (each one moved a little)."""
    import copy

    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))
    return other


def _planned_copy(model, precision: str):
    import copy

    options = RunOptions.inference(precision=precision, **({"quantization": Quantization(0)} if precision == "int8" else {}))
    return plan_model(copy.deepcopy(model), options), options


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_load_state_dict_on_a_planned_bilm_gives_a_fresh_load_of_those_weights(tiny_model, precision):
    ids = batch_to_ids(SENTENCES)
    other = _other_weights(tiny_model)
    planned, options = _planned_copy(tiny_model, precision)
    fresh, fresh_options = _planned_copy(other, precision)
    with torch.no_grad():
        before = planned(ids, options=options).layers  # its prepared weights (and directions' pairs) made
        planned.load_state_dict(other.state_dict())  # an unplanned biLM's keys, int8 too
        got = planned(ids, options=options).layers
        want = fresh(ids, options=fresh_options).layers
    assert not torch.allclose(got, before, atol=1e-3)
    if precision == "int8":  # quantized again from the same float weights: the same int8 numbers
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    else:
        assert torch.equal(got, want)


def test_loading_one_directions_weights_refreshes_the_pair_that_batches_both(tiny_model):
    ids = batch_to_ids(SENTENCES)
    backward = {k: v for k, v in _other_weights(tiny_model).state_dict().items() if k.startswith("directions.1.")}
    planned, options = _planned_copy(tiny_model, "float32")
    fresh, fresh_options = _planned_copy(tiny_model, "float32")
    with torch.no_grad():
        before = planned(ids, options=options).layers  # the pairs of both directions' step products made
        planned.load_state_dict(backward, strict=False)  # the second direction's linears only
        fresh.load_state_dict(backward, strict=False)  # before anything was prepared
        got = planned(ids, options=options).layers
        assert torch.equal(got, fresh(ids, options=fresh_options).layers)
    assert torch.equal(got[..., :got.shape[-1] // 2], before[..., :got.shape[-1] // 2])  # forward: unchanged
    assert not torch.equal(got, before)


def test_an_int8_planned_bilm_refuses_a_state_dict_without_its_float_weights(tiny_model):
    planned, _ = _planned_copy(tiny_model, "int8")
    state = tiny_model.state_dict()
    with pytest.raises(RuntimeError, match="Missing key.*directions.0.0.input_gates.weight"):
        planned.load_state_dict({k: v for k, v in state.items() if k != "directions.0.0.input_gates.weight"})
    with pytest.raises(RuntimeError, match="size mismatch for directions.0.0.input_gates.weight"):
        planned.load_state_dict({**state, "directions.0.0.input_gates.weight": torch.zeros(3, 3)})


@pytest.mark.parametrize("plan", [ExecutionPlan(kernels="onednn"), ExecutionPlan(precision="int8", quantization=Quantization(0))])
def test_an_elmo_that_has_run_copies_and_the_copy_gives_the_same_bits(tiny_model, tmp_path, plan):
    import copy

    from pyelmo.embedding.elmo import Elmo
    from pyelmo.modelio.weights import save_pretrained

    if plan.kernels == "onednn" and not plan.onednn:
        pytest.skip("no oneDNN in this torch build")
    elmo = Elmo(str(save_pretrained(tiny_model, tmp_path / "m")), None, 1, dropout=0.0,
                options=RunOptions.inference(plan))
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        before = elmo(ids)["elmo_representations"][0]  # prepares (oneDNN: packs) every weight
        copied = copy.deepcopy(elmo)  # oneDNN's packed weights are opaque tensors: not copied, packed again
        assert torch.equal(copied(ids)["elmo_representations"][0], before)
        assert torch.equal(elmo(ids)["elmo_representations"][0], before)


@pytest.mark.parametrize("large", [False, True])
def test_a_pairs_stacked_weights_are_w_transposed_copied_or_stacked_as_stored_by_size(monkeypatch, large):
    """Small weights (in cache) are stacked as ``W^T`` made contiguous; from ``STACK_AS_STORED_MIN`` elements on, as
    stored (a plain copy) and read transposed; the batched one-row products match the directions' own."""
    from pyelmo.runtime import linear as planned_linear

    monkeypatch.setattr(planned_linear, "STACK_AS_STORED_MIN", 24 * 40 if large else 24 * 40 + 1)
    torch.manual_seed(0)
    linears = [nn.Linear(24, 40, bias=False) for _ in range(2)]
    planned = list(plan_model(nn.Sequential(*linears), RunOptions(ExecutionPlan())))
    pair = planned[0].pair(planned)
    x = torch.randn(2, 1, 24)
    with torch.no_grad():
        got = pair.product(x, torch.empty(2, 1, 40))
        torch.testing.assert_close(got, torch.stack([linears[d](x[d]) for d in range(2)]), rtol=1e-6, atol=1e-6)
    assert pair.stacked.is_contiguous() != large
    assert torch.equal(pair.stacked, torch.stack([linear.weight.t() for linear in linears]))
