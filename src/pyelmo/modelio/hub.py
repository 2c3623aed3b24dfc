"""Models by name (the shipped ones, ``english`` and ``chinese``, and the released ones), and the model cache.

``fetch_release(RELEASES["original"])`` returns the local options and weight files of a released model,
downloading them on first use (:mod:`pyelmo.modelio.downloads`: resumable, locked, checked
against a pinned or recorded sha256) and checking the model structurally before it is
used (:mod:`pyelmo.modelio.archives`). A file that fails a check is removed.

The same works for any URL (:func:`fetch_url`) or local archive (:func:`fetch_archive`; ``.zip``,
``.tar.gz``, ``.tgz``) holding an options JSON and a bilm-tf HDF5 file (the NLPL repository's layout:
``options.json``, ``model.hdf5``, optional ``vocab.txt``). Which of them a name is, is decided once, by
:func:`pyelmo.modelio.resolve.resolve_model` (its record's ``fetch``); nothing here interprets a name.

Environment: ``PYELMO_HOME`` (cache root; default ``$XDG_CACHE_HOME/pyelmo`` or
``~/.cache/pyelmo``), ``PYELMO_OFFLINE=1`` (never touch the network), ``PYELMO_MIRROR``
(a URL that replaces ``ALLENNLP_BASE`` in the registry's URLs, e.g. an internal mirror).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pyelmo.config import ElmoConfig, preset
from pyelmo.errors import PyelmoError, WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modelio.archives import OPTIONS_NAME, WEIGHTS_NAME, ModelFiles, check_structure, unpack_archive
from pyelmo.modelio.downloads import Ledger, check_offline, fetch

#: Where AllenNLP published the released ELMo models (allennlp.org/elmo and AllenNLP's code).
ALLENNLP_BASE = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
#: Where the package ships its own models (package data), one folder per name.
PRETRAINED_DIR = Path(__file__).parents[1] / "pretrained"


@dataclass(frozen=True)
class Shipped:
    """A model inside the package: its folder (``config.json``, ``model.safetensors``, ``vocab.txt``,
    ``MODEL_CARD.md``) and the language of its training text."""

    name: str
    folder: Path
    language: str
    description: str

    @property
    def present(self) -> bool:
        return (self.folder / "model.safetensors").is_file()


#: The shipped models by name; ``--lang`` picks one by its language (:func:`default_model`). A new one:
#: its folder under ``pretrained/`` and one line here.
SHIPPED: dict[str, Shipped] = {s.name: s for s in [
    Shipped("english", PRETRAINED_DIR / "english", "en", "pyelmo: trained by this project, in the package (the default)"),
    Shipped("chinese", PRETRAINED_DIR / "chinese", "zh", "pyelmo: trained by this project on Chinese text (--lang zh)"),
]}


def default_model(lang: str | None = None) -> str:
    """The shipped model for text of language ``lang``: ``chinese`` for ``zh``; ``english`` otherwise (``en``,
    ``auto``, None, and languages without a shipped model)."""
    return shipped_for(lang) or "english"


def shipped_for(lang: str | None) -> str | None:
    """The name of the shipped model of language ``lang``, or None."""
    return next((s.name for s in SHIPPED.values() if s.language == lang), None)


def shipped_folder(name: str = "english") -> Path:
    """A shipped model's folder; one clear line if this installation lacks it."""
    shipped = SHIPPED[name]
    if not shipped.present:
        raise WeightFileError(f"the shipped model {name!r} is not in this installation ({shipped.folder} has no "
                              "model.safetensors): name another model with --model (a folder 'pyelmo train' or "
                              "'pyelmo convert' wrote, or a released one) or --options-file/--weight-file")
    return shipped.folder


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
    language: str | None = None  # of its training text ("en"); None: not known

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
    return Release(name, options_url, weights_url, preset(size), description, source, language="en")


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



def is_url(text: str) -> bool:
    return bool(re.match(r"^(https?|file)://", str(text)))


def is_archive(text: str) -> bool:
    return str(text).lower().endswith(ARCHIVE_SUFFIXES)


def url_folder(url: str) -> str:
    """A cache folder name for a URL: readable stem plus a digest of the whole URL."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:60] or "model"
    return f"url-{stem}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def _local_archive_folder(path: Path) -> str:
    st = path.resolve().stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    return f"archive-{path.name[:60]}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def fetch_release(release: Release, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
    directory = models_dir(root) / release.name
    check_offline({directory / name: url for name, url in release.urls().items()}, release.name)
    pins, sizes = dict(release.sha256), dict(release.sizes)
    files = {name: fetch(url, directory / name, pins.get(name), sizes.get(name), progress)
             for name, url in release.urls().items()}
    model = ModelFiles(files[OPTIONS_NAME], files[WEIGHTS_NAME])
    check_structure(model, [directory / OPTIONS_NAME, directory / WEIGHTS_NAME])
    return model


def fetch_archive(archive: PathLike, root: PathLike | None = None) -> ModelFiles:
    """A local archive (``.zip``, ``.tar.gz``, ``.tgz``, ``.tar``), unpacked once into the cache and verified."""
    archive = Path(archive)
    return unpack_archive(archive, models_dir(root) / _local_archive_folder(archive))


def fetch_url(url: str, root: PathLike | None = None, progress: bool = True) -> ModelFiles:
    """A URL of an archive, or of a weight file whose options sit next to it (``options_url_for``)."""
    directory = models_dir(root) / url_folder(url)
    name = url.rstrip("/").rsplit("/", 1)[-1]
    check_offline({directory / name: url} if is_archive(name) else
                  {directory / WEIGHTS_NAME: url, directory / OPTIONS_NAME: options_url_for(url)}, url)
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


def cached(name: str, root: PathLike | None = None) -> bool:
    """Whether a registered model's files are all in the cache."""
    directory = models_dir(root) / name
    return all((directory / f).is_file() for f in (OPTIONS_NAME, WEIGHTS_NAME))


def listing(root: PathLike | None = None) -> list[dict]:
    """One row per model: the shipped ones present in this installation, then the released ones (name,
    approximate size, dims, source, cached)."""
    rows = [{"name": s.name, "size": f"{(s.folder / 'model.safetensors').stat().st_size / 1e6:.0f} MB",
             "dims": _dims(_shipped_config(s.folder)), "source": s.description, "cached": "yes"}
            for s in SHIPPED.values() if s.present]
    for release in RELEASES.values():
        rows.append({"name": release.name, "size": f"~{release.approx_bytes / 1e6:.0f} MB",
                     "dims": _dims(release.config), "source": f"{release.source}: {release.description}",
                     "cached": "yes" if cached(release.name, root) else "no"})
    return rows


def _dims(config: ElmoConfig | None) -> str:
    if config is None:
        return "?"
    return f"{config.num_layers} x {config.output_dim}"


def _shipped_config(folder: Path) -> ElmoConfig | None:
    from pyelmo.modelio.weights import read_native_config

    try:
        return ElmoConfig.from_options(read_native_config(folder)["options"])
    except PyelmoError:
        return None


__all__ = ["Release", "RELEASES", "Shipped", "SHIPPED", "default_model", "shipped_folder", "register", "fetch_release",
           "fetch_url", "fetch_archive", "listing", "cache_root"]
