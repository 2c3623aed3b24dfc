"""SIGKILL during `pyelmo train` and `pyelmo embed`: nothing is lost, nothing half-written is left;
SIGINT (Ctrl-C) at any moment of `pyelmo task train`: "interrupted", exit 130, the model folder whole or absent.

Training: a tiny run is killed at seeded points (a delay after start, or when metrics.jsonl reaches a
chosen step); the checkpoint left must load with ``weights_only=True``; ``--resume`` (or, killed before
run.json existed, a fresh start) must end with weights equal to an uninterrupted run, and no
temporary file may remain.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.training.trainer import train
from pyelmo.modelio.weights import load_native_tensors
from taskdata import BILM_ARGS, write_task_data
from tinyconfig import tiny_train_config

CONFIG = tiny_train_config(lstm__n_layers=2, data__batch_tokens=120, train__max_steps=8, train__eval_every=4)
TEXT = "the cat sees the dog .\nthe big dog likes the old cat .\na bird finds a fish .\nthe cow eats .\n" * 12
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
KILLS = 5
SEED = 20240607


def _leftover_temporaries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp") or ".tmp." in p.name]


def _metric_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if '"loss"' in line)


def _sigkill_when(proc: subprocess.Popen, ready, what: str, poll: float = 0.005) -> bool:
    """SIGKILL ``proc`` once ``ready(seconds since start)`` holds; True if it had already finished."""
    start = time.monotonic()
    try:
        while proc.poll() is None and not ready(time.monotonic() - start):
            if time.monotonic() - start > 120:
                raise AssertionError(f"{what} did not reach the kill point in 120 s")
            time.sleep(poll)
        finished = proc.poll() is not None
        if not finished:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return finished


def _kill_train(cmd: list[str], out: Path, kind: str, value: float) -> tuple[int, str]:
    """Start training, SIGKILL it at the chosen point; returns (pid, what happened)."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ready = (lambda t: t >= value) if kind == "delay" else (lambda t: _metric_steps(out) >= value)
    finished = _sigkill_when(proc, ready, "training")
    err = proc.stderr.read().decode(errors="replace")
    if finished:
        raise AssertionError(f"training finished before the kill point ({kind} {value}): {err[-500:]}")
    return proc.pid, err


@pytest.mark.slow
def test_sigkill_training_then_resume_equals_uninterrupted(tmp_path, capsys):
    (tmp_path / "train.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    reference = train(json.loads(json.dumps(CONFIG)), tmp_path / "reference", train_files=[tmp_path / "train.txt"],
                      progress=False)
    expected = load_native_tensors(reference.model_dir)

    rng = random.Random(SEED)
    # seeded kill points: one early delay (may hit before the first checkpoint or before run.json),
    # then metrics steps spread over the run
    points = [("delay", round(rng.uniform(0.5, 2.5), 2))] + [
        ("step", k) for k in sorted(rng.sample(range(1, CONFIG["train"]["max_steps"]), KILLS - 1))]
    results = []
    for i, (kind, value) in enumerate(points):
        out = tmp_path / f"killed-{i}"
        cmd = [sys.executable, "-m", "pyelmo", "train", "--config", str(tmp_path / "config.json"),
               "--train", str(tmp_path / "train.txt"), "--out", str(out), "--no-progress"]
        pid, _ = _kill_train(cmd, out, kind, value)
        checkpoint_step = None
        if (out / "run.json").exists():
            # invariant: a run with run.json always has a loadable checkpoint
            ckpt = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
            checkpoint_step = int(ckpt["step"])
            if i == len(points) - 1:
                # what SIGKILL can also leave: a half-written checkpoint temp file and a cut-off metrics line
                (out / f".checkpoint.pt.{pid}.tmp").write_bytes(b"PK\x03\x04 half a checkpoint")
                with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
                    f.write('{"step": 99, "lo')
            assert main(["train", "--out", str(out), "--resume", "--no-progress"]) == 0
            how = "resumed"
        else:
            assert main(cmd[3:]) == 0  # nothing to resume: start again (no --overwrite needed)
            how = "restarted"
        capsys.readouterr()
        got = load_native_tensors(out / "model")
        assert got.keys() == expected.keys()
        worst = max(float((got[k] - expected[k]).abs().max()) for k in expected)
        assert worst <= 1e-6, (kind, value, worst)
        assert _leftover_temporaries(out) == []
        steps = [json.loads(l)["step"] for l in (out / "metrics.jsonl").read_text().splitlines()]
        assert steps == [json.loads(l)["step"] for l in (reference.out_dir / "metrics.jsonl").read_text().splitlines()]
        results.append((kind, value, checkpoint_step, how, worst))
    print("kills:", results)
    assert sum(1 for r in results if r[3] == "resumed") >= KILLS - 1


@pytest.mark.slow
def test_sigkill_embed_leaves_no_output_and_resume_finishes_it(tmp_path, allennlp_reference):
    lines = [f"the quick brown fox {i} jumps over the lazy dog near the river bank .\n" for i in range(3 * 4096 + 500)]
    (tmp_path / "in.txt").write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    parts = out / ".vectors.h5.parts"
    cmd = [sys.executable, "-m", "pyelmo", "embed", str(tmp_path / "in.txt"), str(out / "vectors.h5"), "--no-progress",
           "--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # kill once the first segment is finished
    assert not _sigkill_when(proc, lambda t: bool(list(parts.glob("part-*.h5"))), "embed", poll=0.01), \
        "embed finished before it could be killed"
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "vectors.h5").exists()
    assert sorted(p.name for p in out.iterdir()) == [parts.name]  # only the recognisably partial work
    finished = {p.name: p.stat().st_mtime_ns for p in parts.glob("part-*.h5")}
    assert finished

    # --resume keeps the finished segments (not recomputed) and completes the file
    assert main(["embed", *cmd[4:], "--resume"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["vectors.h5"]
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.modelio.weights import load_bilm_hdf5

    embedder = ElmoEmbedder(load_bilm_hdf5(allennlp_reference.options, allennlp_reference.weights))
    with h5py.File(out / "vectors.h5", "r") as f:
        assert len(f) == len(lines) + 1
        for i in (0, 4095, 4096, len(lines) - 1):
            np.testing.assert_allclose(f[str(i)][...], embedder.embed_sentence(lines[i].split()), atol=1e-5)
        assert len(json.loads(f["sentence_to_index"][0])) == len(lines)


def test_embed_resume_refuses_other_settings_and_missing_run(tmp_path, allennlp_reference, capsys):
    (tmp_path / "in.txt").write_text("a b\nc d\n", encoding="utf-8")
    args = ["embed", str(tmp_path / "in.txt"), str(tmp_path / "o.h5"), "--no-progress",
            "--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    assert main([*args, "--resume"]) == 1
    assert "nothing to resume" in capsys.readouterr().err
    parts = tmp_path / ".o.h5.parts"
    parts.mkdir()
    (parts / "run.json").write_text('{"input": "something else"}')
    assert main([*args, "--resume"]) == 1
    assert "another input" in capsys.readouterr().err
    assert main([*args, "--resume", "--stateful"]) == 1
    assert main(args) == 0  # without --resume: starts over
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "o.h5"]


#: Test-only patches, run in the child (``python -c``) before pyelmo's ``__main__``: a marker line, then a pause
#: for the signal to land in.
_PAUSE = "print('{marker}', file=sys.stderr, flush=True); time.sleep(60)"
_IN_SAVE = f"""
import safetensors.torch as st
save = st.save_file
def slow_save(*args, **kwargs):
    {_PAUSE.format(marker="SAVING")}
st.save_file = slow_save
"""
_AFTER_SAVE = f"""
import pyelmo.tasks.train as tt
write = tt.write_model_dir
def write_then_pause(*args, **kwargs):
    write(*args, **kwargs)
    {_PAUSE.format(marker="WRITTEN")}
tt.write_model_dir = write_then_pause
"""
#: (name, patch or None for a plain ``python -m pyelmo``, the line to wait for, the delay after it, a run that ends
#: by itself); the training moments and the end of a run: the model being saved, saved, the process exiting
SIGINT_POINTS = [
    ("about 1 s after a (best) line", None, "(best)", 1.0, False),
    ("writing the model folder", _IN_SAVE, "SAVING", 0.0, True),
    ("model folder in place", _AFTER_SAVE, "WRITTEN", 0.0, True),
    ("after the saved line (exiting)", None, "saved ", 0.0, True),
]


def _sigint_task_train(data: Path, name: str, patch, wait_for: str, delay: float, ends: bool) -> tuple:
    """Run ``pyelmo task train classify`` (patched by ``patch``), SIGINT it ``delay`` s after the first line holding
    ``wait_for``; returns (exit code, output, the --out folder)."""
    out = data / name.replace(" ", "-").replace("(", "").replace(")", "")
    args = ["task", "train", "classify", "--train", str(data / "train.tsv"), "--dev", str(data / "dev.tsv"),
            "--out", str(out), *BILM_ARGS, "--static-vectors", str(data / "vec.txt"), "--hidden", "16",
            "--batch-size", "8", "--min-steps", "0",
            *(["--max-epochs", "2"] if ends else  # else a run that goes on: no perfect dev score to stop at
              ["--max-epochs", "1000", "--patience", "1000", "--lr", "1e-6"])]
    head = (["-c", f"import runpy, sys, time\n{patch}\nrunpy.run_module('pyelmo', run_name='__main__')"] if patch
            else ["-m", "pyelmo"])  # patched: the same entry point as python -m pyelmo
    proc = subprocess.Popen([sys.executable, *head, *args], env={**ENV, "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if wait_for in line:
                break
        else:
            raise AssertionError(f"{name}: no line with {wait_for!r}: {''.join(lines)[-800:]}")
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        lines.append(proc.stdout.read())
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines), out


@pytest.mark.slow
def test_sigint_at_every_moment_of_task_train_is_interrupted_130(tmp_path):
    """Ctrl-C during training (1 s after a new best), while the model folder is written, once it is in place,
    and while the process exits: "pyelmo task: interrupted" and 130 every time (Python's own exit used to
    give SIGINT its default action back: the process died by the signal with no message), and the folder
    is absent (no temporary left) or complete and loadable."""
    from pyelmo.tasks.saved import load_task

    write_task_data(tmp_path)
    results: dict = {}
    runs = [threading.Thread(target=lambda p=p: results.__setitem__(p[0], _sigint_task_train(tmp_path, *p)))
            for p in SIGINT_POINTS]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert set(results) == {p[0] for p in SIGINT_POINTS}, "a run failed: see the thread's exception above"
    print("sigint:", {name: r[0] for name, r in results.items()})
    for name, (code, output, out) in results.items():
        exiting = name == "after the saved line (exiting)"
        # exiting, the run may be over before the signal comes: 0, and nothing printed after "saved"
        assert code == 130 or (exiting and code == 0), (name, code, output[-800:])
        assert "Traceback" not in output, (name, output[-800:])
        assert output.rstrip().endswith("pyelmo task: interrupted") == (code == 130), (name, output[-800:])
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")], name  # no temporary folder
        if name in ("model folder in place", "after the saved line (exiting)"):
            assert load_task(out, progress=False).labels == ["neg", "pos"], name
        else:
            assert not out.exists(), name
