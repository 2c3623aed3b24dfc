"""Task kinds: each kind of task (``classify``, ``tag``, ``qa``) is one :class:`TaskKind` object in its own
module of :mod:`pyelmo.tasks.kinds`, registered by :func:`register` when that package is imported.

A kind says how its data files are read and checked, what its labels are, which model (head and loss) it
trains, how that model's predictions are scored and written, its defaults and its command-line options.
Training, loading and the ``pyelmo task`` command ask the registry (:func:`task_kind`, :func:`kind_names`);
a new kind is one new module in ``tasks/kinds/``.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, Sequence

from pyelmo.errors import InputError
from pyelmo.tasks.data import TRUST_HINT

_KINDS: dict[str, "TaskKind"] = {}
_LOADED: list[bool] = []  # not empty once every module of pyelmo.tasks.kinds was imported


@dataclass(frozen=True)
class KindOption:
    """A 'pyelmo task train' option of some kinds only: ``flag`` sets the TrainOptions field ``field``
    (``type`` None: a switch); given with another kind, it is refused."""

    flag: str
    field: str
    help: str
    type: type | None = None
    metavar: str | None = None


class TaskKind:
    """One kind of task.  The defaults here are those of a kind whose examples carry labels (classify, tag):
    a kind overrides what differs.  Class attributes describe it; methods do its kind-specific work."""

    name: str = ""
    order: int = 100           # where it comes in lists of kinds
    help: str = ""             # its data format in a few words ("classify (TSV)"): --help's choices
    description: str = ""      # its model and data files: its paragraph of 'pyelmo task --help' (after its name)
    predict_help: str = ""     # what 'pyelmo task predict' reads and writes for it (after its name)
    extension: str = ""        # the extension of its data files ('pyelmo task data build' writes it)
    context: str = "line"      # what the biLM reads of an example by default (--bilm-context)
    defaults: dict = {"hidden": 128, "batch_size": 32, "lr": 1e-3, "dropout": 0.2}  # unset TrainOptions
    model_switches: dict = {}  # ModelConfig fields the kind always sets
    options: tuple[KindOption, ...] = ()  # its own options of 'pyelmo task train'

    # -- data --
    def read(self, path: str | os.PathLike, pretokenized: bool = False, labelled: bool = True) -> list:
        """The examples of a data file (``labelled``: with their labels, else labels are ignored)."""
        raise NotImplementedError

    def units(self, examples: Sequence) -> list[str]:
        """Every label occurrence of ``examples`` (an example's label, or each token's tag)."""
        raise NotImplementedError

    unit_names = ("example has the label", "examples have")  # for the one-label and unseen-label messages

    def labels(self, examples: Sequence) -> list[str]:
        """The labels a model of this kind predicts, from its training examples (sorted)."""
        return sorted(set(self.units(examples)))

    def layout_guesses(self, examples: Sequence, path) -> Iterator[tuple[bool, str]]:
        """``(strong, message)`` for each sign that ``path`` is another kind of file."""
        return iter(())

    def check(self, examples: Sequence, path, training: bool = True, trust_format: bool = False) -> None:
        """Stop on the obvious wrong file before any work (a strong guess; a weaker one, or any with
        ``trust_format``, is a warning), and (``training``) on a single label."""
        for strong, message in self.layout_guesses(examples, path):
            if strong and not trust_format:
                raise InputError(f"{message} ({TRUST_HINT})")
            warnings.warn(message, stacklevel=2)
        units = Counter(self.units(examples))
        if training and len(units) == 1:
            raise InputError(f"{path}: every {self.unit_names[0]} {next(iter(units))!r}: a model needs at least "
                             f"two to learn anything")

    def unseen(self, examples: Sequence, labels: Sequence[str]) -> tuple[int, list[str]]:
        """How many label occurrences of ``examples`` are not in ``labels``, and which labels those are."""
        unseen = [u for u in self.units(examples) if u not in set(labels)]
        return len(unseen), sorted(set(unseen))

    def count(self, text: str) -> int:
        """How many examples the text of a data file of this kind holds ('pyelmo task data build's manifest)."""
        raise NotImplementedError

    # -- the model --
    def model(self, config, static_table=None):
        """The task model of ``config`` (a :class:`pyelmo.tasks.model.ModelConfig`)."""
        raise NotImplementedError

    def runner(self, model, labels: list[str], static, cache, saved: dict | None = None):
        """The model with its features, to train, predict and score (:class:`pyelmo.tasks.runner.TaskRunner`)."""
        from pyelmo.tasks.runner import TaskRunner

        return TaskRunner(self, model, labels, static, cache, saved)

    def label_ids(self, examples: Sequence, index: dict[str, int], length: int):
        """The gold label ids of a batch (labels unknown to ``index``: -1)."""
        raise NotImplementedError

    def named(self, prediction, labels: list[str]):
        """A prediction of the model (label ids) in label names."""
        raise NotImplementedError

    # -- scores and outputs --
    def metrics(self, examples: Sequence, predictions: list) -> dict:
        """The kind's metrics (percent) of ``predictions`` on labelled ``examples``."""
        raise NotImplementedError

    def dev_score(self, metrics: dict) -> float:
        """The dev score (percent) early stopping maximises."""
        return metrics["accuracy"]

    def headline(self, metrics: dict) -> str:
        """The name of :meth:`dev_score` in progress lines."""
        return "accuracy"

    def write(self, path, examples: Sequence, predictions: list) -> str:
        """The text of 'pyelmo task predict's OUTPUT for ``examples`` read from ``path``."""
        raise NotImplementedError


def register(kind: TaskKind) -> TaskKind:
    """Add ``kind`` to the registry (a module of :mod:`pyelmo.tasks.kinds` calls it for its kind)."""
    if kind.name in _KINDS and type(_KINDS[kind.name]) is not type(kind):
        raise ValueError(f"task kind {kind.name!r} is registered twice")
    _KINDS[kind.name] = kind
    return kind


def _load_kinds() -> dict[str, TaskKind]:
    if not _LOADED:
        import pyelmo.tasks.kinds as package

        for module in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            importlib.import_module(f"{package.__name__}.{module.name}")
        _LOADED.append(True)
    return _KINDS


def kind_names() -> tuple[str, ...]:
    """The registered kinds' names, by their ``order``, then by name."""
    kinds = _load_kinds()
    return tuple(sorted(kinds, key=lambda k: (kinds[k].order, k)))


def task_kind(name: str) -> TaskKind:
    """The kind called ``name``; an unknown name is one line naming the kinds."""
    kinds = _load_kinds()
    if name not in kinds:
        raise InputError(f"task kind must be one of {', '.join(kind_names())}, got {name!r}")
    return kinds[name]


def build_model(config, static_table=None):
    """The task model of ``config`` (:meth:`TaskKind.model` of its kind)."""
    return task_kind(config.kind).model(config, static_table)
