"""Downloading one file into the model cache so that it is never handed out bad.

A download is streamed with a progress bar into ``.NAME.part`` (resumed with an HTTP Range
request if an earlier one stopped), under a file lock so that two processes never write
the same file, checked (size, and sha256: pinned, or recorded on the first download in
``files.json`` and checked against afterwards) and renamed into place. A file that fails
a check is removed. Used by :mod:`pyelmo.modelio.hub` (released models by name).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator

from pyelmo.errors import PyelmoError
from pyelmo.fileio import PathLike, write_json_atomic

CHUNK = 1 << 20


class DownloadError(PyelmoError):
    """A model could not be fetched (offline, network failure, or a file that failed its checks)."""



def offline() -> bool:
    return os.environ.get("PYELMO_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")



# -- recorded digests (trust on first use) --------------------------------------------------
class Ledger:
    """``DIR/files.json``: url, size and sha256 of each file as first downloaded, plus its stat.

    The stat (size, mtime) lets a later load skip re-hashing a file nobody touched; a
    changed stat means hashing it again and comparing with the recorded digest.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / "files.json"

    def read(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, name: str) -> dict | None:
        entry = self.read().get(name)
        return entry if isinstance(entry, dict) else None

    def forget(self, name: str) -> None:
        data = self.read()
        if data.pop(name, None) is not None:
            write_json_atomic(self.path, data)

    def record(self, name: str, url: str, path: Path, sha256: str) -> None:
        data = self.read()
        st = path.stat()
        data[name] = {"url": url, "size": st.st_size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}
        write_json_atomic(self.path, data)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


# -- downloading one file -------------------------------------------------------------------
@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside ``path``; say so on stderr if another process holds it first."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path.with_name(f".{path.name}.lock")))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"pyelmo: waiting for another process to finish {path}", file=sys.stderr)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def check_offline(files: dict[Path, str], source: str | None = None) -> None:
    """With ``PYELMO_OFFLINE`` set, raise one error naming every file of ``files`` (path -> URL) missing from
    the cache: each URL and the exact path to put it at; for a model (``source``: its name or URL) also
    ``pyelmo download`` as the alternative."""
    missing = {path: url for path, url in files.items() if not path.exists()}
    if not offline() or not missing:
        return
    fetches = " and ".join(f"{url} to {path.absolute()}" for path, url in missing.items())
    present = [path.name for path in files if path not in missing]
    there = f" ({', '.join(present)} {'is' if len(present) == 1 else 'are'} there)" if present else ""
    what = f"model {source!r} needs " if source else ""
    message = (f"{what}{len(missing)} file{'s' if len(missing) > 1 else ''} not in the cache and PYELMO_OFFLINE "
               f"is set: fetch {fetches}{there}")
    if source:
        folder = next(iter(files)).parent.absolute()
        message += (f"; or, on a machine with network, run 'pyelmo download {source} --dir DIR' and copy "
                    f"DIR/models/{folder.name} to {folder}")
    raise DownloadError(message)


def fetch(url: str, path: PathLike, sha256: str | None = None, size: int | None = None,
          progress: bool = True, ledger: Ledger | None = None) -> Path:
    """Make ``path`` hold the verified content of ``url`` and return it.

    Safe to call from several processes at once (a file lock; the others wait and find
    the file done). A transfer that stops leaves ``.NAME.part``, which the next call
    resumes. ``sha256``/``size`` pin the expected file; without a pinned digest the
    first download's digest is recorded in ``ledger`` and later copies must match it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ledger = ledger or Ledger(path.parent)
    with file_lock(path):
        if path.exists():
            verify_cached(path, sha256=sha256, size=size, ledger=ledger)
            if ledger.get(path.name) is None:  # put there by hand (offline): trust it from now on
                ledger.record(path.name, url, path, sha256_file(path))
            return path
        check_offline({path: url})
        part = path.with_name(f".{path.name}.part")
        _download(url, part, progress)
        try:
            recorded = ledger.get(path.name)
            expected = sha256 or (recorded or {}).get("sha256")  # pinned, or what the first download recorded
            _check_size(part, size, url)
            digest = sha256_file(part)
            if expected and digest != expected:
                how = "pinned" if sha256 else f"recorded at the first download in {ledger.path}"
                raise DownloadError(f"{url}: downloaded file has sha256 {digest}, expected {expected} ({how}); "
                                    "removed it")
        except DownloadError:
            part.unlink(missing_ok=True)
            raise
        os.replace(part, path)
        ledger.record(path.name, url, path, digest)
    return path


def _check_size(path: Path, size: int | None, url: str) -> None:
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise DownloadError(f"{url}: downloaded {actual} bytes, expected {size}; the file was removed, try again")


def _download(url: str, part: Path, progress: bool) -> None:
    """Stream ``url`` into ``part``, continuing from its current length with a Range request."""
    import urllib.error
    import urllib.request

    from tqdm import tqdm

    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "pyelmo"})
    if start:
        request.add_header("Range", f"bytes={start}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and start:  # the partial file is already complete (or longer than the file)
            part.unlink()
            return _download(url, part, progress)
        raise DownloadError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"cannot download {url} ({reason}); fetch it by hand, "
                            "or set PYELMO_OFFLINE=1 to see where files go") from None
    with response:
        resumed = start and response.status == 206
        if not resumed:
            start = 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        written = start
        with open(part, "ab" if resumed else "wb") as out, tqdm(
                total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                desc=part.name[1:-5], disable=not progress, leave=False) as bar:
            try:
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    written += len(block)
                    bar.update(len(block))
            except (OSError, ValueError) as exc:  # connection reset, timeout, IncompleteRead
                raise DownloadError(f"download of {url} stopped at {written} bytes ({exc}); "
                                    "run again to resume") from None
    if total is not None and written < total:
        raise DownloadError(f"download of {url} stopped at {written} of {total} bytes; run again to resume")


def verify_cached(path: Path, sha256: str | None = None, size: int | None = None,
                  ledger: Ledger | None = None) -> None:
    """Check a cached file against its pin or its recorded digest; remove it if it fails."""
    ledger = ledger or Ledger(path.parent)
    recorded = ledger.get(path.name)
    st = path.stat()
    expected = sha256 or (recorded or {}).get("sha256")
    unchanged = recorded is not None and recorded.get("size") == st.st_size and \
        recorded.get("mtime_ns") == st.st_mtime_ns and (sha256 is None or recorded.get("sha256") == sha256)
    problem = None
    if size is not None and st.st_size != size:
        problem = f"has {st.st_size} bytes, expected {size}"
    elif expected and not unchanged:
        digest = sha256_file(path)
        if digest != expected:
            problem = f"has sha256 {digest}, expected {expected}"
        elif recorded is not None:
            ledger.record(path.name, recorded.get("url", ""), path, digest)  # e.g. copied: new mtime, same bytes
    if problem:
        path.unlink(missing_ok=True)
        raise DownloadError(f"cached file {path} {problem} (changed since download); removed it, run again to download")
