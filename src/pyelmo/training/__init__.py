"""Training a biLM on raw text: configuration, data order, sampled softmax, trainer, evaluation."""

from pyelmo.training.config import ConfigError, TrainConfig, load_config
from pyelmo.training.trainer import (CheckpointError, Perplexity, TrainResult, evaluate, load_language_model,
                                     perplexity, train)

__all__ = ["CheckpointError", "ConfigError", "Perplexity", "TrainConfig", "TrainResult", "evaluate",
           "load_config", "load_language_model", "perplexity", "train"]
