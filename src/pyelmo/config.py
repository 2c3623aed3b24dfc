"""Typed model configuration; converts losslessly to and from the released options JSON.

The one model-config schema: the training configuration (``pyelmo.training.config``) holds
these same classes as its ``char_cnn`` and ``lstm`` sections. Errors are ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from pyelmo.errors import ConfigError

ACTIVATIONS = ("relu", "tanh")


@dataclass(frozen=True)
class CharCNNConfig:
    """The token encoder: character embedding, convolutions, highway layers, projection.

    ``n_lexicon_characters``: the characters are ids of a lexicon of this many (ELMoForManyLangs'
    ``char.dic``; ``lexicon_padding_id`` pads a token's characters), to which the encoder's input module
    maps ``batch_to_ids``' byte ids (:mod:`pyelmo.modelio.lexicon`); 0: the byte ids themselves.
    ``word_dim``: a word embedding of ``n_words`` rows (word ids from the same input module) whose vector
    comes before the CNN's in the projection's input; 0: none.
    """

    filters: tuple[tuple[int, int], ...] = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))
    n_highway: int = 2
    embedding_dim: int = 16
    n_characters: int = 262
    max_characters_per_token: int = 50
    activation: str = "relu"
    n_lexicon_characters: int = 0
    lexicon_padding_id: int = 0
    word_dim: int = 0
    n_words: int = 0

    @property
    def n_filters(self) -> int:
        return sum(n for _, n in self.filters)


@dataclass(frozen=True)
class LSTMConfig:
    """One direction's stack of LSTM-with-projection layers (both directions share the sizes)."""

    dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True


@dataclass(frozen=True)
class ElmoConfig:
    """The whole biLM. ``projection_dim`` is the token-embedding and LSTM output size."""

    char_cnn: CharCNNConfig = field(default_factory=CharCNNConfig)
    lstm: LSTMConfig = field(default_factory=LSTMConfig)

    def __post_init__(self) -> None:
        self.validate()

    @property
    def projection_dim(self) -> int:
        return self.lstm.projection_dim

    @property
    def output_dim(self) -> int:
        """Size of each output layer's vectors: forward and backward concatenated."""
        return 2 * self.lstm.projection_dim

    @property
    def num_layers(self) -> int:
        """Number of output layers: the token layer plus one per LSTM layer."""
        return self.lstm.n_layers + 1

    def validate(self) -> None:
        """Raise ``ConfigError`` for sizes or values that cannot describe a model."""
        c, lstm = self.char_cnn, self.lstm

        def positive(name: str, value: Any) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"config: {name} must be a positive integer, got {value!r}")

        positive("char_cnn.max_characters_per_token", c.max_characters_per_token)  # before the widths use it
        if not c.filters:
            raise ConfigError("config: char_cnn.filters must list at least one [width, n_maps] pair")
        for i, pair in enumerate(c.filters):
            if len(pair) != 2:
                raise ConfigError(f"config: char_cnn.filters[{i}] must be [width, n_maps], got {pair!r}")
            positive(f"char_cnn.filters[{i}] width", pair[0])
            positive(f"char_cnn.filters[{i}] n_maps", pair[1])
            if pair[0] > c.max_characters_per_token:
                raise ConfigError(f"config: filter width {pair[0]} exceeds max_characters_per_token")
        if isinstance(c.n_highway, bool) or not isinstance(c.n_highway, int) or c.n_highway < 0:
            raise ConfigError(f"config: char_cnn.n_highway must be a non-negative integer, got {c.n_highway!r}")
        positive("char_cnn.embedding.dim", c.embedding_dim)
        positive("char_cnn.n_characters", c.n_characters)
        positive("char_cnn.max_characters_per_token", c.max_characters_per_token)
        if c.n_characters not in (261, 262):
            # 261 in bilm-tf training options, 262 (with the padding id) in released ones.
            raise ConfigError(f"config: char_cnn.n_characters must be 261 or 262, got {c.n_characters}")
        if c.max_characters_per_token < 3:
            raise ConfigError("config: char_cnn.max_characters_per_token must be at least 3")
        if c.activation not in ACTIVATIONS:
            raise ConfigError(f"config: char_cnn.activation must be one of {ACTIVATIONS}, got {c.activation!r}")
        _check_lexicon(c)
        positive("lstm.dim", lstm.dim)
        positive("lstm.projection_dim", lstm.projection_dim)
        positive("lstm.n_layers", lstm.n_layers)
        for name in ("cell_clip", "proj_clip"):
            value = getattr(lstm, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):  # NaN too
                raise ConfigError(f"config: lstm.{name} must be a positive number or null, got {value!r}")
        if not isinstance(lstm.use_skip_connections, bool):
            raise ConfigError("config: lstm.use_skip_connections must be true or false")

    # -- released options JSON ------------------------------------------------------------
    def to_options(self) -> dict[str, Any]:
        """The released options-JSON dictionary (bilm-tf / AllenNLP format; a lexicon and a word embedding,
        which bilm-tf has not, as ``char_cnn.lexicon`` and ``char_cnn.word_embedding``, only when there)."""
        c, lstm = self.char_cnn, self.lstm
        options = {
            "lstm": {
                "use_skip_connections": lstm.use_skip_connections,
                "projection_dim": lstm.projection_dim,
                "cell_clip": lstm.cell_clip,
                "proj_clip": lstm.proj_clip,
                "dim": lstm.dim,
                "n_layers": lstm.n_layers,
            },
            "char_cnn": {
                "activation": c.activation,
                "filters": [list(f) for f in c.filters],
                "n_highway": c.n_highway,
                "embedding": {"dim": c.embedding_dim},
                "n_characters": c.n_characters,
                "max_characters_per_token": c.max_characters_per_token,
            },
        }
        if c.n_lexicon_characters:
            options["char_cnn"]["lexicon"] = {"n_characters": c.n_lexicon_characters,
                                              "padding_id": c.lexicon_padding_id}
        if c.word_dim:
            options["char_cnn"]["word_embedding"] = {"dim": c.word_dim, "n_words": c.n_words}
        return options

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "ElmoConfig":
        """Build from a released options-JSON dictionary; raises ``ConfigError`` if malformed."""
        try:
            lstm_o, cnn_o = options["lstm"], options["char_cnn"]
            lstm = LSTMConfig(
                dim=lstm_o["dim"],
                projection_dim=lstm_o["projection_dim"],
                n_layers=lstm_o["n_layers"],
                cell_clip=lstm_o.get("cell_clip"),
                proj_clip=lstm_o.get("proj_clip"),
                use_skip_connections=lstm_o.get("use_skip_connections", False),
            )
            filters = tuple(tuple(f) for f in cnn_o["filters"])
            char_cnn = CharCNNConfig(
                filters=filters,  # type: ignore[arg-type]
                n_highway=cnn_o["n_highway"],
                embedding_dim=cnn_o["embedding"]["dim"],
                n_characters=cnn_o.get("n_characters", 262),
                max_characters_per_token=cnn_o.get("max_characters_per_token", 50),
                activation=cnn_o.get("activation", "relu"),
                n_lexicon_characters=cnn_o.get("lexicon", {}).get("n_characters", 0),
                lexicon_padding_id=cnn_o.get("lexicon", {}).get("padding_id", 0),
                word_dim=cnn_o.get("word_embedding", {}).get("dim", 0),
                n_words=cnn_o.get("word_embedding", {}).get("n_words", 0),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"options: missing or malformed field {exc}") from None
        return cls(char_cnn=char_cnn, lstm=lstm)

    def to_json(self) -> str:
        return json.dumps(self.to_options(), indent=2)

    def replace(self, **changes: Any) -> "ElmoConfig":
        return dataclasses.replace(self, **changes)


def _check_lexicon(c: CharCNNConfig) -> None:
    """The lexicon and word-embedding fields of ``c``: both of a pair set, or neither."""
    for name in ("n_lexicon_characters", "lexicon_padding_id", "word_dim", "n_words"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"config: char_cnn.{name} must be a non-negative integer, got {value!r}")
    if c.lexicon_padding_id and c.lexicon_padding_id >= c.n_lexicon_characters:
        raise ConfigError(f"config: char_cnn.lexicon_padding_id {c.lexicon_padding_id} is not an id of its "
                          f"{c.n_lexicon_characters} lexicon characters")
    if bool(c.word_dim) != bool(c.n_words):
        raise ConfigError("config: char_cnn.word_dim and char_cnn.n_words are both positive (a word embedding) "
                          "or both 0")


def _preset(dim: int, projection_dim: int, n_highway: int) -> ElmoConfig:
    return ElmoConfig(
        char_cnn=CharCNNConfig(n_highway=n_highway),
        lstm=LSTMConfig(dim=dim, projection_dim=projection_dim),
    )


#: Sizes of the released models (random weights; used by tests and benchmarks).
PRESETS: dict[str, ElmoConfig] = {
    "original": _preset(4096, 512, 2),
    "medium": _preset(2048, 256, 1),
    "small": _preset(1024, 128, 1),
}


def preset(name: str) -> ElmoConfig:
    """The configuration of a released model size: ``original``, ``medium`` or ``small``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model size {name!r}; choose one of {sorted(PRESETS)}") from None
