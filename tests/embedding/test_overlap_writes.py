"""`pyelmo embed` writes its parts in a background thread while the next batches are computed
(``EmbedJob(overlap_writes=True)``, the default; ``--no-overlap-writes`` writes between batches): the same
bytes, the writer's errors raised in the caller's thread, and a Ctrl-C leaves what it left without the thread."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import pytest

import pyelmo
from pyelmo.cli import main
from pyelmo.embedding import parts as parts_module
from pyelmo.embedding import store
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.embedding.job import EmbedJob

WORDS = "the bank river money boat stopped near deposited a of in and to was he she it they , .".split()
WRITER = "pyelmo-part-writer"


def sentences(path: Path, n: int) -> Path:
    rng = random.Random(n)
    path.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + "\n"
                            for _ in range(n)), encoding="utf-8")
    return path


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def no_writer_left() -> bool:
    return not any(t.name == WRITER for t in threading.enumerate())


def test_the_command_writes_the_same_bytes_with_and_without_the_overlap(allennlp_reference, tmp_path):
    """Two fresh `pyelmo embed` processes over two segments and many sorting windows (--batch-size 8)."""
    text = sentences(tmp_path / "in.txt", store.SEGMENT_LINES + 100)
    source = str(Path(pyelmo.__file__).parents[1])  # this tree's pyelmo in the child processes too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pyelmo", "embed", str(text), "--options-file", str(allennlp_reference.options),
               "--weight-file", str(allennlp_reference.weights), "--batch-size", "8", "--no-progress"]
    runs = [subprocess.Popen([*command, str(tmp_path / f"{name}.h5"), *flags], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
            for name, flags in (("overlap", []), ("between", ["--no-overlap-writes"]))]
    for run in runs:
        output = run.communicate(timeout=300)[0]
        assert run.returncode == 0, output
    assert (tmp_path / "overlap.h5").read_bytes() == (tmp_path / "between.h5").read_bytes()
    with h5py.File(tmp_path / "overlap.h5", "r") as f:
        assert len(f) == store.SEGMENT_LINES + 101  # every line, and sentence_to_index


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(store, "SEGMENT_LINES", 50)


def embed(model, text: Path, out: Path, overlap: bool, batch_size: int = 2, **options) -> int:
    """A fresh embedder each time (its token cache starts empty: the same calls, the same bits)."""
    job = EmbedJob(text, out, batch_size=batch_size, overlap_writes=overlap, **options)
    try:
        return ElmoEmbedder(model).embed_job(job)
    finally:
        assert no_writer_left()


@pytest.mark.parametrize("options", [{}, {"output_format": "top"}, {"output_format": "average", "pool": "mean"}])
def test_the_same_bytes_in_process_and_written_in_the_writer_thread(tiny_model, tmp_path, monkeypatch,
                                                                    small_segments, options):
    text = sentences(tmp_path / "in.txt", 110)  # segments of 50, 50 and 10 lines, windows of 32 sentences
    threads, write = [], parts_module.Parts.write

    def recorded(self, segment, items):
        threads.append(threading.current_thread().name)
        write(self, segment, items)

    monkeypatch.setattr(parts_module.Parts, "write", recorded)
    for overlap in (True, False):
        assert embed(tiny_model, text, tmp_path / f"{overlap}.h5", overlap, **options) == 110
    assert threads == [WRITER] * 3 + ["MainThread"] * 3
    assert (tmp_path / "True.h5").read_bytes() == (tmp_path / "False.h5").read_bytes()


def test_the_next_window_is_computed_while_the_writer_is_busy(tiny_model, tmp_path, monkeypatch, small_segments):
    """The writer holds its first dataset until the main thread has computed a batch of the next window."""
    text = sentences(tmp_path / "in.txt", 120)
    computed, next_window = 0, threading.Event()
    embed_batch, create_dataset = ElmoEmbedder.embed_batch, h5py.Group.create_dataset

    def counted(self, batch):
        nonlocal computed
        computed += len(batch)
        if computed > 32:  # the second window of 32 sentences
            next_window.set()
        return embed_batch(self, batch)

    def held(self, name, *args, **kwargs):
        if name == "0":  # in any thread: without the overlap, the main thread waits here
            assert next_window.wait(timeout=30), "the writer ran alone"
        return create_dataset(self, name, *args, **kwargs)

    monkeypatch.setattr(ElmoEmbedder, "embed_batch", counted)
    monkeypatch.setattr(h5py.Group, "create_dataset", held)
    assert embed(tiny_model, text, tmp_path / "out.h5", overlap=True) == 120


@pytest.mark.parametrize("overlap", [True, False])
def test_a_write_error_is_raised_in_the_main_thread_and_stops_the_run(allennlp_reference, tiny_model, tmp_path,
                                                                      monkeypatch, small_segments, capsys, overlap):
    """Disk full at the 60th dataset (segment 1): the same OSError object, raised by ``embed_job``, the compute
    stopped within a window or two, segment 0 kept and segment 1 never renamed; the command says it in one line."""
    text = sentences(tmp_path / "in.txt", 400)
    full = OSError(errno.ENOSPC, "No space left on device")
    computed, datasets = 0, 0
    embed_batch, create_dataset = ElmoEmbedder.embed_batch, h5py.Group.create_dataset

    def counted(self, batch):
        nonlocal computed
        computed += len(batch)
        return embed_batch(self, batch)

    def disk_full_at_60(self, *args, **kwargs):
        nonlocal datasets
        datasets += 1
        if datasets == 60:
            raise full
        return create_dataset(self, *args, **kwargs)

    monkeypatch.setattr(ElmoEmbedder, "embed_batch", counted)
    monkeypatch.setattr(h5py.Group, "create_dataset", disk_full_at_60)
    with pytest.raises(OSError) as raised:
        embed(tiny_model, text, tmp_path / "out.h5", overlap)
    assert raised.value is full and 60 <= computed <= 60 + 3 * 32, computed
    parts = tmp_path / ".out.h5.parts"
    assert sorted(p.name for p in parts.glob("part-*")) == ["part-00000000.h5", "part-00000001.tmp"]

    # the command: the error in one line, no traceback of a thread
    monkeypatch.setattr(h5py.Group, "create_dataset", lambda self, *a, **k: (_ for _ in ()).throw(full))
    model = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    flags = [] if overlap else ["--no-overlap-writes"]
    assert main(["embed", str(text), str(tmp_path / "o2.h5"), "--no-progress", *model, *flags]) == 1
    err = capsys.readouterr().err
    assert err == "pyelmo embed: error: No space left on device\n" and no_writer_left()


def test_an_interrupt_leaves_what_it_leaves_without_the_writer_and_resume_finishes(tiny_model, tmp_path,
                                                                                  monkeypatch, small_segments):
    """Ctrl-C at the first batch of segment 2, with segment 1 still queued for the writer (held until then):
    the same files are left (parts 0 and 1 finished, part 2 not renamed), the same message, and --resume
    ends with the bytes of an uninterrupted run."""
    text = sentences(tmp_path / "in.txt", 170)
    embed(tiny_model, text, tmp_path / "whole.h5", overlap=True, batch_size=4)  # windows of 64 sentences
    computed, interrupted = 0, threading.Event()
    embed_batch, create_dataset = ElmoEmbedder.embed_batch, h5py.Group.create_dataset

    def ctrl_c_at_line_100(self, batch):
        nonlocal computed
        computed += len(batch)
        if computed > 100:
            interrupted.set()
            raise KeyboardInterrupt
        return embed_batch(self, batch)

    def held(self, name, *args, **kwargs):
        if threading.current_thread().name == WRITER and name == "50":
            assert interrupted.wait(timeout=30)
        return create_dataset(self, name, *args, **kwargs)

    left, said = {}, {}
    for overlap in (True, False):
        computed = 0
        out = tmp_path / f"{overlap}" / "out.h5"
        out.parent.mkdir()
        with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt) as stopped:
            m.setattr(ElmoEmbedder, "embed_batch", ctrl_c_at_line_100)
            m.setattr(h5py.Group, "create_dataset", held)
            embed(tiny_model, text, out, overlap, batch_size=4)
        left[overlap] = files(out.parent / ".out.h5.parts")
        said[overlap] = str(stopped.value).replace(str(out.parent), "DIR")
        assert "2 finished part(s), the vectors of 100 lines" in said[overlap]
        assert embed(tiny_model, text, out, overlap=True, batch_size=4, resume=True) == 170
        assert out.read_bytes() == (tmp_path / "whole.h5").read_bytes()
    assert left[True] == left[False] and said[True] == said[False]
    assert [n for n in left[True] if n.startswith("part-")] == ["part-00000000.h5", "part-00000001.h5",
                                                                "part-00000002.tmp"]
