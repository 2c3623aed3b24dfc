"""The parts of one embedding run: finished segments kept in ``.OUTPUT.parts/`` for --resume, and what a
resumed run must match."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Iterable

import numpy as np

from pyelmo.embedding.job import is_stream
from pyelmo.errors import InputError
from pyelmo.fileio import write_text_atomic
from pyelmo.runtime.precision import spelled


def run_fingerprint(input_file, model: str, settings: dict) -> dict:
    """What must match for a resumed run to continue an earlier one."""
    source: dict = {"stream": True}
    if not is_stream(input_file) and Path(input_file).is_file():
        stat = Path(input_file).stat()
        source = {"path": str(Path(input_file).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    return {"input": source, "settings": settings, "model": model}


def _difference(earlier, now: dict) -> str:
    """What differs between an interrupted run's fingerprint and this run's, in words."""
    if not isinstance(earlier, dict):
        return "its manifest is unreadable"
    if earlier.get("input") != now["input"]:
        return "the interrupted run read another input (the file changed since, or is another one)"
    if earlier.get("model") != now["model"]:
        return "the interrupted run used another model"
    settings = earlier.get("settings") if isinstance(earlier.get("settings"), dict) else {}
    changed = [f"{key} was {settings.get(key)!r}, now {value!r}" for key, value in now["settings"].items()
               if settings.get(key) != value]
    return "the interrupted run used other settings: " + "; ".join(changed) if changed else "the runs differ"


class Parts:
    """The finished segments of one ``embed_file`` run, kept in ``.OUTPUT.parts/`` for --resume."""

    def __init__(self, output: Path, fingerprint: dict, resume: bool, segment_lines: int) -> None:
        self.segment_lines = segment_lines  # input lines per part (named in what_is_kept)
        self.dir = output.with_name(f".{output.name}.parts")
        manifest = self.dir / "run.json"
        fingerprint = json.loads(json.dumps(fingerprint))  # as it reads back from the manifest
        if resume:
            if not manifest.is_file():
                raise InputError(f"nothing to resume: no interrupted run of {output} ({self.dir.name}/ is missing)")
            try:
                earlier = json.loads(manifest.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                earlier = None
            if isinstance(earlier, dict) and isinstance(earlier.get("settings"), dict):  # an older "torch.float32"
                earlier["settings"]["precision"] = spelled(earlier["settings"].get("precision"))
            if earlier != fingerprint:
                raise InputError(f"cannot resume {output}: {_difference(earlier, fingerprint)} "
                                 "(run without --resume to start over)")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir.mkdir()
            write_text_atomic(manifest, json.dumps(fingerprint))
        self.completed = {int(p.stem.split("-")[1]) for p in self.dir.glob("part-*.h5")}

    def _path(self, segment: int) -> Path:
        return self.dir / f"part-{segment:08d}.h5"

    def done(self, segment: int) -> bool:
        return segment in self.completed

    def write(self, segment: int, items: Iterable[tuple[str, np.ndarray]]) -> None:
        import h5py

        tmp = self.dir / f"part-{segment:08d}.tmp"
        with h5py.File(tmp, "w") as part:
            for key, array in items:
                part.create_dataset(key, data=array)
        os.replace(tmp, self._path(segment))
        self.completed.add(segment)

    def join_into(self, filename: Path) -> None:
        """Join every segment's datasets into the HDF5 file ``filename``: the first segment's file becomes it (moved,
        not copied: an interrupted join leaves that segment to be computed again by --resume), the others' datasets
        are copied in.

        The file is reopened for each segment: an open file's metadata cache grows with its
        number of datasets, a reopened one starts empty (flat memory, and faster here)."""
        import h5py

        segments = sorted(self.completed)
        if segments:
            os.replace(self._path(segments[0]), filename)
            self.completed.discard(segments[0])
        else:
            h5py.File(filename, "w").close()
        for segment in segments[1:]:
            with h5py.File(filename, "a") as out, h5py.File(self._path(segment), "r") as part:
                for key in part:
                    part.copy(key, out)

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def what_is_kept(self) -> str:
        """What an interrupted run leaves for --resume, counted."""
        import h5py

        if not self.completed:
            return (f"no part of {self.segment_lines} lines was finished, so nothing is kept (the same command with "
                    f"--resume starts from the first line)")
        lines = 0
        for segment in self.completed:
            with h5py.File(self._path(segment), "r") as part:
                lines += len(part)
        return (f"{len(self.completed)} finished part(s), the vectors of {lines} lines, are kept in {self.dir}; "
                f"the same command with --resume continues from them")
