"""The evaluations ``pyelmo evaluate`` runs, in their order: the one registry of them.

The command's choices and description (:mod:`pyelmo.cli.evaluate`), the runner's tasks
(:mod:`pyelmo.evaluation.run`: what each one runs) and the report (:mod:`pyelmo.evaluation.report`: its
chart, the paper's figures, its section) are read from here. A new evaluation: its entry here, its runner in
``run.py`` and its section in ``report.py`` (both checked against this registry). Imports nothing heavy:
the command line is built from it.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: its ``name`` (the command's choice and ``<name>.json``), what it does (a paragraph of
    the command's description), the title of its bar chart per layer (``chart``; None: no chart) and what
    the paper reports for it (``paper``; None: nothing to compare)."""

    name: str
    description: str
    chart: str | None = None
    paper: str | None = None


EVALUATIONS: dict[str, Evaluation] = {e.name: e for e in [
    Evaluation("wsd", "word sense disambiguation on WordNet 3.0 example sentences (1-nearest-neighbour over "
               "sense-averaged vectors, first-sense fallback), per layer, their average and a mix tuned on a dev "
               "split, beside the first-sense and word2vec baselines",
               chart="WSD on WordNet examples (1-NN)",
               paper="paper (SemCor -> Senseval/SemEval all-words, F1): layer 2 69.0, layer 1 67.4, WordNet first "
                     "sense 65.9"),
    Evaluation("pos", "a linear POS probe on Brown's gold tags (file-level train/test split), per layer, beside "
               "word2vec and a most-frequent-tag baseline",
               chart="POS probe on Brown (linear)",
               paper="paper (PTB WSJ, 45 tags, accuracy): layer 1 97.3, layer 2 96.8"),
    Evaluation("neighbours", "word2vec nearest words vs the biLM's nearest Brown sentences (paper Table 4)"),
]}
#: Every evaluation, in the order they run and the report lists them (``pyelmo evaluate all``).
NAMES = tuple(EVALUATIONS)


def help_lines(width: int = 95) -> str:
    """The command's list of evaluations (and ``all``), one paragraph each."""
    column = max(map(len, (*NAMES, "all"))) + 4
    count = ("one", "two", "three", "four", "five", "six")[len(NAMES) - 1] if len(NAMES) <= 6 else str(len(NAMES))
    rows = [*((e.name, e.description) for e in EVALUATIONS.values()), ("all", f"the {count}")]
    return "\n".join(textwrap.fill(text, width, initial_indent=f"  {name:<{column - 2}}", subsequent_indent=" " * column)
                     for name, text in rows)


__all__ = ["EVALUATIONS", "Evaluation", "NAMES", "help_lines"]
