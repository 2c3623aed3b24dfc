"""Graceful stop of ``pyelmo train``: SIGTERM / SIGINT write a checkpoint that ``--resume`` continues."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyelmo.training import stop as stop_mod
from pyelmo.training.checkpoints import load_checkpoint
from pyelmo.training.stop import StopRequest, exit_code
from tinyconfig import tiny_train_config

# far more steps than the test waits for; no regular checkpoint after step 0
LONG = tiny_train_config(train__max_steps=100000, train__max_epochs=100000, train__checkpoint_every=0,
                         train__log_every=1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    words = "the a big small cat dog sees chases eats likes it and".split()
    for split, n in (("train", 120), ("valid", 10)):
        (root / split).mkdir()
        lines = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(4 + i % 5)) + " ." for i in range(n)]
        (root / split / "part.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def _logged_steps(out: Path) -> list[int]:
    """The steps of the training-loss records in metrics.jsonl (one per step with log_every = 1)."""
    path = out / "metrics.jsonl"
    records = [json.loads(l) for l in path.read_text().splitlines() if l.endswith("}")] if path.exists() else []
    return [r["step"] for r in records if "loss" in r]


def _wait_for_steps(proc: subprocess.Popen, out: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(_logged_steps(out)) < n:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "training did not log steps in time"
        time.sleep(0.05)


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_writes_checkpoint_and_resume_continues(corpus, tmp_path, signum):
    (tmp_path / "cfg.json").write_text(json.dumps(LONG))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "pyelmo", "train", "--config", str(tmp_path / "cfg.json"), "--data", str(corpus),
           "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_steps(proc, out, 3)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == exit_code(signum) == 128 + signum, stderr[-3000:]
    step = load_checkpoint(out / "checkpoint.pt")["step"]
    assert step >= 3
    assert f"stopped by {signal.Signals(signum).name} at step {step} " in stdout
    assert f"pyelmo train --out {out} --resume" in stdout
    assert f"{signal.Signals(signum).name} received" in stderr
    assert "Traceback" not in stderr
    assert not (out / "model").exists()  # an interrupted run writes only its checkpoint
    assert not list(out.glob(".*.tmp"))
    assert max(_logged_steps(out)) == step
    if signum != signal.SIGTERM:
        return  # the resume is the same after either signal

    resumed = subprocess.run([sys.executable, "-m", "pyelmo", "train", "--out", str(out), "--resume",
                              "--max-steps", str(step + 3), "--no-progress"],
                             env=_env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"trained {step + 3} steps" in resumed.stdout
    assert _logged_steps(out) == list(range(1, step + 4))  # the step counter continues from the checkpoint
    assert load_checkpoint(out / "checkpoint.pt")["step"] == step + 3
    assert (out / "model" / "model.safetensors").is_file()


def test_stop_request_flags_repeats_and_aborts(monkeypatch):
    with StopRequest() as request:
        assert request.signum is None
        signal.raise_signal(signal.SIGINT)
        assert request.signum == signal.SIGINT
        signal.raise_signal(signal.SIGINT)  # within REPEAT_WINDOW_S: the same request (torchrun forwards Ctrl-C)
        monkeypatch.setattr(stop_mod, "REPEAT_WINDOW_S", -1.0)
        with pytest.raises(KeyboardInterrupt):  # a second request: SIGINT's previous action
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [e.split(b"=", 1)[1] for e in env if e.startswith(b"RANK=")]
    return int(ranks[0]) if ranks else None


@pytest.mark.slow
def test_torchrun_signal_to_one_rank_stops_all_at_one_step(corpus, tmp_path):
    cfg = {**LONG, "data": {**LONG["data"], "min_rows": 2}}
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "pyelmo", "train",
           "--config", str(tmp_path / "cfg.json"), "--data", str(corpus), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_steps(proc, out, 3, timeout=180)
        workers = {_rank_of(p): p for p in _children(proc.pid)}
        os.kill(workers[1], signal.SIGTERM)  # only rank 1: rank 0, which writes, must stop at the same step
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0  # torchrun reports the workers' exit code 143 as a failure
    step = load_checkpoint(out / "checkpoint.pt")["step"]
    assert step >= 3
    assert f"stopped by SIGTERM at step {step} " in stdout, (stdout[-2000:], stderr[-3000:])
    assert max(_logged_steps(out)) == step
