"""The execution plan's kernels (pyelmo.runtime.plan, pyelmo.runtime.products, pyelmo.runtime.autotune):
every kernel gives the reference outputs; the default plan is a fixed rule that never measures nor
touches the kernel cache, so fresh processes give the same bits; autotune's measured choice is
kept on disk per CPU and PyTorch version, and a stale or corrupt cache is not trusted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import ConfigError
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime import autotune
from pyelmo.runtime.autotune import MeasuredChoices, kernel_cache_path
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import KERNEL_RULES, KERNELS, ExecutionPlan, fixed_kernel, onednn_available
from pyelmo.runtime.linear import ExactLinear, PlannedPair
from pyelmo.runtime.products import Products

ATOL = 1e-5
AVAILABLE = [k for k in KERNELS if k != "onednn" or onednn_available()]
RULES = [k for k in KERNEL_RULES if k != "onednn" or onednn_available()]
AUTOTUNE = ExecutionPlan(kernels="autotune")


@pytest.fixture
def cache(fresh_kernel_cache, monkeypatch):
    """A fresh on-disk cache and a fresh in-process table (as in a new process); counts measurements."""
    measured = []
    real = autotune.measure_kernels

    def counting(products, rows, w):
        measured.append((rows, tuple(w.shape)))
        return real(products, rows, w)

    monkeypatch.setattr(autotune, "measure_kernels", counting)
    return measured


@pytest.fixture
def no_measuring(fresh_kernel_cache, monkeypatch):
    """Any measuring, or any reading or writing of the kernel cache, fails the test; returns the
    (empty) cache folder."""
    def refuse(*args, **kwargs):
        pytest.fail("the default plan measured or used the kernel cache")

    for name in ("measure_kernels", "time_kernels", "measure_precision", "time_precisions", "fastest_calls",
                 "kernel", "precision", "level_order", "read_choices", "kernel_cache_path"):
        monkeypatch.setattr(autotune, name, refuse)
    for name in ("lookup", "get", "trial", "_save"):
        monkeypatch.setattr(MeasuredChoices, name, refuse)
    return fresh_kernel_cache


def _product(products: Products, rows: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x, w, b = torch.randn(rows, 24), torch.randn(40, 24), torch.randn(40)
    with torch.no_grad():
        return products.mm(x, w, b), torch.addmm(b, x, w.t())


def _top(model, batch, options: RunOptions) -> np.ndarray:
    with torch.no_grad():
        return model(batch_to_ids(batch), options=options).layers[-1].numpy()


@pytest.mark.parametrize("rule", RULES)
def test_every_kernel_rule_reproduces_the_reference(reference, rule, cache):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    top = _top(model, batch, RunOptions.inference(ExecutionPlan(kernels=rule)))
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert bool(cache) == (rule == "autotune")  # only autotune measures


@pytest.mark.parametrize("kernel", AVAILABLE)
def test_forced_kernel_runs_every_product(kernel, cache):
    products = Products(ExecutionPlan(kernels=kernel))
    y, expected = _product(products, rows=1)
    assert products.kernel(torch.zeros(1, 24), torch.zeros(40, 24)) == kernel
    assert products.kernel(torch.zeros(4096, 128), torch.zeros(4096, 128)) == kernel
    assert (y - expected).abs().max() < ATOL
    assert not cache


# -- the default plan: a fixed rule, no measuring, no cache ------------------------------------------
def test_default_plan_is_the_fixed_rule():
    plan = ExecutionPlan.for_machine()
    assert plan.kernels == "fixed" and not plan.autotune and plan.precision == "float32"
    assert plan.level_order in ("together", "apart")
    assert RunOptions.inference().plan == plan and RunOptions().plan is None
    auto = ExecutionPlan.for_machine(autotune=True)
    assert auto.autotune and auto.level_order == "autotune"
    assert ExecutionPlan.for_machine(kernels="mm_t").kernels == "mm_t"


def test_default_plan_measures_nothing_and_uses_no_cache(reference, no_measuring):
    """The default plan neither reads nor writes the kernel cache nor times anything; the kernels its
    products ran with (``decisions``) are the plan's fixed rule for each shape class."""
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
    if onednn_available():  # the rule sends large products to oneDNN and small ones to torch.mm
        assert set(decisions.values()) == {"mm", "onednn"}
    assert not list(no_measuring.iterdir())


def test_default_plan_ignores_a_filled_cache(no_measuring, monkeypatch):
    """A cache holding other choices for every shape changes nothing: the plan's kernel is the rule's."""
    (no_measuring / "choices.json").write_text(json.dumps({**autotune.machine_key(), "choices": {
        f"threads={torch.get_num_threads()} rows=8 weight=40x24": "mm_t"}}))
    products = Products(ExecutionPlan())
    y, expected = _product(products)
    assert (y - expected).abs().max() < ATOL
    assert products.decisions == {(8, (40, 24)): "mm"}


def test_fresh_processes_give_the_same_bits_whatever_the_kernel_cache(reference, tmp_path):
    """Two processes under the default plan, one with an empty kernel cache and one with a cache an
    autotune run filled (then set to choices other than the rule's everywhere), write bit-identical
    files with the same plan and kernels, and leave both caches as they were."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    text = tmp_path / "in.txt"
    text.write_text("\n".join(s for sentences in reference.sentences for s in sentences) + "\n")
    empty, filled = tmp_path / "empty", tmp_path / "filled"
    empty.mkdir()
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:  # the autotune run that fills the cache, as in its own process
        patch.setenv("PYELMO_KERNEL_CACHE", str(filled))
        patch.setattr(autotune, "MEASURED", MeasuredChoices())
        list(ElmoEmbedder(model, autotune=True).embed_sentences(line.split() for line in text.read_text().splitlines()))
    stored = json.loads((filled / "choices.json").read_text())
    other = {"mm": "mm_t", "mm_t": "mm", "onednn": "mm", "together": "apart", "apart": "together",
             "float32": "bfloat16", "bfloat16": "float32"}
    assert any(entry.startswith("threads=") for entry in stored["choices"])
    stored["choices"] = {entry: other[choice] for entry, choice in stored["choices"].items()}
    (filled / "choices.json").write_text(json.dumps(stored))
    before = (filled / "choices.json").read_bytes()

    outputs = [tmp_path / f"{folder.name}.hdf5" for folder in (empty, filled)]
    runs = [subprocess.Popen([sys.executable, "-m", "pyelmo", "embed", str(text), str(out), "--options-file",
                              str(reference.options), "--weight-file", str(reference.weights), "--no-progress",
                              "--threads", str(threads)], env={**os.environ, "PYELMO_KERNEL_CACHE": str(folder)},
                             stdout=subprocess.DEVNULL)
            for folder, out in zip((empty, filled), outputs)]
    assert [run.wait(timeout=300) for run in runs] == [0, 0]
    assert not list(empty.iterdir()) and (filled / "choices.json").read_bytes() == before
    with h5py.File(outputs[0], "r") as f, h5py.File(outputs[1], "r") as g:
        assert set(f) == set(g) and len(f) == 31
        for key in set(f) - {"sentence_to_index"}:
            assert f[key].dtype == g[key].dtype == np.float32
            assert f[key][...].tobytes() == g[key][...].tobytes(), key
        assert f["sentence_to_index"][0] == g["sentence_to_index"][0]
        assert f.attrs["execution_plan"] == g.attrs["execution_plan"]
        assert "kernels=fixed" in f.attrs["execution_plan"] and f"threads={threads}" in f.attrs["execution_plan"]
        assert json.loads(f.attrs["kernels_used"]) == json.loads(g.attrs["kernels_used"])
        used = json.loads(f.attrs["kernels_used"])
    plan = ExecutionPlan.for_machine()
    assert used
    for entry, kernel in used.items():  # "rows<=R weight=AxB": the fixed rule's kernel
        rows, shape = entry.removeprefix("rows<=").split(" weight=")
        a, b = shape.split("x")
        assert kernel == plan.kernel(int(rows), (int(a), int(b))), entry


def test_embed_file_records_the_plan_and_the_kernels_used(allennlp_reference, tiny_model, tmp_path, no_measuring):
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


@pytest.mark.parametrize("kernels", [None, "mm_t"])
def test_the_printed_plan_is_the_plan_used(allennlp_reference, tmp_path, capsys, no_measuring, kernels):
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
    assert any("bmm" in row["kernel"] for row in printed["products"]) == (kernels is None)  # batched step products


def test_autotune_equals_the_default_plan(reference, cache):
    """Autotune changes only the order of float32 sums: its outputs equal the default plan's within 1e-5."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    default = _top(model, batch, RunOptions.inference())
    tuned_options = RunOptions.inference(autotune=True)
    assert tuned_options.plan.autotune
    for _ in range(3):  # the first calls also time the directions' orders
        tuned = _top(model, batch, tuned_options)
        np.testing.assert_allclose(tuned, default, atol=1e-5, rtol=0)
    assert cache and all(kernel in KERNELS for kernel in tuned_options.products.decisions.values())


# -- autotune: measured once, kept on disk ------------------------------------------------------------
def test_autotune_measures_once_and_keeps_the_choice_on_disk(cache, monkeypatch):
    y, expected = _product(Products(AUTOTUNE))
    assert (y - expected).abs().max() < ATOL
    assert cache == [(8, (40, 24))]  # 3 rows: the 8-row class, measured at 8 rows
    stored = json.loads(kernel_cache_path().read_text())
    assert stored["cpu"] == autotune.machine_key()["cpu"] and stored["torch"] == torch.__version__
    (entry, choice), = stored["choices"].items()
    assert "rows=8" in entry and "weight=40x24" in entry and choice in KERNELS

    _product(Products(AUTOTUNE))  # a second object in this process: no new measurement
    monkeypatch.setattr(autotune, "MEASURED", MeasuredChoices())  # a new process: read from disk
    products = Products(AUTOTUNE)
    _product(products)
    assert len(cache) == 1
    assert products.kernel(torch.zeros(3, 24), torch.zeros(40, 24)) == choice
    assert products.decisions == {(8, (40, 24)): choice}


def test_the_measured_choice_is_the_one_used(cache, monkeypatch):
    for kernel in AVAILABLE:
        monkeypatch.setattr(autotune, "MEASURED", MeasuredChoices())
        kernel_cache_path().unlink(missing_ok=True)
        monkeypatch.setattr(autotune, "measure_kernels", lambda products, rows, w, kernel=kernel: kernel)
        products = Products(AUTOTUNE)
        y, expected = _product(products)
        assert products.kernel(torch.zeros(3, 24), torch.zeros(40, 24)) == kernel
        assert products.decisions == {(8, (40, 24)): kernel}
        assert (y - expected).abs().max() < ATOL


@pytest.mark.parametrize("change", ["cpu", "torch"])
def test_cache_is_invalidated_when_the_cpu_or_torch_changes(cache, monkeypatch, change):
    _product(Products(AUTOTUNE))
    assert len(cache) == 1
    if change == "cpu":
        monkeypatch.setattr(autotune, "cpu_flags", lambda: ("Another CPU", frozenset({"sse2"})))
    else:
        monkeypatch.setattr(torch, "__version__", "99.0.0+other")
    _product(Products(AUTOTUNE))  # same process, the machine key changed: measured again
    assert len(cache) == 2
    stored = json.loads(kernel_cache_path().read_text())
    assert stored["cpu"] == autotune.machine_key()["cpu"] and stored["torch"] == torch.__version__
    assert len(stored["choices"]) == 1  # the other machine's entries are not kept


def test_machine_key_follows_the_cpu_flags(monkeypatch):
    key = autotune.machine_key()
    name = autotune.cpu_flags()[0]
    monkeypatch.setattr(autotune, "cpu_flags", lambda: (name, frozenset({"avx2", "new"})))
    assert autotune.machine_key()["cpu"] != key["cpu"]


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"cpu": 1, "choices": 5}', b""])
def test_corrupt_cache_is_ignored_and_replaced(cache, content):
    kernel_cache_path().write_bytes(content)
    y, expected = _product(Products(AUTOTUNE))
    assert (y - expected).abs().max() < ATOL
    assert len(cache) == 1
    assert json.loads(kernel_cache_path().read_text())["cpu"] == autotune.machine_key()["cpu"]


def test_stale_entries_are_not_trusted(cache):
    key = autotune.machine_key()
    entry = f"threads={torch.get_num_threads()} rows=8 weight=40x24"
    kernel_cache_path().write_text(json.dumps({**key, "choices": {entry: "no-such-kernel"}}))
    _product(Products(AUTOTUNE))
    assert len(cache) == 1


def test_unwritable_cache_is_not_an_error(tmp_path, monkeypatch, cache):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PYELMO_KERNEL_CACHE", str(blocker / "below"))  # its parent is a file
    y, expected = _product(Products(AUTOTUNE))
    assert (y - expected).abs().max() < ATOL and len(cache) == 1


def test_fixed_rule_and_bad_plans(cache):
    products = Products(ExecutionPlan(kernels="fixed"))
    small, large = torch.zeros(1, 24), torch.zeros(4096, 128)
    assert products.kernel(small, torch.zeros(40, 24)) == "mm"
    assert products.kernel(large, torch.zeros(4096, 128)) == ("onednn" if onednn_available() else "mm")
    without = ExecutionPlan(onednn=False)
    assert without.kernel(4096, (4096, 128)) == "mm" and Products(without).kernel(large, torch.zeros(4096, 128)) == "mm"
    assert Products().differentiable and not Products(ExecutionPlan()).differentiable
    for bad, match in [({"kernels": "fastest"}, "kernels"), ({"precision": "float16"}, "precision"),
                       ({"level_order": "sideways"}, "level_order"), ({"kernels": "onednn", "onednn": False}, "oneDNN")]:
        with pytest.raises(ConfigError, match=match):
            ExecutionPlan(**bad)
    with pytest.raises(ConfigError, match="autotune"):
        ExecutionPlan.for_machine(autotune=True, kernels="mm")
    assert not cache


def test_help_and_import_measure_nothing(tmp_path):
    env = {**os.environ, "PYELMO_KERNEL_CACHE": str(tmp_path)}
    for args in (["-c", "import pyelmo, pyelmo.embedding.embedder, pyelmo.runtime.options"],
                 ["-m", "pyelmo", "embed", "--help"]):
        subprocess.run([sys.executable, *args], check=True, env=env, stdout=subprocess.DEVNULL)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("faster, chosen", [(0.0, "fixed"), (0.05, "fixed"), (0.2, "other")])
def test_measuring_keeps_the_fixed_rule_on_near_ties(monkeypatch, faster, chosen):
    w = torch.zeros(40, 24)
    default = fixed_kernel(8, tuple(w.shape), onednn_available())
    other = "mm_t"
    times = {k: 1.0 for k in KERNELS}
    times[other] = 1.0 - faster
    monkeypatch.setattr(autotune, "time_kernels", lambda products, rows, w: times)
    assert autotune.measure_kernels(Products(ExecutionPlan(kernels="mm")), 8, w) == (
        default if chosen == "fixed" else other)
    assert autotune.choose_kernel(times, 8, w) == (default if chosen == "fixed" else other)


@pytest.mark.parametrize("rule", ["fixed", "mm"])
def test_small_step_products_of_both_directions_run_batched(reference, rule, cache, monkeypatch):
    """Without a forced kernel, each time step's small products of the two directions run as one
    batched product on stacked weights (batch 1 here); a forced kernel runs them one by one.
    Both give the reference outputs, sentence by sentence and as a batch."""
    stacked = []
    real = PlannedPair.__init__

    def recording(self, linears):
        real(self, linears)
        if self.stacked is not None:
            stacked.append(len(linears))

    monkeypatch.setattr(PlannedPair, "__init__", recording)
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = RunOptions.inference(ExecutionPlan(kernels=rule, level_order="together"))
    batch = reference.batch(0)
    with torch.no_grad():
        alone = [model(batch_to_ids([s]), options=options).layers[-1, 0].numpy() for s in batch]
        together = model(batch_to_ids(batch), options=options).layers[-1].numpy()
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(alone[k][: len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
        np.testing.assert_allclose(together[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    assert (set(stacked) == {2}) if rule == "fixed" else not stacked
    if rule == "fixed":  # big products run one by one
        products = options.products
        assert ExactLinear(torch.zeros(4096, 64), None, products).batched_rows() < 1024
        assert ExactLinear(torch.zeros(4096, 128), None, products).batched_rows() >= 1


# -- the bfloat16 mode: each shape class in bfloat16, or exact where bfloat16 does not pay here --------
def _bf16_options(monkeypatch, choice: str | None, kernels: str = "autotune") -> RunOptions:
    """Bfloat16 products (an explicit plan: on any CPU; without bfloat16 instructions through torch's
    bfloat16 matmul), every precision measurement answering ``choice``."""
    if choice is not None:  # measured anew (a new process, no cache file), with this answer
        monkeypatch.setattr(autotune, "MEASURED", MeasuredChoices())
        kernel_cache_path().unlink(missing_ok=True)
        monkeypatch.setattr(autotune, "measure_precision", lambda products, rows, w: choice)
    return RunOptions.inference(ExecutionPlan(precision="bfloat16", kernels=kernels))


def test_bf16_mode_runs_exact_float32_where_that_measured_faster(reference, cache, monkeypatch):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    exact = _top(model, batch, _bf16_options(monkeypatch, "float32"))
    low = _top(model, batch, _bf16_options(monkeypatch, "bfloat16"))
    fixed_options = _bf16_options(monkeypatch, None, "fixed")
    assert fixed_options.dtype == torch.bfloat16
    fixed = _top(model, batch, fixed_options)
    for k, sentence in enumerate(batch):  # every product exact: the reference outputs
        np.testing.assert_allclose(exact[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)
    np.testing.assert_array_equal(low, fixed)  # every product in bfloat16: as the fixed rule (always bfloat16)
    assert np.abs(low - exact).max() > 1e-4  # and that is not exact
    assert np.abs(low - exact).max() < 0.1


def test_bf16_precision_choice_is_measured_once_and_kept_on_disk(cache, monkeypatch):
    asked = []
    monkeypatch.setattr(autotune, "measure_precision", lambda products, rows, w: asked.append(rows) or "float32")
    x, w, b = torch.randn(3, 24), torch.randn(40, 24), torch.randn(40)
    plan = ExecutionPlan(precision="bfloat16", kernels="autotune")
    with torch.no_grad():
        y = Products(plan).mm(x, w, b)
        Products(plan).mm(x, w, b)  # a second object in this process: no new measurement
    assert asked == [8]
    assert (y - torch.addmm(b, x, w.t())).abs().max() < ATOL  # measured faster exact: computed exact
    stored = json.loads(kernel_cache_path().read_text())["choices"]
    assert stored["precision threads=%d rows=8 weight=40x24" % torch.get_num_threads()] == "float32"
    monkeypatch.setattr(autotune, "MEASURED", MeasuredChoices())  # a new process: read from disk
    with torch.no_grad():
        Products(plan).mm(x, w, b)
    assert asked == [8]


def test_bf16_precision_choice_is_not_made_without_autotune(cache, monkeypatch):
    monkeypatch.setattr(autotune, "measure_precision", lambda *a: pytest.fail("measured"))
    x, w, b = torch.randn(3, 24), torch.randn(40, 24), torch.randn(40)
    for kernels in ["fixed", "mm"]:
        products = Products(ExecutionPlan(precision="bfloat16", kernels=kernels))
        assert not products.runs_exact(x, w)
        with torch.no_grad():  # bfloat16 products (torch's bfloat16 matmul where the CPU has no bfloat16 instructions)
            error = float((products.mm(x, w, b) - torch.addmm(b, x, w.t())).abs().max())
        assert 0 < error < 0.2
    assert not Products().runs_exact(x, w) and not Products(ExecutionPlan()).runs_exact(x, w)  # nothing to choose


def test_bf16_precision_measurement_prefers_bfloat16_on_near_ties(monkeypatch):
    products = Products(ExecutionPlan(precision="bfloat16", kernels="autotune"))
    w = torch.randn(40, 24)
    for seconds, chosen in [({"bfloat16": 1.0, "float32": 0.95}, "bfloat16"),
                            ({"bfloat16": 1.0, "float32": 0.5}, "float32")]:
        monkeypatch.setattr(autotune, "time_precisions", lambda p, rows, w, s=seconds: s)
        assert autotune.measure_precision(products, 8, w) == chosen


def test_bf16_precision_timing_runs_both_sides(cache):
    products = Products(ExecutionPlan(precision="bfloat16", kernels="autotune"))
    seconds = autotune.time_precisions(products, 2, torch.randn(40, 24))
    assert set(seconds) == set(autotune.PRECISIONS) and all(0 < s < 1 for s in seconds.values())


def test_cache_entries_of_the_wrong_kind_are_not_trusted(cache):
    path = kernel_cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**autotune.machine_key(), "choices": {
        "threads=1 rows=8 weight=40x24": "float32", "precision threads=1 rows=8 weight=40x24": "mm",
        "threads=1 rows=1 weight=40x24": "mm_t", "precision threads=1 rows=1 weight=40x24": "float32"}}))
    assert autotune.read_choices(path, autotune.machine_key()) == {
        "threads=1 rows=1 weight=40x24": "mm_t", "precision threads=1 rows=1 weight=40x24": "float32"}
