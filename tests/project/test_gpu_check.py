"""benchmarks/gpu_check.py, the prepared GPU check, run on the CPU (the same code a GPU session runs)."""

import importlib.util
import json
from pathlib import Path

import pytest

from pyelmo.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_runs_on_cpu_and_writes_its_json(tmp_path):
    out = tmp_path / "gpu_check.json"
    code = _script().main(["--device", "cpu", "--configs", "small", "--exact-sentences", "6", "--batch-sizes", "3",
                           "--batches", "2", "--diff-sentences", "4", "--train-steps", "2", "--train-batch-tokens", "400",
                           "--train-config", str(ROOT / "configs" / "english-v2.toml"), "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())
    assert results["machine"]["device"] == "cpu"
    (exact,) = results["exact"]
    assert exact["max_abs_diff"] == 0.0 and exact["within_1e-5"]  # the same device on both sides
    (row,) = results["throughput"]
    assert row["batch_size"] == 3
    for mode in ("eager", "graphs", "graphs_tf32", "graphs_bf16", "eager_again"):
        assert row[mode]["tokens_per_s"] > 0
    assert row["graphs"]["steps"] == "static" and row["graphs_bf16"]["precision"] in ("bfloat16", "float32")
    for mode in ("eager", "graphs", "graphs_tf32", "eager_again"):  # exact modes (other batches: rounding only)
        assert row[mode]["max_abs_diff_from_cpu"] <= 1e-5
    assert row["eager"]["max_abs_diff_from_cpu"] == row["graphs"]["max_abs_diff_from_cpu"]  # the same bits
    training = results["training"]
    assert training["returncode"] == 0 and training["steps"] == 2 and training["finite"]


def test_gpu_check_fails_on_a_device_this_machine_lacks():
    with pytest.raises(InputError, match="not usable here"):
        _script().main(["--device", "nonexistent", "--configs", "small", "--exact-sentences", "2",
                        "--train-steps", "0"])
