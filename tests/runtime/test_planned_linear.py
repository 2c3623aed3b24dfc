"""Planned linear layers (pyelmo.runtime.linear): a plan applied to a biLM swaps its nn.Linears, once;
the same vectors as the planned copy an unplanned biLM runs as; the weights and state kept."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import model_fingerprint
from pyelmo.runtime.linear import PLANNED, BFloat16Linear, ExactLinear, Int8Linear, PlannedLinear
from pyelmo.runtime.swap import swap_linears
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.products import Products

SENTENCES = [["the", "cat", "sat"], ["a"], ["bank", "of", "the", "river", "bank"]]


def _linears(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.Linear, PlannedLinear))]


def test_each_precision_has_one_registered_class():
    assert PLANNED == {"float32": ExactLinear, "bfloat16": BFloat16Linear, "int8": Int8Linear}


@pytest.mark.parametrize("plan", [ExecutionPlan(), ExecutionPlan(kernels="mm"),
                                  ExecutionPlan(precision="int8", int8_min_weight=0)])
def test_a_planned_linear_computes_the_linear(plan):
    torch.manual_seed(0)
    linear = nn.Linear(24, 40)
    x = torch.randn(5, 24)
    planned = swap_linears(nn.Sequential(linear), Products(plan))[0]
    assert isinstance(planned, PLANNED[plan.precision])
    with torch.no_grad():
        want = linear(x)
        tolerance = 0.05 if plan.precision == "int8" else 1e-5
        torch.testing.assert_close(planned(x), want, rtol=tolerance, atol=tolerance)
        acc = torch.ones(5, 40)
        torch.testing.assert_close(planned.add_to(acc, x), 1 + want - linear.bias, rtol=tolerance, atol=tolerance)


def test_applying_a_plan_swaps_every_linear_and_keeps_the_state(tiny_model):
    options = RunOptions.inference()
    fingerprint = model_fingerprint(tiny_model)
    with torch.no_grad():
        copy = tiny_model(batch_to_ids(SENTENCES), options=options).layers  # a planned copy runs
    assert all(type(m) is nn.Linear for m in _linears(tiny_model))  # the model handed in is left as it is
    planned = tiny_model.apply_plan(RunOptions.inference())
    assert planned is tiny_model and all(isinstance(m, ExactLinear) for m in _linears(tiny_model))
    assert model_fingerprint(tiny_model) == fingerprint  # float32: the same weights under the same names
    with torch.no_grad(), pytest.raises(ValueError, match="owner's run options"):
        tiny_model(batch_to_ids(SENTENCES), options=options)  # planned for other options
    with pytest.raises(ValueError, match="owner's run options"):
        tiny_model(batch_to_ids(SENTENCES))  # nor differentiable
    with pytest.raises(ValueError, match="once"):
        tiny_model.apply_plan(RunOptions.inference())
    assert copy.abs().max() > 0


def test_a_planned_biLM_equals_the_planned_copy_bit_for_bit(tiny_model):
    import copy

    options = RunOptions.inference()
    owned = copy.deepcopy(tiny_model)
    owned_options = RunOptions.inference()
    owned.apply_plan(owned_options)
    with torch.no_grad():
        a = tiny_model(batch_to_ids(SENTENCES), options=options).layers
        b = owned(batch_to_ids(SENTENCES), options=owned_options).layers
    assert torch.equal(a, b)
    assert options.products.decisions == owned_options.products.decisions  # recorded the same way


def test_the_planned_copy_is_made_once_and_again_after_a_weight_change(tiny_model):
    options = RunOptions.inference()
    with torch.no_grad():
        first = tiny_model.for_run(options)
        assert tiny_model.for_run(options) is first
        before = tiny_model(batch_to_ids(SENTENCES), options=options).layers
        tiny_model.directions[0][0].state_gates.weight.mul_(0.5)
        assert tiny_model.for_run(options) is not first
        after = tiny_model(batch_to_ids(SENTENCES), options=options).layers
    assert not torch.equal(before, after)


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

    options = RunOptions.inference(precision=precision, **({"int8_min_weight": 0} if precision == "int8" else {}))
    return copy.deepcopy(model).apply_plan(options), options


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


@pytest.mark.parametrize("plan", [ExecutionPlan(kernels="onednn"), ExecutionPlan(precision="int8", int8_min_weight=0)])
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
