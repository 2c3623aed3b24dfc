"""The order of a level's two directions in the packed loop (``ExecutionPlan.level_order``, run by
the level module of ``modeling.lstm.LEVELS``): together or one after the other compute the same, and
the plan's order is the one that runs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from pyelmo.errors import ConfigError
from pyelmo.modeling import lstm as lstm_module
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.runtime.options import CarriedStates, RunOptions
from pyelmo.runtime.plan import LEVEL_ORDERS, ExecutionPlan
from pyelmo.runtime.planning import plan_model

ATOL = 1e-5


@pytest.fixture
def cache(monkeypatch):
    """Records the order of every level call: ``run_lstm`` as a level runs it, on both layers of a level
    (together) or on each alone (apart)."""
    orders = []
    real = lstm_module.run_lstm

    def recording(layers, *args, **kwargs):
        if len(layers) == 2 or not orders or orders[-1] != "apart (first)":
            orders.append("together" if len(layers) == 2 else "apart (first)")
        else:
            orders[-1] = "apart"
        return real(layers, *args, **kwargs)

    monkeypatch.setattr(lstm_module, "run_lstm", recording)
    return orders


def _run(model, batch, plan: ExecutionPlan | None = None) -> tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor]]:
    options = RunOptions.inference(plan)
    planned = plan_model(copy.deepcopy(model), options)
    with torch.no_grad():
        out = planned(batch_to_ids(batch), options=options)
    return out.layers.numpy(), out.final_state


@pytest.mark.parametrize("order", LEVEL_ORDERS)
def test_each_order_reproduces_the_reference(reference, order, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    layers, _ = _run(model, batch, ExecutionPlan(level_order=order))
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(layers[-1][k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert cache == [order] * model.config.lstm.n_layers


def test_both_orders_compute_the_same_outputs_and_states(reference, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batches = [reference.batch(0), [["a"]], reference.batch(0)[:2]]  # rows of several lengths, one row
    for batch in batches:
        together, (h1, c1) = _run(model, batch, ExecutionPlan(level_order="together"))
        apart, (h2, c2) = _run(model, batch, ExecutionPlan(level_order="apart"))
        np.testing.assert_allclose(apart, together, atol=1e-6, rtol=0)
        assert (h1 - h2).abs().max() < 1e-6 and (c1 - c2).abs().max() < 1e-6
    stateful = {}
    for order in LEVEL_ORDERS:  # carried states continue the same way
        options = RunOptions.inference(ExecutionPlan(level_order=order), stateful=True)
        with torch.no_grad():
            stateful[order] = [model(batch_to_ids(b), options=options).layers.numpy() for b in batches[::2]]
        assert isinstance(options.states, CarriedStates) and options.states.h is not None
    for a, b in zip(*stateful.values()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("kernels", ["fixed", "mm"])
def test_the_plans_order_runs(allennlp_reference, tiny_model, cache, kernels):
    model = tiny_model
    for order in LEVEL_ORDERS:
        del cache[:]
        _run(model, allennlp_reference.batch(0), ExecutionPlan(kernels=kernels, level_order=order))
        _run(model, allennlp_reference.batch(1), ExecutionPlan(kernels=kernels, level_order=order))
        assert cache == [order] * (2 * model.config.lstm.n_layers)


def test_the_default_plan_fixes_the_order_by_the_cpu(cache, monkeypatch):
    """The default plan's order is a rule of the CPU: apart on CPUs with AMX tiles, else together."""
    from pyelmo.runtime import plan as plan_module

    for flags, order in [({"avx2"}, "together"), ({"avx512f", "amx_tile"}, "apart")]:
        monkeypatch.setattr(plan_module, "cpu_flags", lambda flags=flags: ("a CPU", frozenset(flags)))
        assert ExecutionPlan.for_machine().level_order == order


def test_the_differentiable_backend_runs_both_directions_together(tiny_model, cache):
    with torch.no_grad():
        tiny_model(batch_to_ids([["a", "cat"], ["the"]]))
    assert cache == ["together"] * tiny_model.config.lstm.n_layers


def test_directions_are_validated():
    for bad in ("sideways", "autotune"):
        with pytest.raises(ConfigError, match="level_order"):
            ExecutionPlan(level_order=bad)


def test_a_plan_swaps_in_its_level_module_which_holds_no_weights(tiny_model):
    from pyelmo.modeling.lstm import LEVELS, Apart, Together

    assert set(LEVELS) == set(LEVEL_ORDERS)  # every order a plan may name has its module
    assert type(tiny_model.level) is Together  # unplanned: the differentiable path's order
    keys = set(tiny_model.state_dict())
    for order, kind in [("together", Together), ("apart", Apart)]:
        options = RunOptions.inference(ExecutionPlan(level_order=order))
        planned = plan_model(copy.deepcopy(tiny_model), options)
        assert type(planned.level) is kind
        assert set(planned.state_dict()) == keys  # the same saved names: the level module has no state
