"""Training a biLM on raw text: configuration, data order, trainer (the model itself: ``pyelmo.lm.model``)."""

from pyelmo.lm.model import Perplexity, evaluate, load_language_model, perplexity
from pyelmo.training.config import ConfigError, TrainConfig, load_config
from pyelmo.training.trainer import CheckpointError, TrainResult, train

__all__ = ["CheckpointError", "ConfigError", "Perplexity", "TrainConfig", "TrainResult", "evaluate",
           "load_config", "load_language_model", "perplexity", "train"]
