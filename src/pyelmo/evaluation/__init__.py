"""What the layers know: intrinsic evaluations of a biLM (paper section 5.3, Table 4).

* :mod:`~pyelmo.evaluation.wsd` – word sense disambiguation on WordNet 3.0 example sentences;
* :mod:`~pyelmo.evaluation.pos` – a linear POS probe on the Brown corpus's gold tags;
* :mod:`~pyelmo.evaluation.neighbours` – nearest neighbours of ambiguous words;
* :mod:`~pyelmo.evaluation.static` – the word2vec baseline reported beside every layer;
* :mod:`~pyelmo.evaluation.run` – the end-to-end runner behind ``pyelmo evaluate``;
* :mod:`~pyelmo.evaluation.registry` – the registry of the evaluations it runs.
"""

__all__ = ["EvaluationError"]


def __getattr__(name: str):
    """``EvaluationError``, imported on first use (the command line reads the registry without numpy)."""
    if name == "EvaluationError":
        from pyelmo.evaluation.common import EvaluationError

        return EvaluationError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
