"""A tiny biLM training configuration (a run takes seconds), shared by the tests that train one."""

from __future__ import annotations

from typing import Any


def tiny_train_config(**changes: Any) -> dict:
    """The configuration as a fresh dict; ``section__key=value`` changes one setting."""
    config = {
        "char_cnn": {"filters": [[1, 8], [2, 8]], "n_highway": 1, "embedding_dim": 8},
        "lstm": {"dim": 16, "projection_dim": 8, "n_layers": 1},
        "vocab": {"max_size": 100},
        "data": {"batch_tokens": 200, "max_length": 12},
        "softmax": {"negatives": 8},
        "train": {"max_steps": 2, "eval_every": 0, "checkpoint_every": 1, "log_every": 1, "threads": 1},
    }
    for key, value in changes.items():
        section, name = key.split("__")
        config[section][name] = value
    return config
