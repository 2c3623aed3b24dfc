"""The packed loop's order of a level's two directions (pyelmo.runtime.options.directions): together or one
after the other compute the same; under the "auto" kernel policy the order is timed on the first
calls themselves (MeasuredChoices.trial) and the faster one kept on disk with the kernel choices."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pyelmo.runtime import autotune as kernelchoice; from pyelmo.runtime import options as strategy
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime.autotune import DIRECTIONS, TRIAL_CALLS, MeasuredChoices, kernel_cache_path
from pyelmo.runtime.options import CarriedStates, RunOptions
from pyelmo.modelio.weights import load_bilm_hdf5

ATOL = 1e-5


@pytest.fixture
def cache(fresh_kernel_cache, monkeypatch):
    """A fresh on-disk cache and in-process table (a new process); records the order of every level call."""
    orders = []
    real = strategy.run_packed_pair

    def recording(pair, *args, **kwargs):
        if len(pair) == 2 or not orders or orders[-1] != "apart (first)":
            orders.append("together" if len(pair) == 2 else "apart (first)")
        else:
            orders[-1] = "apart"
        return real(pair, *args, **kwargs)

    monkeypatch.setattr(strategy, "run_packed_pair", recording)
    return orders


def _run(model, batch, **options) -> tuple[np.ndarray, tuple[torch.Tensor, torch.Tensor]]:
    with torch.no_grad():
        out = model(batch_to_ids(batch), options=RunOptions.inference(**options))
    return out.layers.numpy(), out.final_state


@pytest.mark.parametrize("order", DIRECTIONS)
def test_each_order_reproduces_the_reference(reference, order, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    layers, _ = _run(model, batch, directions=order)
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(layers[-1][k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert set(cache) == {order}


def test_both_orders_compute_the_same_outputs_and_states(reference, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batches = [reference.batch(0), [["a"]], reference.batch(0)[:2]]  # rows of several lengths, one row
    for batch in batches:
        together, (h1, c1) = _run(model, batch, directions="together")
        apart, (h2, c2) = _run(model, batch, directions="apart")
        np.testing.assert_allclose(apart, together, atol=1e-6, rtol=0)
        assert (h1 - h2).abs().max() < 1e-6 and (c1 - c2).abs().max() < 1e-6
    stateful = {}
    for order in DIRECTIONS:  # carried states continue the same way
        options = RunOptions.inference(stateful=True, directions=order)
        with torch.no_grad():
            stateful[order] = [model(batch_to_ids(b), options=options).layers.numpy() for b in batches[::2]]
        assert isinstance(options.states, CarriedStates) and options.states.h is not None
    for a, b in zip(*stateful.values()):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=0)


def test_auto_times_both_orders_on_the_first_calls_then_keeps_the_faster(reference, cache, monkeypatch):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    levels = model.config.lstm.n_layers
    calls = 2 * (TRIAL_CALLS + 1)  # each order: a warm-up call and TRIAL_CALLS timed ones
    expected, _ = _run(model, batch, directions="together")
    del cache[:]
    for _ in range(-(-calls // levels)):
        layers, _ = _run(model, batch)
        np.testing.assert_allclose(layers, expected, atol=1e-6, rtol=0)
    assert cache[:calls] == ["together", "apart"] * (calls // 2)  # the calls take turns
    stored = json.loads(kernel_cache_path().read_text())["choices"]
    entry = [k for k in stored if k.startswith("directions ")]
    assert entry == [f"directions precision=float32 threads={torch.get_num_threads()} rows=8 lstm="
                     f"{model.config.lstm.projection_dim}x{model.config.lstm.dim}x{model.config.lstm.projection_dim}"]
    chosen = stored[entry[0]]
    del cache[:]
    monkeypatch.setattr(kernelchoice, "MEASURED", MeasuredChoices())  # a new process: read from disk
    _run(model, batch)
    assert cache == [chosen] * levels


def test_trial_prefers_the_first_option_unless_another_is_clearly_cheaper(cache):
    for costs, chosen in [((1.0, 0.95), "together"), ((1.0, 0.5), "apart"), ((0.5, 1.0), "together")]:
        table = MeasuredChoices()
        for call in range(2 * (TRIAL_CALLS + 1)):
            option, record = table.trial("directions test", DIRECTIONS)
            assert option == DIRECTIONS[call % 2] and record is not None
            record(costs[call % 2] * (10 if call < 2 else 1))  # a slow warm-up call does not count
        assert table.trial("directions test", DIRECTIONS) == (chosen, None)
        kernel_cache_path().unlink()


@pytest.mark.parametrize("kernels", ["fixed", "mm"])
def test_without_auto_the_directions_run_together_untimed(reference, cache, kernels):
    model = load_bilm_hdf5(reference.options, reference.weights)
    _run(model, reference.batch(0), kernels=kernels)
    _run(model, reference.batch(0), kernels=kernels)
    assert set(cache) == {"together"}
    assert not kernel_cache_path().exists() or not any(
        k.startswith("directions ") for k in json.loads(kernel_cache_path().read_text())["choices"])


def test_directions_are_validated_and_bad_cached_orders_ignored(cache):
    with pytest.raises(ValueError, match="directions"):
        RunOptions("packed", directions="sideways")
    path = kernel_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**kernelchoice.machine_key(), "choices": {
        "directions precision=float32 threads=1 rows=1 lstm=8x16x8": "mm",
        "directions precision=float32 threads=1 rows=8 lstm=8x16x8": "apart"}}))
    assert kernelchoice.read_choices(path, kernelchoice.machine_key()) == {
        "directions precision=float32 threads=1 rows=8 lstm=8x16x8": "apart"}
