"""Running the evaluations end to end: model, data, baselines, cache, outputs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pyelmo.evaluation.common import EvaluationError, default_cache_dir, registry_source
from pyelmo.evaluation.registry import EVALUATIONS
from pyelmo.modelio.weights import model_fingerprint
from pyelmo.runtime import precision as precisions
from pyelmo.evaluation.static import Word2VecOptions


@dataclass
class EvalOptions:
    """Everything an evaluation run can be told (the CLI flags map onto these)."""

    out_dir: Path
    model_dir: Path | None = None  # where the word2vec baseline lives by default
    word2vec: Path | None = None
    corpus: Path | None = None
    use_word2vec: bool = True
    word2vec_options: Word2VecOptions = field(default_factory=Word2VecOptions)
    wordnet: Path | None = None
    brown: Path | None = None
    cache_dir: Path | None = field(default_factory=default_cache_dir)  # None: no vector cache
    work_dir: Path = field(default_factory=default_cache_dir)  # WordNet copy and WSD data cache
    batch_size: int = 32
    progress: bool = True
    pos_train_sentences: int | None = 2000
    pos_test_sentences: int | None = 1000
    pos_l2: float = 1e-4
    pos_max_iter: int = 100
    wsd_max_lemmas: int | None = None
    neighbours_k: int = 3
    model_source: str = ""
    precision: str | None = None  # how the biLM's products run (ElmoEmbedder's precision; None: exact)
    quantization: precisions.Quantization | None = None  # int8: which weights are quantized (None: the default)


def run_evaluation(model, tasks: tuple[str, ...], options: EvalOptions) -> dict[str, dict]:
    """Run ``tasks`` on a loaded biLM or an ``ElmoEmbedder`` (which runs its plan; a biLM runs as a planned
    copy under ``options.precision``); write ``<task>.json``, charts and ``report.md``."""
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation.report import write_report, write_task

    unknown = [t for t in tasks if t not in EVALUATIONS]
    if unknown:
        raise EvaluationError(f"unknown evaluation task(s): {', '.join(unknown)}")
    embedder = model if isinstance(model, ElmoEmbedder) else None
    config = embedder.model.config if embedder else model.config
    if config.lstm.n_layers < 1:
        raise EvaluationError("the model has no LSTM layers to evaluate")
    out = Path(options.out_dir)
    if out.exists() and not out.is_dir():
        raise EvaluationError(f"output path is not a folder: {out}")
    out.mkdir(parents=True, exist_ok=True)

    static = None
    if options.use_word2vec:
        from pyelmo.evaluation.static import resolve_word2vec

        static = resolve_word2vec(options.word2vec, options.model_dir, options.corpus, options.word2vec_options,
                                  options.progress)
    fp = embedder.fingerprint if embedder else model_fingerprint(model)
    header = {
        "model": options.model_source or "(in memory)",
        "model fingerprint (sha1 of weights)": fp,
        "layers": f"{config.lstm.n_layers + 1} (0 = context-independent token layer)",
        "vector size": 2 * config.lstm.projection_dim,
        "word2vec": str(static.path) if static is not None and static.path else "not used",
    }
    precision = embedder.options.precision if embedder else options.precision
    exact = precisions.get(precision).exact
    if not exact:
        header["precision"] = precision
    if embedder is None and not exact:
        # the evaluations take one embedder in place of the model (its precision keys their vector caches)
        model = ElmoEmbedder(model, batch_size=options.batch_size, precision=options.precision,
                             quantization=options.quantization)
    common = dict(fingerprint=fp, cache_dir=options.cache_dir, batch_size=options.batch_size,
                  progress=options.progress)
    results: dict[str, dict] = {}
    for task in tasks:
        start = time.monotonic()
        result = _run_task(task, model, static, options, common)
        result["model"] = {"source": header["model"], "fingerprint": fp}
        result["seconds"] = round(time.monotonic() - start, 1)
        write_task(out, result)
        results[task] = result
    write_report(out, header)
    return results


def _run_task(task: str, model, static, options: EvalOptions, common: dict) -> dict:
    """One evaluation's result (``model``: the biLM or an embedder of it; ``static``: the word2vec baseline)."""
    return _RUNNERS[task](model, static, options, common)


def _wsd(model, static, options: EvalOptions, common: dict) -> dict:
    from pyelmo.evaluation.wsd import evaluate_wsd
    from pyelmo.evaluation.wsddata import load_instances

    wn = registry_source("wordnet", options.wordnet)
    instances = load_instances(wn, options.work_dir, options.progress, options.wsd_max_lemmas)
    return evaluate_wsd(model, instances, static, **common)


def _pos(model, static, options: EvalOptions, common: dict) -> dict:
    from pyelmo.evaluation.pos import evaluate_pos

    return evaluate_pos(model, registry_source("brown", options.brown), static,
                        train_sentences=options.pos_train_sentences,
                        test_sentences=options.pos_test_sentences, l2=options.pos_l2,
                        max_iter=options.pos_max_iter, **common)


def _neighbours(model, static, options: EvalOptions, common: dict) -> dict:
    from pyelmo.evaluation.neighbours import evaluate_neighbours

    return evaluate_neighbours(model, registry_source("brown", options.brown), static,
                               k=options.neighbours_k, **common)


#: What each evaluation of the registry (:data:`pyelmo.evaluation.registry.EVALUATIONS`) runs (a test checks
#: that every one has its runner).
_RUNNERS = {"wsd": _wsd, "pos": _pos, "neighbours": _neighbours}


def model_directory(source) -> Path:
    """The folder the word2vec baseline is kept in: a resolved model's folder (a shipped one's, a model
    folder), else the folder of its weight file (released-format files, in the cache when downloaded)."""
    return source.folder if source.folder is not None else Path(source.files.weights).resolve().parent
