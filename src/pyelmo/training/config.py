"""Training configuration: TOML or JSON files, ``--set section.field=value`` overrides, strict checks.

Sections: ``char_cnn`` and ``lstm`` (the model, as in the released options; ``preset =
"small"`` starts from a released size), ``vocab``, ``data``, ``softmax``, ``optim``,
``train``. Unknown fields, wrong types and out-of-range values raise ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig, preset
from pyelmo.errors import ConfigError, PyelmoError
from pyelmo.text.tokenize import is_language_code

__all__ = ["TrainConfig", "config_from_dict", "load_config", "read_config_file"]

#: ``train.products``: ``torch`` products with one convolution per width, or every convolution width in
#: one product (docs/TRAINING.md). The LSTM runs the one packed time loop in both.
PRODUCTS = ("plain", "fused")


@dataclass
class VocabSection:
    path: str = ""  # an existing vocab.txt; empty: built from the training data
    max_size: int = 50000
    min_count: int = 1


@dataclass
class DataSection:
    batch_tokens: int = 4096  # padded token positions (incl. <S>, </S>) per global batch
    max_length: int = 100  # longer sentences are split into chunks of at most this many tokens
    min_rows: int = 1  # a batch holds at least this many sentences
    pool_batches: int = 50  # sort pools of this many batches by length (bucketing)
    max_valid_sentences: int = 0  # 0: the whole validation set
    language: str = ""  # of the training text ("en", "zh"): the model's config.json "language"; "": not recorded


@dataclass
class SoftmaxSection:
    negatives: int = 8192  # unique log-uniform samples per batch; 0: full softmax for training
    init_std: float = 0.0  # 0: 1 / sqrt(projection_dim)
    new_rows: str = "zero"  # --init-from, a new softmax's rows: zero | layer0 (docs/TRAINING.md)


@dataclass
class OptimSection:
    name: str = "adagrad"  # adagrad | adamw
    lr: float = 0.2
    initial_accumulator: float = 1.0  # Adagrad
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW
    weight_decay: float = 0.0  # AdamW
    eps: float = 1e-8  # AdamW
    warmup_steps: int = 0  # linear learning-rate warm-up (again after train.freeze_bilm_steps)
    clip_norm: float = 10.0  # global gradient-norm clip; 0 disables


@dataclass
class TrainSection:
    seed: int = 0
    max_steps: int = 0  # 0: no step limit
    max_epochs: int = 10
    max_minutes: float = 0.0  # 0: no time limit (stops between steps, then saves)
    dropout: float = 0.1  # on each LSTM layer's input and on the top layer's output
    bf16: bool = False  # bfloat16 autocast
    products: str = "fused"  # plain | fused: how the training step multiplies (docs/TRAINING.md)
    log_every: int = 10
    eval_every: int = 500  # steps between validation perplexities; 0: only at the end
    checkpoint_every: int = 500  # 0: only at the end
    patience: int = 0  # stop after this many validations without improvement; 0: never
    # --init-from: the first steps train the softmax alone; unset: 200 when the softmax is new, else 0
    freeze_bilm_steps: int | None = None
    keep_best: bool = True  # the final model is the best validated one
    threads: int = 0  # torch intra-op threads; 0: torch's default
    device: str = "auto"  # auto (cuda if available) | cpu | cuda


@dataclass
class TrainConfig:
    """Everything a training run needs besides the data."""

    preset: str = ""
    char_cnn: CharCNNConfig = field(default_factory=CharCNNConfig)  # the model: pyelmo.config's schema
    lstm: LSTMConfig = field(default_factory=LSTMConfig)
    vocab: VocabSection = field(default_factory=VocabSection)
    data: DataSection = field(default_factory=DataSection)
    softmax: SoftmaxSection = field(default_factory=SoftmaxSection)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)

    def model_config(self) -> ElmoConfig:
        """The biLM's ``ElmoConfig`` (validated; ``ConfigError`` if it cannot describe a model)."""
        return ElmoConfig(char_cnn=self.char_cnn, lstm=self.lstm)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- parsing -------------------------------------------------------------------------------
def _check_value(name: str, value: Any, hint: Any) -> Any:
    """``value`` converted to the field type ``hint``, or ``ConfigError``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        if value is None:
            return None
        return _check_value(name, value, next(a for a in args if a is not type(None)))
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        if origin is tuple and args[-1] is not Ellipsis:  # a fixed-length tuple, e.g. a [width, n_maps] pair
            if len(value) != len(args):
                raise ConfigError(f"{name} must hold {len(args)} values, got {value!r}")
            return tuple(_check_value(f"{name}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args)))
        items = [_check_value(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    raise ConfigError(f"{name}: unsupported type")  # pragma: no cover


def _apply(config: TrainConfig, data: dict[str, Any], where: str) -> None:
    hints = typing.get_type_hints(TrainConfig)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the configuration must be a table/object")
    if "preset" in data:
        config.preset = _check_value("preset", data["preset"], str)
        if config.preset:
            _apply_preset(config, config.preset)
    for key, value in data.items():
        if key == "preset":
            continue
        if key not in hints:
            raise ConfigError(f"{where}: unknown section {key!r}; known: {', '.join(sorted(hints))}")
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key!r} must be a table/object of fields")
        section = getattr(config, key)
        section_hints = typing.get_type_hints(type(section))
        changes = {}
        for name, v in value.items():
            if name not in section_hints:
                raise ConfigError(f"{where}: unknown field '{key}.{name}'; known: {', '.join(section_hints)}")
            changes[name] = _check_value(f"{key}.{name}", v, section_hints[name])
        setattr(config, key, dataclasses.replace(section, **changes))  # the model sections are frozen


def _apply_preset(config: TrainConfig, name: str) -> None:
    try:
        p = preset(name)
    except PyelmoError as exc:
        raise ConfigError(str(exc)) from None
    config.char_cnn, config.lstm = p.char_cnn, p.lstm


def parse_override(item: str) -> tuple[str, Any]:
    """``"section.field=value"`` -> ``(key, value)``; the value is read as TOML (``null`` is None), else as a string."""
    if "=" not in item:
        raise ConfigError(f"--set expects section.field=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip()
    if raw.strip() in ("null", "none", "None"):
        return key, None
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def overrides_to_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in items:
        if key == "preset":
            nested["preset"] = value
            continue
        parts = key.split(".")
        if len(parts) != 2 or not all(parts):
            raise ConfigError(f"override key must be section.field (e.g. lstm.dim), got {key!r}")
        nested.setdefault(parts[0], {})[parts[1]] = value
    return nested


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file's contents: TOML (``.toml``) or JSON (anything else)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        if path.suffix.lower() == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults <- ``base`` dict <- file at ``path`` <- ``overrides`` (``section.field=value``), validated."""
    config = TrainConfig()
    if base is not None:
        _apply(config, base, "saved config")
    if path is not None:
        _apply(config, read_config_file(path), str(path))
    if overrides:
        _apply(config, overrides_to_dict([parse_override(o) for o in overrides]), "--set")
    validate(config)
    return config


def config_from_dict(data: dict[str, Any]) -> TrainConfig:
    config = TrainConfig()
    _apply(config, data, "config")
    validate(config)
    return config


def validate(config: TrainConfig) -> None:
    """Range checks beyond types; raises ``ConfigError``."""
    config.model_config()

    def check(name: str, ok: bool, what: str) -> None:
        if not ok:
            section, key = name.split(".")
            value = getattr(getattr(config, section), key)
            raise ConfigError(f"{name} must be {what}, got {value!r}")

    c = config
    check("char_cnn.n_characters", c.char_cnn.n_characters == 262, "262 (training uses the padding id)")
    lexicons = "0 (a model of lexicon ids makes no new model: --init-from a converted ELMoForManyLangs folder)"
    check("char_cnn.n_lexicon_characters", c.char_cnn.n_lexicon_characters == 0, lexicons)
    check("char_cnn.word_dim", c.char_cnn.word_dim == 0, lexicons)
    check("vocab.max_size", c.vocab.max_size >= 4, "at least 4")
    check("vocab.min_count", c.vocab.min_count >= 1, "at least 1")
    check("data.batch_tokens", c.data.batch_tokens >= 3, "at least 3")
    check("data.max_length", c.data.max_length >= 1, "at least 1")
    check("data.min_rows", c.data.min_rows >= 1, "at least 1")
    check("data.pool_batches", c.data.pool_batches >= 1, "at least 1")
    check("data.max_valid_sentences", c.data.max_valid_sentences >= 0, "non-negative")
    check("data.language", c.data.language == "" or is_language_code(c.data.language),
          "a language code such as 'en' or 'zh' (or empty)")
    check("softmax.negatives", c.softmax.negatives >= 0, "non-negative")
    check("softmax.init_std", c.softmax.init_std >= 0, "non-negative")
    check("softmax.new_rows", c.softmax.new_rows in ("zero", "layer0"), "'zero' or 'layer0'")
    check("optim.name", c.optim.name in ("adagrad", "adamw"), "'adagrad' or 'adamw'")
    check("optim.lr", c.optim.lr > 0, "positive")
    check("optim.initial_accumulator", c.optim.initial_accumulator >= 0, "non-negative")
    check("optim.betas", len(c.optim.betas) == 2 and all(0 <= b < 1 for b in c.optim.betas), "two numbers in [0, 1)")
    check("optim.weight_decay", c.optim.weight_decay >= 0, "non-negative")
    check("optim.eps", c.optim.eps > 0, "positive")
    check("optim.warmup_steps", c.optim.warmup_steps >= 0, "non-negative")
    check("optim.clip_norm", c.optim.clip_norm >= 0, "non-negative")
    check("train.max_steps", c.train.max_steps >= 0, "non-negative")
    check("train.max_epochs", c.train.max_epochs >= 1, "at least 1")
    check("train.max_minutes", c.train.max_minutes >= 0, "non-negative")
    check("train.dropout", 0 <= c.train.dropout < 1, "in [0, 1)")
    check("train.log_every", c.train.log_every >= 1, "at least 1")
    check("train.eval_every", c.train.eval_every >= 0, "non-negative")
    check("train.checkpoint_every", c.train.checkpoint_every >= 0, "non-negative")
    check("train.patience", c.train.patience >= 0, "non-negative")
    check("train.threads", c.train.threads >= 0, "non-negative")
    check("train.freeze_bilm_steps", c.train.freeze_bilm_steps is None or c.train.freeze_bilm_steps >= 0,
          "non-negative")
    check("train.products", c.train.products in PRODUCTS, "one of " + ", ".join(map(repr, PRODUCTS)))
    check("train.device", c.train.device in ("auto", "cpu", "cuda"), "'auto', 'cpu' or 'cuda'")
