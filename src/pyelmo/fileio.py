"""Writing files so that nothing half-written is ever left under the final name.

Every output pyelmo writes goes through here: to a temporary sibling first
(``.NAME.PID.tmp``), then ``os.replace`` onto the final path, and the temporary
file is removed if anything fails on the way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

PathLike = str | os.PathLike


def atomic_path(path: PathLike) -> Path:
    """A temporary sibling of ``path``; write there, then ``os.replace`` it onto ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_writer(path: PathLike) -> Iterator[Path]:
    """``with atomic_writer(path) as tmp: write(tmp)``: ``tmp`` becomes ``path`` only on success."""
    path = Path(path)
    tmp = atomic_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_folder(folder: PathLike) -> Iterator[Path]:
    """``with atomic_folder(folder) as tmp: write into tmp``: a folder beside ``folder`` that becomes ``folder`` only
    on success (a folder already there set aside, then removed); otherwise removed."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        mask = os.umask(0o022)
        os.umask(mask)
        tmp.chmod(0o777 & ~mask)  # mkdtemp's folder is private; the result is an ordinary folder
        yield tmp
        if folder.exists():
            old = folder.with_name(f".{folder.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
            tmp.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_bytes_atomic(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_writer(path) as tmp:
        tmp.write_bytes(data)


def write_text_atomic(path: PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON (with a final newline) to ``path`` atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def check_input_file(path: PathLike, what: str = "input file", error: type | None = None,
                     expected: str = "a file") -> Path:
    """``path`` is an existing file, not a folder: else one line naming ``what`` (``error``: the exception
    class, an ``InputError`` by default). Every input file of the commands is checked here first."""
    from pyelmo.errors import InputError

    error = error or InputError
    path = Path(path)
    if not path.exists():
        raise error(f"{what} not found: {path}")
    if path.is_dir():
        raise error(f"{what} is a directory, expected {expected}: {path}")
    return path


def check_output_folder(folder: PathLike, what: str = "output") -> Path:
    """``folder`` exists and can be written into (``InputError`` naming ``what`` otherwise): checked
    before any work, so that a command never computes a result it cannot save."""
    from pyelmo.errors import InputError

    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{what} folder does not exist: {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{what} folder is not writable: {folder}")
    return folder


def check_output_file(path: PathLike, overwrite: bool = False, what: str = "output") -> Path:
    """``path`` can be written: not a folder, its folder writable, and absent unless ``overwrite``."""
    from pyelmo.errors import InputError

    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} path is a directory: {path}")
    check_output_folder(path.parent, what)
    if path.exists() and not overwrite:
        raise InputError(f"{what} file exists: {path} (use --overwrite to replace it)")
    return path


def read_json(path: PathLike, expected: type = dict, what: str = "a JSON object") -> Any:
    """The JSON value in ``path`` (UTF-8), which must be an ``expected`` (``InputError`` naming the file
    otherwise: invalid JSON, or ``what`` it is not)."""
    from pyelmo.errors import InputError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, expected):
        raise InputError(f"{path}: not {what}")
    return data
