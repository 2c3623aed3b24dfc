"""The time steps on fixed buffers (``ExecutionPlan.steps``, :mod:`pyelmo.runtime.steps`): the path CUDA graphs
replay, run eagerly on the CPU, gives the same bits as the eager loop, in both orders, for batches that
shrink step by step, grow and carry their states; graphs are a CUDA device's default and refused elsewhere."""

from __future__ import annotations

import copy
import numpy as np
import pytest
import torch

from pyelmo.errors import ConfigError
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import LEVEL_ORDERS, ExecutionPlan
from pyelmo.runtime.planning import plan_model
from pyelmo.runtime.rules import STEP_MODES
from pyelmo.runtime.steps import StaticSteps

WORDS = "the bank of the river was steep and the money in the bank was safe".split()


def _batches(seed: int) -> list[list[list[str]]]:
    """Batches of sentences of different lengths (rows end at different steps), the second one larger."""
    rng = np.random.default_rng(seed)
    return [[[WORDS[i] for i in rng.integers(0, len(WORDS), size)] for size in sizes]
            for sizes in ([5, 1, 9, 3], [2, 11, 4, 4, 7, 1, 6, 3, 8])]


def _outputs(model, plan: ExecutionPlan, stateful: bool = False) -> tuple[list[torch.Tensor], RunOptions]:
    options = RunOptions.inference(plan, stateful=stateful)
    planned = plan_model(copy.deepcopy(model), options)
    results = []
    with torch.inference_mode():
        for batch in _batches(0) * 2:  # each shape twice: the buffers are reused
            out = planned(batch_to_ids(batch), options=options)
            results += [out.layers, *out.final_state]
    return results, planned


@pytest.fixture(scope="module")
def small_size_model():
    """Random weights of the ``small`` preset's sizes: products large enough for the libraries' batched paths
    (ATen's batched product rounds a contiguous result otherwise than a strided one)."""
    from pyelmo.config import preset
    from pyelmo.modeling.bilm import BiLM

    torch.manual_seed(0)
    return BiLM(preset("small")).eval()


def test_static_steps_give_the_eager_bits_at_a_released_size(small_size_model):
    for order in LEVEL_ORDERS:
        eager, _ = _outputs(small_size_model, ExecutionPlan(level_order=order))
        static, _ = _outputs(small_size_model, ExecutionPlan(level_order=order, steps="static"))
        for a, b in zip(eager, static, strict=True):
            assert torch.equal(a, b)


@pytest.mark.parametrize("order", LEVEL_ORDERS)
@pytest.mark.parametrize("kernels", ["fixed", "onednn", "mm"])  # fixed: steps batched (bmm); else per direction
@pytest.mark.parametrize("stateful", [False, True])
def test_static_steps_give_the_eager_bits(tiny_model, order, kernels, stateful):
    if kernels == "onednn" and not ExecutionPlan().onednn:
        pytest.skip("this PyTorch build has no oneDNN")
    eager, _ = _outputs(tiny_model, ExecutionPlan(kernels=kernels, level_order=order), stateful)
    static, planned = _outputs(tiny_model, ExecutionPlan(kernels=kernels, level_order=order, steps="static"),
                               stateful)
    for a, b in zip(eager, static, strict=True):
        assert torch.equal(a, b)
    steps = planned.level.steps
    assert isinstance(steps, StaticSteps) and not steps.capture and steps.captures == 0
    # one buffer set per level and direction group, grown to the largest batch (9 rows and a spare one), kept across calls
    levels = tiny_model.config.lstm.n_layers * (1 if order == "together" else 2)
    assert len(steps._levels) == levels
    assert {buffers.h.shape[1] for buffers in steps._levels.values()} == {10}
    copied = copy.deepcopy(planned)  # a copy makes its own buffers
    assert copied.level.steps._levels == {} and copied.level.steps.capture == steps.capture


def test_static_steps_really_run_on_their_buffers(tiny_model, monkeypatch):
    """The static path is the one that runs: spoiling its buffers after each step changes the outputs."""
    from pyelmo.runtime import steps as steps_module

    plan = ExecutionPlan(steps="static")
    good, _ = _outputs(tiny_model, plan)
    real = steps_module._fixed_step

    def spoiled(owners, gates, h, c):
        real(owners, gates, h, c)
        c.mul_(0.5)

    monkeypatch.setattr(steps_module, "_fixed_step", spoiled)
    bad, _ = _outputs(tiny_model, plan)
    assert not torch.equal(good[0], bad[0])


def test_the_plan_names_its_steps():
    assert ExecutionPlan.for_machine().steps == "eager"
    assert ExecutionPlan.for_machine(steps="static").steps == "static"
    assert ExecutionPlan.for_machine(device="cuda").steps == "graphs"  # deciding the plan touches no device
    assert ExecutionPlan.for_machine(device="cuda", steps="eager").steps == "eager"
    assert "steps=static" in ExecutionPlan(steps="static").summary()
    assert "steps" not in ExecutionPlan().summary()  # the CPU default: summaries as before
    with pytest.raises(ConfigError, match="CUDA graphs run on a CUDA device"):
        ExecutionPlan.for_machine(steps="graphs")
    with pytest.raises(ConfigError, match="steps must be one of"):
        ExecutionPlan(steps="lazy")
    assert set(STEP_MODES) == {"eager", "static", "graphs"}


def test_each_row_count_is_captured_once_and_replayed(tiny_model, monkeypatch):
    """The capture bookkeeping, on the CPU with a stand-in graph whose replay runs what was captured: a row
    count's first step runs and is captured, its later steps replay on the same buffers, the bits are the eager
    loop's, and grown buffers are captured anew."""
    from pyelmo.runtime import steps as steps_module

    replays = []

    class Recorded:
        def __init__(self, run):
            self.run = run

        def replay(self):
            replays.append(self)
            self.run()

    def captured(self, run):
        run()  # the step itself, as the CUDA capture runs it before recording
        self.captures += 1
        return Recorded(run)

    monkeypatch.setattr(steps_module.StaticSteps, "captures_on", staticmethod(lambda device: True))
    monkeypatch.setattr(steps_module.StaticSteps, "_captured", captured)
    eager, _ = _outputs(tiny_model, ExecutionPlan())
    options = RunOptions.inference(ExecutionPlan(steps="static"))
    planned = plan_model(copy.deepcopy(tiny_model), options)
    steps = planned.level.steps
    steps.capture = True  # as a CUDA device's plan has it
    results = []
    with torch.inference_mode():
        for batch in _batches(0) * 2:
            out = planned(batch_to_ids(batch), options=options)
            results += [out.layers, *out.final_state]
    for a, b in zip(eager, results, strict=True):
        assert torch.equal(a, b)
    # a step of n rows per time step (sentences and their boundaries); each level's row counts captured once
    row_counts = {sum(len(s) + 2 > t for s in batch) for batch in _batches(0) for t in range(max(map(len, batch)) + 2)}
    assert all(set(buffers.graphs) == row_counts for buffers in steps._levels.values())
    first_batch = {sum(len(s) + 2 > t for s in _batches(0)[0]) for t in range(max(map(len, _batches(0)[0])) + 2)}
    levels = tiny_model.config.lstm.n_layers
    assert steps.captures == levels * (len(first_batch) + len(row_counts))  # the grown buffers' graphs made anew
    assert len(replays) > steps.captures


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphs_give_the_eager_gpu_bits(tiny_model):
    model = tiny_model.to("cuda")
    eager, _ = _outputs(model, ExecutionPlan.for_machine(device="cuda", steps="eager"))
    graphs, planned = _outputs(model, ExecutionPlan.for_machine(device="cuda"))
    for a, b in zip(eager, graphs, strict=True):
        assert torch.equal(a, b)
    assert planned.level.steps.captures > 0
