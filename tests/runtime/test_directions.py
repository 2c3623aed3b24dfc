"""The order of a level's two directions in the packed loop (``ExecutionPlan.level_order``, run by
the level module ``modeling.lstm.planned_level`` gives it): together or one after
the other compute the same; under autotune the order is timed on the first calls themselves
(MeasuredChoices.trial) and the faster one kept on disk with the kernel choices; otherwise the plan's
order runs, untimed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pyelmo.errors import ConfigError
from pyelmo.modeling import lstm as lstm_module
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.runtime import autotune
from pyelmo.runtime.autotune import TRIAL_CALLS, MeasuredChoices, kernel_cache_path
from pyelmo.runtime.options import CarriedStates, RunOptions
from pyelmo.runtime.plan import LEVEL_ORDERS, ExecutionPlan

ATOL = 1e-5


@pytest.fixture
def cache(fresh_kernel_cache, monkeypatch):
    """A fresh on-disk cache and in-process table (a new process); records the order of every level
    call: ``run_lstm`` as a level runs it, on both layers of a level (together) or on each alone (apart)."""
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
    with torch.no_grad():
        out = model(batch_to_ids(batch), options=RunOptions.inference(plan))
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


def test_autotune_times_both_orders_on_the_first_calls_then_keeps_the_faster(reference, cache, monkeypatch):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    levels = model.config.lstm.n_layers
    calls = 2 * (TRIAL_CALLS + 1)  # each order: a warm-up call and TRIAL_CALLS timed ones
    expected, _ = _run(model, batch, ExecutionPlan(level_order="together"))
    del cache[:]
    plan = ExecutionPlan.for_machine(autotune=True)
    assert plan.level_order == "autotune"
    for _ in range(-(-calls // levels)):
        layers, _ = _run(model, batch, plan)
        np.testing.assert_allclose(layers, expected, atol=1e-6, rtol=0)
    assert cache[:calls] == ["together", "apart"] * (calls // 2)  # the calls take turns
    stored = json.loads(kernel_cache_path().read_text())["choices"]
    entry = [k for k in stored if k.startswith("directions ")]
    assert entry == [f"directions precision=float32 threads={torch.get_num_threads()} rows=8 lstm="
                     f"{model.config.lstm.projection_dim}x{model.config.lstm.dim}x{model.config.lstm.projection_dim}"]
    chosen = stored[entry[0]]
    del cache[:]
    monkeypatch.setattr(autotune, "MEASURED", MeasuredChoices())  # a new process: read from disk
    _run(model, batch, plan)
    assert cache == [chosen] * levels


def test_trial_prefers_the_first_option_unless_another_is_clearly_cheaper(cache):
    for costs, chosen in [((1.0, 0.95), "together"), ((1.0, 0.5), "apart"), ((0.5, 1.0), "together")]:
        table = MeasuredChoices()
        for call in range(2 * (TRIAL_CALLS + 1)):
            option, record = table.trial("directions test", LEVEL_ORDERS)
            assert option == LEVEL_ORDERS[call % 2] and record is not None
            record(costs[call % 2] * (10 if call < 2 else 1))  # a slow warm-up call does not count
        assert table.trial("directions test", LEVEL_ORDERS) == (chosen, None)
        kernel_cache_path().unlink()


@pytest.mark.parametrize("kernels", ["fixed", "mm"])
def test_without_autotune_the_plans_order_runs_untimed(allennlp_reference, tiny_model, cache, kernels, monkeypatch):
    monkeypatch.setattr(autotune, "level_order", lambda *a: pytest.fail("the order was measured"))
    model = tiny_model
    for order in LEVEL_ORDERS:
        del cache[:]
        _run(model, allennlp_reference.batch(0), ExecutionPlan(kernels=kernels, level_order=order))
        _run(model, allennlp_reference.batch(1), ExecutionPlan(kernels=kernels, level_order=order))
        assert cache == [order] * (2 * model.config.lstm.n_layers)
    assert not kernel_cache_path().exists()


def test_the_default_plan_fixes_the_order_by_the_cpu(cache, monkeypatch):
    """The default plan never times the order: apart on CPUs with AMX tiles, else together."""
    from pyelmo.runtime import plan as plan_module

    for flags, order in [({"avx2"}, "together"), ({"avx512f", "amx_tile"}, "apart")]:
        monkeypatch.setattr(plan_module, "cpu_flags", lambda flags=flags: ("a CPU", frozenset(flags)))
        assert ExecutionPlan.for_machine().level_order == order
        assert ExecutionPlan.for_machine(autotune=True).level_order == "autotune"


def test_the_differentiable_backend_runs_both_directions_together(tiny_model, cache):
    with torch.no_grad():
        tiny_model(batch_to_ids([["a", "cat"], ["the"]]))
    assert cache == ["together"] * tiny_model.config.lstm.n_layers


def test_directions_are_validated_and_bad_cached_orders_ignored(cache):
    with pytest.raises(ConfigError, match="level_order"):
        ExecutionPlan(level_order="sideways")
    path = kernel_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**autotune.machine_key(), "choices": {
        "directions precision=float32 threads=1 rows=1 lstm=8x16x8": "mm",
        "directions precision=float32 threads=1 rows=8 lstm=8x16x8": "apart"}}))
    assert autotune.read_choices(path, autotune.machine_key()) == {
        "directions precision=float32 threads=1 rows=8 lstm=8x16x8": "apart"}


def test_a_plan_swaps_in_its_level_module_which_holds_no_weights(tiny_model):
    import copy

    from pyelmo.modeling.lstm import LEVELS, Apart, Measured, Together

    assert set(LEVELS) == {*LEVEL_ORDERS, "autotune"}  # every order a plan may name has its module
    assert type(tiny_model.level) is Together  # unplanned: the differentiable path's order
    keys = set(tiny_model.state_dict())
    for order, kind in [("together", Together), ("apart", Apart), ("autotune", Measured)]:
        options = RunOptions.inference(ExecutionPlan(level_order=order))
        planned = copy.deepcopy(tiny_model).apply_plan(options)
        assert type(planned.level) is kind
        assert set(planned.state_dict()) == keys  # the same saved names: the level module has no state
