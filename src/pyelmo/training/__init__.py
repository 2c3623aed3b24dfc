"""Training a biLM on raw text: configuration, data order, trainer (the model itself: ``pyelmo.lm.model``)."""

from pyelmo.errors import ConfigError
from pyelmo.lm.model import LanguageModel, Perplexity, evaluate, perplexity
from pyelmo.training.checkpoints import CheckpointError
from pyelmo.training.config import TrainConfig, load_config
from pyelmo.training.trainer import TrainResult, train

__all__ = ["CheckpointError", "ConfigError", "LanguageModel", "Perplexity", "TrainConfig", "TrainResult", "evaluate",
           "load_config", "perplexity", "train"]
