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
                           "--batches", "1", "--train-steps", "2", "--train-batch-tokens", "400",
                           "--train-config", str(ROOT / "configs" / "english-v2.toml"), "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())
    assert results["machine"]["device"] == "cpu"
    (exact,) = results["exact"]
    assert exact["max_abs_diff"] == 0.0 and exact["within_1e-5"]  # the same device on both sides
    (row,) = results["throughput"]
    assert row["batch_size"] == 3 and row["exact_tokens_per_s"] > 0 and row["bf16_tokens_per_s"] > 0
    training = results["training"]
    assert training["returncode"] == 0 and training["steps"] == 2 and training["finite"]


def test_gpu_check_fails_on_a_device_this_machine_lacks():
    with pytest.raises(InputError, match="not usable here"):
        _script().main(["--device", "nonexistent", "--configs", "small", "--exact-sentences", "2",
                        "--train-steps", "0"])
