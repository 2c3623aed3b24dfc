"""The files of a corpus build: the split's shards, and checking a completed build's ``stats.json``."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from pyelmo.fileio import write_bytes_atomic

STATS_VERSION = 2


def files_hash(outdir: Path, files: list[str]) -> str:
    """SHA-256 of the sorted ``relpath<TAB>size`` lines of ``files`` under ``outdir``."""
    lines = [f"{rel}\t{(outdir / rel).stat().st_size}\n" for rel in sorted(files)]
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def load_stats(outdir: str | os.PathLike) -> dict | None:
    """The stats of a completed build in ``outdir``, or None if it is absent or invalid
    (unreadable JSON, wrong version, or a listed file missing or of another size)."""
    outdir = Path(outdir)
    path = outdir / "stats.json"
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
        files = stats["files"]
        if stats.get("version") != STATS_VERSION:
            return None
        for f in files:
            p = outdir / f["path"]
            if not p.is_file() or p.stat().st_size != f["size"]:
                return None
        if files_hash(outdir, [f["path"] for f in files]) != stats["files_hash"]:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return stats


def write_shards(out: Path, rows: dict[str, list[tuple[bytes, str]]], shard_lines: int) -> list[dict]:
    """Each split of ``rows`` (``(sha1, sentence)`` pairs, emptied as written) in ``out/SPLIT/``,
    ordered by hash and cut into shards of ``shard_lines`` lines; returns the files' records."""
    files: list[dict] = []
    out.mkdir(parents=True, exist_ok=True)
    for sp in rows:
        d = out / sp
        d.mkdir(exist_ok=True)
        items = sorted(rows[sp])
        rows[sp] = []
        names = []
        for k, start in enumerate(range(0, max(len(items), 1), shard_lines)):
            chunk = items[start : start + shard_lines]
            data = "".join(s + "\n" for _, s in chunk).encode("utf-8")
            name = f"shard-{k:05d}.txt"
            write_bytes_atomic(d / name, data)
            names.append(name)
            files.append({"path": f"{sp}/{name}", "size": len(data), "lines": len(chunk),
                          "sha256": hashlib.sha256(data).hexdigest()})
        for stale in d.glob("shard-*.txt"):  # left over from an earlier, different build
            if stale.name not in names:
                stale.unlink()
    return files
