"""Adapting a released biLM (``pyelmo train --init-from``): the bilm-tf fixture, a tiny domain corpus and a
short training configuration, shared by the adaptation tests."""

import json
import random
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REF = FIXTURES / "reference" / "bilm-tf"
OPTIONS, WEIGHTS = REF / "options.json", REF / "lm_weights.hdf5"
CONFIG = {"vocab": {"max_size": 200}, "data": {"batch_tokens": 300, "max_length": 12},
          "softmax": {"negatives": 16},
          "train": {"max_steps": 6, "eval_every": 3, "checkpoint_every": 2, "log_every": 1, "threads": 1,
                    "freeze_bilm_steps": 3, "dropout": 0.1},
          "optim": {"name": "adamw", "lr": 0.01}}


def _domain_text(n, seed):
    rng = random.Random(seed)
    words = "the a patient doctor heart blood pressure test shows high low normal and was is".split()
    return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 10))) + " .\n" for _ in range(n))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A tiny medical-domain corpus: train/ and valid/ of one part each."""
    root = tmp_path_factory.mktemp("domain")
    for split, n, seed in (("train", 120, 0), ("valid", 20, 1)):
        (root / split).mkdir()
        (root / split / "part.txt").write_text(_domain_text(n, seed), encoding="utf-8")
    return root


def adapt_config(**train):
    """``CONFIG`` as a fresh dict with ``train`` settings changed."""
    config = json.loads(json.dumps(CONFIG))
    config["train"].update(train)
    return config


def corpus_data(corpus):
    """The training data of the ``corpus`` fixture's folder."""
    from pyelmo.training.data import resolve_data

    return resolve_data(corpus, None, None)
