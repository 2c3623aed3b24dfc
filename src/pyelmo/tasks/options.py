"""What a task model is trained with: the training options (the command line's switches) and its biLM."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pyelmo.errors import ConfigError, InputError
from pyelmo.runtime.precision import Quantization
from pyelmo.tasks import CONTEXTS, FEATURES


@dataclass
class TrainOptions:
    """How ``train_task`` trains (the command line's switches)."""

    features: str = "static+elmo"
    seed: int = 1
    train_fraction: float = 1.0
    max_minutes: float | None = None
    max_epochs: int = 20
    patience: int = 3
    min_steps: int = 300  # optimizer updates before early stopping may end training
    batch_size: int | None = None  # None: the kind's (TaskKind.defaults, for_kind)
    lr: float | None = None
    hidden: int | None = None
    dropout: float | None = None
    elmo_dropout: float = 0.5
    mix_l2: float = 1e-3
    top_only: bool = False
    elmo_output: bool = False
    pretokenized: bool = False
    trust_format: bool = False  # a data file that looks like another kind is a warning, not an error
    progress: bool = True
    cache_dir: str | None = None  # biLM layers kept on disk across runs (None: in memory only)
    bilm_context: str | None = None  # "line" or "sentence" (None: the kind's default, TaskKind.context)
    max_answer_tokens: int = 30  # qa: the longest answer decoding picks
    precision: str = "float32"  # the biLM's products: a precision task models take (pyelmo.runtime.precision)
    quantization: Quantization | None = None  # int8: which weights are quantized (None: the plan's default)

    def for_kind(self, kind: str) -> "TrainOptions":
        """These options with the kind's defaults for what is unset (``TaskKind.defaults``)."""
        from pyelmo.tasks.kind import task_kind

        defaults = task_kind(kind).defaults
        return replace(self, **{k: v for k, v in defaults.items() if getattr(self, k) is None})

    def plan(self):
        """The execution plan that computes the biLM's layers."""
        return features_plan(self.precision, self.quantization)

    def saved(self) -> dict:
        """These options as a task model's ``config.json`` records them (``quantization`` as its
        ``int8_min_weight``, null for the default; :func:`pyelmo.tasks.saved.load_task` reads it back)."""
        saved = {k: v for k, v in asdict(self).items() if k not in ("progress", "cache_dir", "quantization")}
        return {**saved, "int8_min_weight": None if self.quantization is None else self.quantization.min_weight}

    def check(self) -> None:
        if self.features not in FEATURES:
            raise InputError(f"--features must be one of {', '.join(FEATURES)}, got {self.features!r}")
        if not 0 < self.train_fraction <= 1:
            raise InputError(f"--train-fraction must be in (0, 1], got {self.train_fraction}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise InputError(f"--max-minutes must be positive, got {self.max_minutes}")
        for name in ("max_epochs", "batch_size", "hidden", "max_answer_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1")
        if self.lr is not None and not self.lr >= 0:  # 0: nothing learns (tests use it)
            raise InputError(f"--lr must not be negative, got {self.lr}")
        if self.elmo_output and not self.uses_elmo:
            raise InputError(f"--elmo-output needs ELMo features (--features elmo or static+elmo), "
                             f"got --features {self.features}")
        if self.mix_l2 < 0:
            raise InputError("--mix-l2 must not be negative")
        if self.min_steps < 0:
            raise InputError("--min-steps must not be negative")
        if self.bilm_context is not None and self.bilm_context not in CONTEXTS:
            raise InputError(f"--bilm-context must be one of {', '.join(CONTEXTS)}, got {self.bilm_context!r}")
        if not features_precision(self.precision).exact and not self.uses_elmo:
            raise InputError("--precision sets how the biLM computes its layers: it needs ELMo features")
        self.plan()  # a bad precision or int8 rule fails here, before any work

    @property
    def uses_static(self) -> bool:
        return "static" in self.features

    @property
    def uses_elmo(self) -> bool:
        return "elmo" in self.features


@dataclass
class BiLMSource:
    """Which biLM: a native folder (``model``), released files (``model`` + ``weight_file``), or the shipped one."""

    model: str | None = None
    weight_file: str | None = None

    def resolved(self):
        """Its :class:`~pyelmo.modelio.resolve.ResolvedModel` (what the resolver makes of it)."""
        from pyelmo.modelio.resolve import resolve_model

        return resolve_model(self.model, self.weight_file)

    def absolute(self) -> "BiLMSource":
        """As ``config.json`` records it: a model the resolver reads from a local path (a folder, an archive,
        options + weight files) with its paths made absolute; a name (english, chinese, original) or URL as it is."""
        if self.model is None or self.resolved().kind in ("shipped", "released", "url"):
            return self

        def absolute(p):
            return None if p is None else str(Path(p).resolve())
        return BiLMSource(absolute(self.model), absolute(self.weight_file))

    def describe(self) -> str:
        if self.model is None:
            return "the shipped English model"
        return self.model if self.weight_file is None else f"{self.model} + {self.weight_file}"

    def max_tokens(self) -> int:
        """The sentence length the biLM was trained with, as its native folder records it (else 100,
        as ``pyelmo perplexity`` assumes): the longest piece the sentence context gives it."""
        from pyelmo.errors import PyelmoError

        try:
            return self.resolved().max_length
        except PyelmoError:
            return 100  # loading names the problem

    def load(self):
        from pyelmo.modelio.resolve import load

        return load(self.model, self.weight_file)


def features_precision(name: str | None):
    """The :class:`~pyelmo.runtime.precision.Precision` called ``name`` (or as a file written before spells
    it), one that task models take."""
    from pyelmo.runtime import precision

    try:
        return precision.get(name, tasks=True)
    except ConfigError as exc:
        raise InputError(f"--{exc} for task features") from None


def features_plan(precision: str | None, quantization: Quantization | None = None):
    """The execution plan of the biLM's layers for ``precision`` (:func:`features_precision`) and its
    ``quantization`` rule (``None``: the plan's default)."""
    from pyelmo.runtime.plan import ExecutionPlan

    return ExecutionPlan.for_machine(precision=features_precision(precision), quantization=quantization)


def bilm_fingerprint(bilm) -> str:
    from pyelmo.modelio.weights import model_fingerprint

    return model_fingerprint(bilm)
