"""Released models by name, and a download cache that never hands out a bad file.

``resolve("original")`` returns the local options and weight files of a released model,
downloading them on first use. A download is streamed with a progress bar into
``NAME.part`` (resumed with an HTTP Range request if an earlier one stopped), under a
file lock so that two processes never write the same file, checked (size, and sha256:
pinned, or recorded on the first download and checked against afterwards), renamed into
place, and the model is checked structurally (every dataset the options require, with
the right shape) before it is used. A file that fails a check is removed.

The same works for any URL or local archive (``.zip``, ``.tar.gz``, ``.tgz``) holding an
options JSON and a bilm-tf HDF5 file (the NLPL repository's layout: ``options.json``,
``model.hdf5``, optional ``vocab.txt``).

Environment: ``PYELMO_HOME`` (cache root; default ``$XDG_CACHE_HOME/pyelmo`` or
``~/.cache/pyelmo``), ``PYELMO_OFFLINE=1`` (never touch the network), ``PYELMO_MIRROR``
(a URL that replaces ``ALLENNLP_BASE`` in the registry's URLs, e.g. an internal mirror).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pyelmo.config import ElmoConfig, preset
from pyelmo.errors import PyelmoError, WeightFileError
from pyelmo.fileio import PathLike, write_json_atomic


class DownloadError(PyelmoError):
    """A model could not be fetched (offline, network failure, or a file that failed its checks)."""


#: Where AllenNLP published the released ELMo models (allennlp.org/elmo and AllenNLP's code).
ALLENNLP_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
OPTIONS_NAME, WEIGHTS_NAME = "options.json", "weights.hdf5"
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Release:
    """A released model: where its two files live and what it is.

    ``sha256`` / ``sizes`` pin a file's digest / byte size by file name (``options.json``,
    ``weights.hdf5``); files without a pin are checked against what their first
    download recorded.
    """

    name: str
    options_url: str
    weights_url: str
    config: ElmoConfig
    description: str
    source: str
    sha256: tuple[tuple[str, str], ...] = ()
    sizes: tuple[tuple[str, int], ...] = ()

    def urls(self) -> dict[str, str]:
        mirror = os.environ.get("PYELMO_MIRROR", "").rstrip("/")
        rewrite = (lambda u: mirror + u[len(ALLENNLP_BASE):]) if mirror else (lambda u: u)
        return {OPTIONS_NAME: rewrite(self.options_url), WEIGHTS_NAME: rewrite(self.weights_url)}

    @property
    def approx_bytes(self) -> int:
        """float32 parameters of the biLM (no softmax): the weight file's size within a few kB."""
        return 4 * parameter_count(self.config)


def _allennlp(folder: str, stem: str, weights_suffix: str = "weights") -> tuple[str, str]:
    base = f"{ALLENNLP_BASE}/{folder}/{stem}"
    return f"{base}_options.json", f"{base}_{weights_suffix}.hdf5"


def _release(name: str, folder: str, stem: str, size: str, description: str,
             weights_suffix: str = "weights", source: str = "AllenNLP") -> Release:
    options_url, weights_url = _allennlp(folder, stem, weights_suffix)
    return Release(name, options_url, weights_url, preset(size), description, source)


#: The released English models (URLs as published by AllenNLP; no digests were published with them).
RELEASES: dict[str, Release] = {r.name: r for r in [
    _release("small", "2x1024_128_2048cnn_1xhighway", "elmo_2x1024_128_2048cnn_1xhighway", "small",
             "1 Billion Word Benchmark"),
    _release("medium", "2x2048_256_2048cnn_1xhighway", "elmo_2x2048_256_2048cnn_1xhighway", "medium",
             "1 Billion Word Benchmark"),
    _release("original", "2x4096_512_2048cnn_2xhighway", "elmo_2x4096_512_2048cnn_2xhighway", "original",
             "1 Billion Word Benchmark; the paper's model"),
    _release("original-5.5b", "2x4096_512_2048cnn_2xhighway_5.5B", "elmo_2x4096_512_2048cnn_2xhighway_5.5B",
             "original", "5.5B tokens: Wikipedia + WMT 2008-2012 news crawl"),
    _release("pubmed", "contributed/pubmed", "elmo_2x4096_512_2048cnn_2xhighway", "original",
             "PubMed abstracts", weights_suffix="weights_PubMed_only",
             source="AllenNLP (contributed)"),
]}


def register(release: Release) -> None:
    """Add (or replace) a named model, e.g. one on an internal server."""
    RELEASES[release.name] = release


def parameter_count(config: ElmoConfig) -> int:
    """Parameters of the biLM that ``config`` describes (token encoder and LSTMs)."""
    c, lstm = config.char_cnn, config.lstm
    n = c.n_filters
    count = (c.n_characters - 1) * c.embedding_dim
    count += sum(width * c.embedding_dim * maps + maps for width, maps in c.filters)
    count += c.n_highway * 2 * (n * n + n) + n * lstm.projection_dim + lstm.projection_dim
    per_cell = (2 * lstm.projection_dim) * 4 * lstm.dim + 4 * lstm.dim + lstm.dim * lstm.projection_dim
    return count + 2 * lstm.n_layers * per_cell


# -- where files live -----------------------------------------------------------------------
def cache_root() -> Path:
    """``$PYELMO_HOME``, else the platform cache dir (``$XDG_CACHE_HOME/pyelmo`` or ``~/.cache/pyelmo``)."""
    if os.environ.get("PYELMO_HOME"):
        return Path(os.environ["PYELMO_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "pyelmo"


def models_dir(root: PathLike | None = None) -> Path:
    return (Path(root) if root is not None else cache_root()) / "models"


def offline() -> bool:
    return os.environ.get("PYELMO_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_url(text: str) -> bool:
    return bool(re.match(r"^(https?|file)://", str(text)))


def is_archive(text: str) -> bool:
    return str(text).lower().endswith(ARCHIVE_SUFFIXES)


def url_folder(url: str) -> str:
    """A cache folder name for a URL: readable stem plus a digest of the whole URL."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:60] or "model"
    return f"url-{stem}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


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
def _lock(path: Path) -> Iterator[None]:
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


def _offline_error(path: Path, url: str) -> DownloadError:
    return DownloadError(f"{path.name} is not in the cache ({path}) and PYELMO_OFFLINE is set; "
                         f"fetch {url} by hand to that path")


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
    with _lock(path):
        if path.exists():
            verify_cached(path, sha256=sha256, size=size, ledger=ledger)
            if ledger.get(path.name) is None:  # put there by hand (offline): trust it from now on
                ledger.record(path.name, url, path, sha256_file(path))
            return path
        if offline():
            raise _offline_error(path, url)
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


# -- models ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelFiles:
    """A model's local files, ready for ``pyelmo.weights.load_bilm_hdf5``."""

    options: Path
    weights: Path
    vocab: Path | None = None


def resolve(source: str, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
    """A registered name, a URL (file or archive) or a local archive -> verified local files."""
    if source in RELEASES:
        return fetch_release(RELEASES[source], root, progress)
    if is_url(source):
        return fetch_url(source, root, progress)
    if is_archive(source) and Path(source).is_file():
        return unpack_archive(Path(source), models_dir(root) / _local_archive_folder(Path(source)))
    raise WeightFileError(f"unknown model {source!r}: not a directory, a URL, an archive, or one of "
                          f"{', '.join(['english', *RELEASES])}")


def fetch_release(release: Release, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
    directory = models_dir(root) / release.name
    pins, sizes = dict(release.sha256), dict(release.sizes)
    files = {name: fetch(url, directory / name, pins.get(name), sizes.get(name), progress)
             for name, url in release.urls().items()}
    model = ModelFiles(files[OPTIONS_NAME], files[WEIGHTS_NAME])
    check_structure(model, [directory / OPTIONS_NAME, directory / WEIGHTS_NAME])
    return model


def fetch_url(url: str, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
    """A URL of an archive, or of a weight file whose options sit next to it (``options_url_for``)."""
    directory = models_dir(root) / url_folder(url)
    name = url.rstrip("/").rsplit("/", 1)[-1]
    if is_archive(name):
        archive = fetch(url, directory / name, progress=progress)
        try:
            return unpack_archive(archive, directory / "unpacked")
        except PyelmoError:
            archive.unlink(missing_ok=True)  # a bad download: fetch it again next time
            Ledger(directory).forget(archive.name)
            raise
    weights = fetch(url, directory / WEIGHTS_NAME, progress=progress)
    options = fetch(options_url_for(url), directory / OPTIONS_NAME, progress=progress)
    model = ModelFiles(options, weights)
    check_structure(model, [options, weights])
    return model


def options_url_for(weights_url: str) -> str:
    """Where a weight file's options live: AllenNLP's ``X_weights.hdf5`` -> ``X_options.json``, else
    ``options.json`` in the same folder."""
    base, name = weights_url.rsplit("/", 1)
    if name.endswith("_weights.hdf5"):
        return f"{base}/{name[: -len('_weights.hdf5')]}_options.json"
    return f"{base}/{OPTIONS_NAME}"


def _local_archive_folder(path: Path) -> str:
    st = path.resolve().stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    return f"archive-{path.name[:60]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def unpack_archive(archive: Path, directory: Path) -> ModelFiles:
    """Unpack (once, atomically) an archive holding an options JSON and a bilm-tf HDF5 file."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    with _lock(directory):
        if not directory.is_dir():
            tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                _extract(archive, tmp)
                find_model_files(tmp, archive)  # refuse an archive without a model before keeping it
                os.replace(tmp, directory)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        model = find_model_files(directory, archive)
        check_structure(model, [directory])
    return model


def _extract(archive: Path, target: Path) -> None:
    target.mkdir(parents=True)
    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():
                    dest = (target / member).resolve()
                    if not dest.is_relative_to(target.resolve()):
                        raise DownloadError(f"archive {archive} has an entry outside its folder: {member!r}")
                zf.extractall(target)
        else:
            with tarfile.open(archive) as tf:
                tf.extractall(target, filter="data")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        raise DownloadError(f"archive {archive} cannot be unpacked ({exc})") from None


def find_model_files(directory: Path, origin: PathLike | None = None) -> ModelFiles:
    """The options JSON, HDF5 weights and optional vocabulary in a folder (searched recursively).

    Prefers the NLPL names (``options.json``, ``model.hdf5``, ``vocab.txt``); otherwise the
    only ``*.json`` and ``*.hdf5`` files.
    """
    where = origin or directory

    def pick(pattern: str, preferred: str, what: str) -> Path | None:
        found = sorted(p for p in directory.rglob(pattern) if p.is_file() and not p.name.startswith("."))
        named = [p for p in found if p.name == preferred]
        if named or len(found) == 1:
            return (named or found)[0]
        if found:
            raise WeightFileError(f"{where}: several {what} files ({', '.join(p.name for p in found)}) "
                                  f"and none named {preferred}")
        return None

    options = pick("*.json", OPTIONS_NAME, "options")
    weights = pick("*.hdf5", "model.hdf5", "weight")
    if options is None or weights is None:
        raise WeightFileError(f"{where} holds no {'options JSON' if options is None else 'HDF5 weight file'} "
                              "(expected options.json and model.hdf5, the NLPL layout)")
    vocab = options.parent / "vocab.txt"
    return ModelFiles(options, weights, vocab if vocab.is_file() else None)


def check_structure(model: ModelFiles, remove_on_failure: list[Path]) -> None:
    """Open the HDF5 file and check every dataset the options require (names and shapes)."""
    import h5py

    from pyelmo.bilm import BiLM
    import torch

    from pyelmo.weights import _hdf5_layout, load_options

    try:
        config = load_options(model.options)
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            expected = {name: _file_shape(t, how) for name, t, how in _hdf5_layout(BiLM(config))}
        try:
            handle = h5py.File(model.weights, "r")
        except OSError as exc:
            raise WeightFileError(f"{model.weights} is not a readable HDF5 file ({exc})") from None
        with handle:
            for name, shape in expected.items():
                try:
                    dataset = handle.get(name)
                except (OSError, RuntimeError, KeyError, ValueError) as exc:
                    raise WeightFileError(f"{model.weights} is corrupt: cannot read {name!r} ({exc})") from None
                if not isinstance(dataset, h5py.Dataset) or dataset.shape != shape:
                    got = "missing" if not isinstance(dataset, h5py.Dataset) else f"shape {dataset.shape}"
                    raise WeightFileError(f"{model.weights}: dataset {name!r} is {got}, the options need {shape}")
    except WeightFileError as exc:
        for path in remove_on_failure:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
                Ledger(path.parent).forget(path.name)  # its digest was recorded from a bad file
        raise WeightFileError(f"{exc}; removed the downloaded file(s), run again to download") from None


def _file_shape(tensor, how: str) -> tuple[int, ...]:
    """The HDF5 dataset shape of a model tensor (``pyelmo.weights._to_file_layout``, on shapes)."""
    if how == "W0":
        return (tensor[0].shape[1] + tensor[1].shape[1], tensor[0].shape[0])
    shape = tuple(tensor.shape)
    if how == "T":
        return shape[::-1]
    if how == "char":
        return (shape[0] - 1, *shape[1:])
    if how == "conv":
        return (1, shape[2], shape[1], shape[0])
    return shape


def cached(name: str, root: PathLike | None = None) -> bool:
    """Whether a registered model's files are all in the cache."""
    directory = models_dir(root) / name
    return all((directory / f).is_file() for f in (OPTIONS_NAME, WEIGHTS_NAME))


def download(source: str, directory: PathLike | None = None, progress: bool = True) -> ModelFiles:
    """Fetch a named model, URL or archive into the cache (or ``directory``) and verify it."""
    return resolve(source, directory, progress)


def listing(root: PathLike | None = None) -> list[dict]:
    """One row per registered model: name, approximate size, dims, source, cached."""
    from pyelmo.models import DEFAULT_MODEL_DIR

    weights = DEFAULT_MODEL_DIR / "model.safetensors"
    size = f"{weights.stat().st_size / 1e6:.0f} MB" if weights.exists() else "-"
    rows = [{"name": "english", "size": size, "dims": _dims(_shipped_config()),
             "source": "pyelmo: trained by this project, in the package (the default)", "cached": "yes"}]
    for release in RELEASES.values():
        rows.append({"name": release.name, "size": f"~{release.approx_bytes / 1e6:.0f} MB",
                     "dims": _dims(release.config), "source": f"{release.source}: {release.description}",
                     "cached": "yes" if cached(release.name, root) else "no"})
    return rows


def _dims(config: ElmoConfig | None) -> str:
    if config is None:
        return "?"
    return f"{config.num_layers} x {config.output_dim}"


def _shipped_config() -> ElmoConfig | None:
    from pyelmo.models import DEFAULT_MODEL_DIR
    from pyelmo.weights import read_native_config

    try:
        return ElmoConfig.from_options(read_native_config(DEFAULT_MODEL_DIR)["options"])
    except PyelmoError:
        return None


__all__ = ["Release", "RELEASES", "register", "resolve", "download", "fetch", "listing", "cache_root",
           "ModelFiles", "DownloadError", "find_model_files", "check_structure"]
