"""The runtime kernel choice (pyelmo.runtime.products): every kernel gives the reference outputs; the measured
choice is kept on disk per CPU and PyTorch version, and a stale or corrupt cache is not trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from pyelmo.runtime import autotune as kernelchoice
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.errors import ConfigError
from pyelmo.runtime.autotune import KERNELS, MeasuredChoices, kernel_cache_path, onednn_available
from pyelmo.runtime.products import Products
from pyelmo.runtime.options import RunOptions
from pyelmo.modelio.weights import load_bilm_hdf5

ATOL = 1e-5
POLICIES = [k for k in kernelchoice.KERNEL_POLICIES if k != "onednn" or onednn_available()]


@pytest.fixture
def cache(fresh_kernel_cache, monkeypatch):
    """A fresh on-disk cache and a fresh in-process table (as in a new process); counts measurements."""
    measured = []
    real = kernelchoice.measure_kernels

    def counting(products, rows, w):
        measured.append((rows, tuple(w.shape)))
        return real(products, rows, w)

    monkeypatch.setattr(kernelchoice, "measure_kernels", counting)
    return measured


def _product(products: Products, rows: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, w, b = torch.randn(rows, 24), torch.randn(40, 24), torch.randn(40)
    with torch.no_grad():
        return products.mm(x, w, b), torch.addmm(b, x, w.t())


@pytest.mark.parametrize("policy", POLICIES)
def test_every_kernel_policy_reproduces_the_reference(reference, policy, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = RunOptions.inference(kernels=policy)
    batch = reference.batch(0)
    with torch.no_grad():
        top = model(batch_to_ids(batch), options=options).layers[-1].numpy()
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert bool(cache) == (policy == "auto")  # only "auto" measures


@pytest.mark.parametrize("kernel", [k for k in KERNELS if k != "onednn" or onednn_available()])
def test_forced_kernel_runs_every_product(kernel, cache):
    products = Products(kernels=kernel)
    y, expected = _product(products, rows=1)
    assert products.kernel(torch.zeros(1, 24), torch.zeros(40, 24)) == kernel
    assert (y - expected).abs().max() < ATOL
    assert not cache


def test_auto_measures_once_and_keeps_the_choice_on_disk(cache, monkeypatch):
    y, expected = _product(Products())
    assert (y - expected).abs().max() < ATOL
    assert cache == [(8, (40, 24))]  # 3 rows: the 8-row class, measured at 8 rows
    stored = json.loads(kernel_cache_path().read_text())
    assert stored["cpu"] == kernelchoice.cpu_model() and stored["torch"] == torch.__version__
    (entry, choice), = stored["choices"].items()
    assert "rows=8" in entry and "weight=40x24" in entry and choice in KERNELS

    _product(Products())  # a second object in this process: no new measurement
    monkeypatch.setattr(kernelchoice, "MEASURED", MeasuredChoices())  # a new process: read from disk
    products = Products()
    _product(products)
    assert len(cache) == 1
    assert products.kernel(torch.zeros(3, 24), torch.zeros(40, 24)) == choice


def test_the_measured_choice_is_the_one_used(cache, monkeypatch):
    for kernel in [k for k in KERNELS if k != "onednn" or onednn_available()]:
        monkeypatch.setattr(kernelchoice, "MEASURED", MeasuredChoices())
        kernel_cache_path().unlink(missing_ok=True)
        monkeypatch.setattr(kernelchoice, "measure_kernels", lambda products, rows, w, kernel=kernel: kernel)
        products = Products()
        y, expected = _product(products)
        assert products.kernel(torch.zeros(3, 24), torch.zeros(40, 24)) == kernel
        assert (y - expected).abs().max() < ATOL


@pytest.mark.parametrize("change", ["cpu", "torch"])
def test_cache_is_invalidated_when_the_cpu_or_torch_changes(cache, monkeypatch, change):
    _product(Products())
    assert len(cache) == 1
    if change == "cpu":
        monkeypatch.setattr(kernelchoice, "cpu_model", lambda: "Another CPU [0123456789ab]")
    else:
        monkeypatch.setattr(torch, "__version__", "99.0.0+other")
    _product(Products())  # same process, the machine key changed: measured again
    assert len(cache) == 2
    stored = json.loads(kernel_cache_path().read_text())
    assert stored["cpu"] == kernelchoice.cpu_model() and stored["torch"] == torch.__version__
    assert len(stored["choices"]) == 1  # the other machine's entries are not kept


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"cpu": 1, "choices": 5}', b""])
def test_corrupt_cache_is_ignored_and_replaced(cache, content):
    kernel_cache_path().write_bytes(content)
    y, expected = _product(Products())
    assert (y - expected).abs().max() < ATOL
    assert len(cache) == 1
    assert json.loads(kernel_cache_path().read_text())["cpu"] == kernelchoice.cpu_model()


def test_stale_entries_are_not_trusted(cache):
    key = kernelchoice.machine_key()
    entry = f"threads={torch.get_num_threads()} rows=8 weight=40x24"
    kernel_cache_path().write_text(json.dumps({**key, "choices": {entry: "no-such-kernel"}}))
    _product(Products())
    assert len(cache) == 1


def test_unwritable_cache_is_not_an_error(tmp_path, monkeypatch, cache):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PYELMO_KERNEL_CACHE", str(blocker / "below"))  # its parent is a file
    y, expected = _product(Products())
    assert (y - expected).abs().max() < ATOL and len(cache) == 1


def test_fixed_rule_and_bad_policy(cache, monkeypatch):
    products = Products(kernels="fixed")
    small, large = torch.zeros(1, 24), torch.zeros(4096, 128)
    assert products.kernel(small, torch.zeros(40, 24)) == "mm"
    assert products.kernel(large, torch.zeros(4096, 128)) == ("onednn" if onednn_available() else "mm")
    assert Products(onednn=False).policy == "mm" and Products(onednn=False).differentiable
    monkeypatch.setenv(kernelchoice.KERNELS_ENV, "fastest")
    with pytest.raises(ConfigError, match="PYELMO_KERNELS"):
        Products()
    assert not cache


def test_help_and_import_measure_nothing(tmp_path):
    env = {**os.environ, "PYELMO_KERNEL_CACHE": str(tmp_path)}
    env.pop(kernelchoice.KERNELS_ENV, None)
    for args in (["-c", "import pyelmo, pyelmo.embedding.embedder, pyelmo.runtime.options"], ["-m", "pyelmo", "embed", "--help"]):
        subprocess.run([sys.executable, *args], check=True, env=env, stdout=subprocess.DEVNULL)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("faster, chosen", [(0.0, "fixed"), (0.05, "fixed"), (0.2, "other")])
def test_measuring_keeps_the_fixed_rule_on_near_ties(monkeypatch, faster, chosen):
    w = torch.zeros(40, 24)
    default = kernelchoice.fixed_kernel(8, w)
    other = "mm_t"
    times = {k: 1.0 for k in KERNELS}
    times[other] = 1.0 - faster
    monkeypatch.setattr(kernelchoice, "time_kernels", lambda products, rows, w: times)
    assert kernelchoice.measure_kernels(Products(kernels="mm"), 8, w) == (default if chosen == "fixed" else other)


@pytest.mark.parametrize("policy", ["fixed", "mm"])
def test_small_step_products_of_both_directions_run_batched(reference, policy, cache, monkeypatch):
    """Without a forced kernel, each time step's small products of the two directions run as one
    batched product on stacked weights (batch 1 here); a forced kernel runs them one by one.
    Both give the reference outputs, sentence by sentence and as a batch."""
    stacked = []
    real = Products.stacked
    monkeypatch.setattr(Products, "stacked", lambda self, weights: stacked.append(len(weights)) or real(self, weights))
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = RunOptions.inference(kernels=policy)
    batch = reference.batch(0)
    with torch.no_grad():
        alone = [model(batch_to_ids([s]), options=options).layers[-1, 0].numpy() for s in batch]
        together = model(batch_to_ids(batch), options=options).layers[-1].numpy()
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(alone[k][: len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
        np.testing.assert_allclose(together[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert (set(stacked) == {2}) if policy == "fixed" else not stacked
    if policy == "fixed":  # big products run one by one
        products = options.products
        assert not products.each([torch.zeros(4096, 64)] * 2).batched(1024)
        assert products.each([torch.zeros(4096, 128)] * 2).batched(1)


# -- the bfloat16 mode: each shape class in bfloat16, or exact where bfloat16 does not pay here --------
def _bf16_options(monkeypatch, choice: str | None, kernels: str = "auto") -> RunOptions:
    """The packed strategy with bfloat16 products (on any CPU), every precision measurement answering ``choice``."""
    import dataclasses

    if choice is not None:  # measured anew (a new process, no cache file), with this answer
        monkeypatch.setattr(kernelchoice, "MEASURED", MeasuredChoices())
        kernel_cache_path().unlink(missing_ok=True)
        monkeypatch.setattr(kernelchoice, "measure_precision", lambda products, rows, w: choice)
    return dataclasses.replace(RunOptions.inference(kernels=kernels), products=Products(torch.bfloat16, kernels=kernels))


def test_bf16_mode_runs_exact_float32_where_that_measured_faster(reference, cache, monkeypatch):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    with torch.no_grad():
        exact = model(batch_to_ids(batch), options=_bf16_options(monkeypatch, "float32")).layers[-1].numpy()
        low = model(batch_to_ids(batch), options=_bf16_options(monkeypatch, "bfloat16")).layers[-1].numpy()
        fixed = model(batch_to_ids(batch), options=_bf16_options(monkeypatch, None, "fixed")).layers[-1].numpy()
    for k, sentence in enumerate(batch):  # every product exact: the reference outputs
        np.testing.assert_allclose(exact[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    np.testing.assert_array_equal(low, fixed)  # every product in bfloat16: as the fixed rule (always bfloat16)
    assert np.abs(low - exact).max() > 1e-4  # and that is not exact


def test_bf16_precision_choice_is_measured_once_and_kept_on_disk(cache, monkeypatch):
    asked = []
    monkeypatch.setattr(kernelchoice, "measure_precision", lambda products, rows, w: asked.append(rows) or "float32")
    x, w, b = torch.randn(3, 24), torch.randn(40, 24), torch.randn(40)
    with torch.no_grad():
        y = Products(torch.bfloat16).mm(x, w, b)
        Products(torch.bfloat16).mm(x, w, b)  # a second object in this process: no new measurement
    assert asked == [8]
    assert (y - torch.addmm(b, x, w.t())).abs().max() < ATOL  # measured faster exact: computed exact
    stored = json.loads(kernel_cache_path().read_text())["choices"]
    assert stored["precision threads=%d rows=8 weight=40x24" % torch.get_num_threads()] == "float32"
    monkeypatch.setattr(kernelchoice, "MEASURED", MeasuredChoices())  # a new process: read from disk
    with torch.no_grad():
        Products(torch.bfloat16).mm(x, w, b)
    assert asked == [8]


def test_bf16_precision_choice_is_not_made_without_auto(cache, monkeypatch):
    monkeypatch.setattr(kernelchoice, "measure_precision", lambda *a: pytest.fail("measured"))
    x, w = torch.randn(3, 24), torch.randn(40, 24)
    for kernels in ["fixed", "mm"]:
        products = Products(torch.bfloat16, kernels=kernels)
        assert not products.runs_exact(x, w)
    assert not Products().runs_exact(x, w)  # the exact mode has nothing to choose


def test_bf16_precision_measurement_prefers_bfloat16_on_near_ties(monkeypatch):
    products = Products(torch.bfloat16)
    w = torch.randn(40, 24)
    for seconds, chosen in [({"bfloat16": 1.0, "float32": 0.95}, "bfloat16"),
                            ({"bfloat16": 1.0, "float32": 0.5}, "float32")]:
        monkeypatch.setattr(kernelchoice, "time_precisions", lambda p, rows, w, s=seconds: s)
        assert kernelchoice.measure_precision(products, 8, w) == chosen


def test_bf16_precision_timing_runs_both_sides(cache):
    seconds = kernelchoice.time_precisions(Products(torch.bfloat16), 2, torch.randn(40, 24))
    assert set(seconds) == set(kernelchoice.PRECISIONS) and all(0 < s < 1 for s in seconds.values())


def test_cache_entries_of_the_wrong_kind_are_not_trusted(cache):
    path = kernel_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**kernelchoice.machine_key(), "choices": {
        "threads=1 rows=8 weight=40x24": "float32", "precision threads=1 rows=8 weight=40x24": "mm",
        "threads=1 rows=1 weight=40x24": "mm_t", "precision threads=1 rows=1 weight=40x24": "float32"}}))
    assert kernelchoice.read_choices(path, kernelchoice.machine_key()) == {
        "threads=1 rows=1 weight=40x24": "mm_t", "precision threads=1 rows=1 weight=40x24": "float32"}
