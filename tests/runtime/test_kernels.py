"""The execution plan's kernels (pyelmo.runtime.plan, pyelmo.runtime.products): every kernel gives the
reference outputs; the default plan is a fixed rule of the row class and the weight's shape, and what
ran is what the plan and ``pyelmo env`` say."""

from __future__ import annotations

import copy

import json

import h5py
import numpy as np
import pytest
import torch

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import ConfigError
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import (KERNEL_RULES, KERNELS, ONEDNN_MAX_ROWS, STEP_BATCHED_ROWS, ExecutionPlan,
                                 onednn_available)
from pyelmo.runtime.linear import PLANNED, ExactLinear
from pyelmo.runtime.planning import plan_model
from pyelmo.runtime.products import Products

ATOL = 1e-5
AVAILABLE = [k for k in KERNELS if k != "onednn" or onednn_available()]
RULES = [k for k in KERNEL_RULES if k != "onednn" or onednn_available()]


def _product(products: Products, rows: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, w, b = torch.randn(rows, 24), torch.randn(40, 24), torch.randn(40)
    with torch.no_grad():
        return PLANNED[products.precision_of(w)](w, b, products)(x), torch.addmm(b, x, w.t())


def _top(model, batch, options: RunOptions) -> np.ndarray:
    """The top layer of ``model`` planned for ``options`` (a copy)."""
    planned = plan_model(copy.deepcopy(model), options)
    with torch.no_grad():
        return planned(batch_to_ids(batch), options=options).layers[-1].numpy()


@pytest.mark.parametrize("rule", RULES)
def test_every_kernel_rule_reproduces_the_reference(reference, rule):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    top = _top(model, batch, RunOptions.inference(ExecutionPlan(kernels=rule)))
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)


@pytest.mark.parametrize("kernel", AVAILABLE)
def test_forced_kernel_runs_every_product(kernel):
    products = Products(ExecutionPlan(kernels=kernel))
    y, expected = _product(products, rows=1)
    assert products.kernel(torch.zeros(1, 24), torch.zeros(40, 24)) == kernel
    assert products.kernel(torch.zeros(4096, 128), torch.zeros(4096, 128)) == kernel
    assert (y - expected).abs().max() < ATOL


# -- the default plan: a fixed rule -----------------------------------------------------------------
def test_default_plan_is_the_fixed_rule():
    plan = ExecutionPlan.for_machine()
    assert plan.kernels == "fixed" and plan.precision == "float32"
    assert plan.level_order in ("together", "apart")
    assert RunOptions.inference().plan == plan and RunOptions().plan is None
    assert ExecutionPlan.for_machine(kernels="mm").kernels == "mm"


def test_default_plan_runs_the_fixed_rule(reference):
    """The kernels the default plan's products ran with (``decisions``) are its fixed rule for each shape class."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = RunOptions.inference()
    batch = reference.batch(0)
    top = _top(model, batch, options)
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    decisions = options.products.decisions
    assert {rows for rows, _ in decisions} >= {1, 256}  # the padding window; the input-to-gate products
    for (rows, shape), kernel in decisions.items():
        assert kernel == options.plan.kernel(rows, shape), (rows, shape)
    # oneDNN (where the build has it) up to ONEDNN_MAX_ROWS rows, torch.mm (MKL) above
    assert {kernel for (rows, _), kernel in decisions.items() if rows <= ONEDNN_MAX_ROWS} == \
        {"onednn" if onednn_available() else "mm"}
    assert {kernel for (rows, _), kernel in decisions.items() if rows > ONEDNN_MAX_ROWS} == {"mm"}
    # (a time step's products of at most STEP_BATCHED_ROWS rows run batched, beside the products' kernels)


def test_a_plan_makes_the_first_tanh_call_in_one_thread(allennlp_reference, tiny_model, monkeypatch):
    """MKL's vector math (``torch.tanh``) is first called by the plan, on one element (in one thread): when two
    OpenMP threads made their first calls at once, one of them could run a less accurate tanh (docs/RELIABILITY.md)."""
    sizes, tanh = [], torch.tanh
    monkeypatch.setattr(torch, "tanh", lambda x, *args, **kwargs: sizes.append(x.numel()) or tanh(x, *args, **kwargs))
    ElmoEmbedder(tiny_model).embed_batch([s.split() for s in allennlp_reference.sentences[0]] * 20)
    assert sizes[0] < 2048 <= max(sizes)  # ATen runs MKL's tanh on its OpenMP threads from 2048 elements


def test_embed_file_records_the_plan_and_the_kernels_used(allennlp_reference, tiny_model, tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(s for sentences in allennlp_reference.sentences for s in sentences) + "\n")
    embedder = ElmoEmbedder(tiny_model)
    embedder.embed_file(text, tmp_path / "out.hdf5")
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert f.attrs["execution_plan"] == embedder.options.plan.summary()
        used = json.loads(f.attrs["kernels_used"])
    decisions = embedder.options.products.decisions
    assert used == {f"rows<={rows} weight={w[0]}x{w[1]}": kernel for (rows, w), kernel in decisions.items()}
    assert used and set(used.values()) <= set(KERNELS)
    summary = embedder.options.plan.summary()
    assert "precision=float32 kernels=fixed" in summary and f"torch={torch.__version__}" in summary


@pytest.mark.parametrize("kernels", [None, "mm"])
def test_the_printed_plan_is_the_plan_used(allennlp_reference, tmp_path, capsys, kernels):
    """``pyelmo env --json`` lists, for every product shape and row class an embed run used, the kernel it ran."""
    from pyelmo.cli import main

    files = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    assert main(["env", "--json", *files, *(["--kernels", kernels] if kernels else [])]) == 0
    printed = json.loads(capsys.readouterr().out)
    table = {}  # (rows, weight shape) -> the kernels printed (two weights may share a shape)
    for row in printed["products"]:
        table.setdefault((row["rows"], tuple(row["weight"])), set()).add(row["kernel"].split(", else ")[-1])
    embedder = ElmoEmbedder(str(allennlp_reference.options), str(allennlp_reference.weights), kernels=kernels)
    assert printed["plan"] == embedder.options.plan.summary()
    text = tmp_path / "in.txt"
    text.write_text("\n".join(s for sentences in allennlp_reference.sentences for s in sentences) + "\n")
    embedder.embed_file(text, tmp_path / "out.hdf5")
    used = embedder.options.products.decisions
    assert len({rows for rows, _ in used}) > 1  # several row classes ran
    for (rows, shape), kernel in used.items():
        label = f"<={rows}" if rows < 256 else ">64"
        assert kernel in table[(label, shape)], (rows, shape)
    batches = kernels is None  # the fixed rule batches a time step's small products
    assert any("bmm" in row["kernel"] for row in printed["products"]) == batches


def test_fixed_rule_and_bad_plans():
    products = Products(ExecutionPlan(kernels="fixed"))
    small, large = torch.zeros(1, 24), torch.zeros(4096, 128)
    family = "onednn" if onednn_available() else "mm"  # up to ONEDNN_MAX_ROWS rows, whatever the weight
    assert products.kernel(small, torch.zeros(40, 24)) == products.kernel(torch.zeros(64, 128), torch.zeros(4096, 128)) \
        == family
    assert products.kernel(large, torch.zeros(4096, 128)) == products.kernel(torch.zeros(65, 24), torch.zeros(40, 24)) \
        == "mm"  # more rows: MKL writes into the caller's buffers
    # a time step's products batched while small (by work, at least STEP_BATCHED_ROWS rows); never under a
    # forced kernel or int8
    assert ExecutionPlan().batched_rows((16384, 512)) == STEP_BATCHED_ROWS
    assert ExecutionPlan().batched_rows((4096, 128)) == 8 and ExecutionPlan().batched_rows((128, 1024)) == 32
    assert ExecutionPlan(kernels="mm").batched_rows((128, 1024)) == 0
    assert ExecutionPlan(precision="int8").batched_rows((128, 1024)) == 0
    without = ExecutionPlan(onednn=False)
    assert without.kernel(4096, (4096, 128)) == "mm" and Products(without).kernel(large, torch.zeros(4096, 128)) == "mm"
    for bad, match in [({"kernels": "fastest"}, "kernels"), ({"kernels": "autotune"}, "kernels"),
                       ({"kernels": "mm_t"}, "kernels"), ({"level_order": "autotune"}, "level_order"), ({"precision": "float16"}, "precision"),
                       ({"level_order": "sideways"}, "level_order"), ({"kernels": "onednn", "onednn": False}, "oneDNN")]:
        with pytest.raises(ConfigError, match=match):
            ExecutionPlan(**bad)


@pytest.mark.parametrize("rule", ["fixed", "mm", "fixed-onednn"])
def test_small_step_products_of_both_directions_run_batched(reference, rule):
    """Under the fixed rule (on torch.mm, a build without oneDNN; or beside oneDNN, up to STEP_BATCHED_ROWS rows),
    each time step's small products of the two directions run as one batched product on stacked weights
    (batch 1 here); a forced kernel runs them one by one. All give the reference outputs, sentence by sentence
    and as a batch."""
    if rule == "fixed-onednn" and not onednn_available():
        pytest.skip("this PyTorch build has no oneDNN")
    plan = ExecutionPlan(kernels=rule.split("-")[0], level_order="together", onednn=rule == "fixed-onednn")
    options = RunOptions.inference(plan)
    model = plan_model(load_bilm_hdf5(reference.options, reference.weights), options)
    batch = reference.batch(0)
    with torch.no_grad():
        alone = [model(batch_to_ids([s]), options=options).layers[-1, 0].numpy() for s in batch]
        together = model(batch_to_ids(batch), options=options).layers[-1].numpy()
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(alone[k][: len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
        np.testing.assert_allclose(together[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    pairs = [pair for linear in model.modules() if isinstance(linear, ExactLinear) for _, pair in linear._pairs.values()]
    stacked = [len(pair.linears) for pair in pairs if "stacked" in vars(pair)]  # made at a first batched product
    assert (set(stacked) == {2}) if rule != "mm" else not stacked
    if rule == "fixed":  # big products run one by one
        products = options.products
        assert ExactLinear(torch.zeros(4096, 64), None, products).batched_rows() < 1024
        assert ExactLinear(torch.zeros(4096, 128), None, products).batched_rows() >= 1
