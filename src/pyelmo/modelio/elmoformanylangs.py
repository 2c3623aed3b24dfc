"""ELMoForManyLangs (HIT-SCIR) model folders -> pyelmo model folders.

Their folder: ``config.json`` (``config_path`` names the network config JSON), ``char.dic`` and
``word.dic`` (``token<TAB>id`` lexicons), ``token_embedder.pkl`` and ``encoder.pkl`` (state dicts
saved with ``torch.save``; read here with ``torch.load(weights_only=True)``, which unpickles
tensors only). Their network is ELMo's with two differences in the token encoder: characters
are ids in their lexicon (not UTF-8 bytes), and a word embedding (ids in ``word.dic``) is
concatenated before the projection. Their LSTM stack is AllenNLP's (skip connections between
layers, forget bias inside the bias).

The converted folder is a native pyelmo folder (``config.json`` + ``model.safetensors``) with
the two lexicons and an ``elmoformanylangs`` section in ``config.json``; ``pyelmo.load`` builds
a ``LexiconBiLM`` from it, which takes the usual ``batch_to_ids`` input (every API and command
works unchanged) and maps each token to their ids in its token encoder, exactly as their
``create_one_batch`` does (including their ``<bow>``/``<eow>`` order).

Their encoder is stateful: in one ``sents2elmo`` call, each batch after the first starts from
the states an earlier batch (in shuffled order) ended with. pyelmo is stateless, so its vectors
are those of their first batch of a fresh ``Embedder`` (``stateful=True`` carries states too).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from torch import nn

from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import BOS_CHAR, EOS_CHAR, EOW_CHAR
from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.modeling.encoder import Highway
from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modelio.allennlp import highway_from_allennlp, lstm_direction, lstm_from_allennlp

SECTION = "elmoformanylangs"
#: Their default network config (``configs/cnn_50_100_512_4096_sample.json`` and
#: ``cnn_0_100_512_4096_sample.json`` in their package hold the same values), used when a model
#: folder names one of those files without shipping it.
DEFAULT_CONFIG = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {"name": "cnn", "activation": "relu",
                       "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
                       "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50},
}
DEFAULT_CONFIG_NAMES = ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")
#: pyelmo's byte ids for a converted model carry up to 4 bytes per character, so that every
#: token their code keeps (``max_characters_per_token - 2`` characters) arrives whole.
BYTES_PER_CHAR = 4


def read_lexicon(path: Path) -> dict[str, int]:
    """``token<TAB>id`` lines, read as their code reads them (a lone id is the ideographic space)."""
    lexicon: dict[str, int] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise WeightFileError(f"cannot read lexicon {path} ({exc})") from None
    for number, line in enumerate(lines, 1):
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")
        try:
            token, index = fields
            lexicon[token] = int(index)
        except ValueError:
            raise WeightFileError(f"{path}, line {number}: expected 'token<TAB>id', got {line!r}") from None
    return lexicon


class LexiconTokenEncoder(nn.Module):
    """Their ``ConvTokenEmbedder``: characters (ids in their lexicon) through a CNN and highways,
    concatenated after a word embedding, projected. Takes pyelmo's byte ids and maps each token."""

    def __init__(self, chars: dict[str, int], words: dict[str, int] | None, n_chars: int, n_words: int,
                 char_dim: int, word_dim: int, filters: list[list[int]], n_highway: int, activation: str,
                 max_chars: int, projection_dim: int) -> None:
        super().__init__()
        self.chars, self.words, self.max_chars = chars, words, max_chars
        for special in ("<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>"):
            if special not in chars:
                raise WeightFileError(f"character lexicon lacks {special!r}")
        if words is not None and not {"<oov>", "<bos>", "<eos>"} <= words.keys():
            raise WeightFileError("word lexicon lacks '<oov>', '<bos>' or '<eos>'")
        self.char_embedding = nn.Embedding(n_chars, char_dim)
        self.word_embedding = nn.Embedding(n_words, word_dim) if words is not None else None
        self.convolutions = nn.ModuleList(nn.Conv1d(char_dim, n, kernel_size=w) for w, n in filters)
        self.activation = torch.relu if activation == "relu" else torch.tanh
        n_filters = sum(n for _, n in filters)
        self.highways = nn.ModuleList(Highway(n_filters) for _ in range(n_highway))
        self.projection = nn.Linear(n_filters + (word_dim if words is not None else 0), projection_dim)

    def token_of(self, row: list[int]) -> str:
        """The token behind one row of pyelmo byte ids ('<bos>'/'<eos>' for the sentence markers)."""
        if row[1] == BOS_CHAR + 1 and row[2] == EOW_CHAR + 1:
            return "<bos>"
        if row[1] == EOS_CHAR + 1 and row[2] == EOW_CHAR + 1:
            return "<eos>"
        end = row.index(EOW_CHAR + 1) if EOW_CHAR + 1 in row else len(row)
        data = bytes(i - 1 for i in row[1:end])
        try:
            token = data.decode("utf-8", errors="surrogatepass")
        except UnicodeDecodeError:  # cut inside a character, beyond what is kept below
            token = data.decode("utf-8", errors="replace")
        return token[: self.max_chars - 2]

    def lexicon_ids(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Their character ids ``(R, max_chars)`` and word ids ``(R,)`` for rows of byte ids."""
        c = self.chars
        # their create_one_batch looks up '<eow>' for the first position and '<bow>' for the last
        first, last, oov, pad = c["<eow>"], c["<bow>"], c["<oov>"], c["<pad>"]
        char_ids = torch.full((len(rows), self.max_chars), pad, dtype=torch.long)
        word_ids = []
        for r, row in enumerate(rows.tolist()):
            if not any(row):  # a padding position
                word_ids.append(0)
                continue
            token = self.token_of(row)
            ids = [c[token]] if token in ("<bos>", "<eos>") else [c.get(ch, oov) for ch in token]
            char_ids[r, : len(ids) + 2] = torch.tensor([first, *ids, last])
            if self.words is not None:
                word_ids.append(self.words.get(token, self.words["<oov>"]))
        return char_ids, (torch.tensor(word_ids, dtype=torch.long) if self.words is not None else None)

    def forward(self, char_ids: torch.Tensor, products=None, fused_conv: bool = False) -> torch.Tensor:
        """``char_ids (..., max_chars)`` -> token vectors; takes (and ignores) the execution
        backend's ``products``/``fused_conv`` so both backends run it unchanged."""
        shape = char_ids.shape[:-1]
        ids, words = self.lexicon_ids(char_ids.reshape(-1, char_ids.shape[-1]).cpu())
        device = self.projection.weight.device
        chars = self.char_embedding(ids.to(device)).transpose(1, 2)
        x = torch.cat([self.activation(conv(chars).max(dim=-1).values) for conv in self.convolutions], dim=-1)
        for highway in self.highways:
            x = highway(x)
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(words.to(device)), x], dim=-1)
        return self.projection(x).reshape(*shape, self.projection.out_features)


class LexiconBiLM(BiLM):
    """pyelmo's biLM with their token encoder (the LSTM stack is pyelmo's own)."""

    def __init__(self, config: ElmoConfig, section: dict, chars: dict[str, int], words: dict[str, int] | None,
                 dropout: float = 0.0) -> None:
        super().__init__(config, dropout=dropout)
        self.section = section
        self.token_encoder = LexiconTokenEncoder(
            chars, words, section["n_chars"], section["n_words"], section["char_dim"], section["word_dim"],
            section["filters"], section["n_highway"], section["activation"], section["max_characters_per_token"],
            config.lstm.projection_dim)


    def with_dropout(self, dropout: float) -> "LexiconBiLM":
        """A copy of this biLM (its lexicons and weights) that trains with ``dropout``."""
        e = self.token_encoder
        copy = LexiconBiLM(self.config, self.section, e.chars, e.words, dropout=dropout)
        copy.load_state_dict(self.state_dict())
        return copy

    def save_lexicons(self, directory: PathLike) -> dict:
        """Write the lexicons into ``directory`` (atomically) as their files; returns the ``config.json`` section."""
        from pyelmo.fileio import write_text_atomic

        e = self.token_encoder
        for name, lexicon in ((self.section["char_lexicon"], e.chars), (self.section.get("word_lexicon"), e.words)):
            if name and lexicon is not None:  # the ideographic space is a lone id, as their files write it
                lines = (f"{t}\t{i}" if t != "\u3000" else str(i) for t, i in lexicon.items())
                write_text_atomic(Path(directory) / name, "".join(line + "\n" for line in lines))
        return {SECTION: self.section}


def _network_config(src: Path) -> dict:
    top = _read_json(src / "config.json")
    name = str(top.get("config_path", ""))
    for candidate in (src / name, src / Path(name).name):
        if name and candidate.is_file():
            return _read_json(candidate)
    if Path(name).name in DEFAULT_CONFIG_NAMES:
        return DEFAULT_CONFIG
    raise WeightFileError(f"{src / 'config.json'}: its config_path {name!r} is not in {src}")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WeightFileError(f"{path} not found (an ELMoForManyLangs folder has config.json, char.dic, "
                              "token_embedder.pkl and encoder.pkl)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WeightFileError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise WeightFileError(f"{path} must hold a JSON object")
    return data


def _load_state(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise WeightFileError(f"{path} not found")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001  (weights_only refuses anything but tensors, in several ways)
        raise WeightFileError(f"{path} is not a tensor-only state dict ({str(exc).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise WeightFileError(f"{path} does not hold a state dict of tensors")
    return state


def _encoder_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if key == "char_emb_layer.embedding.weight":
            out["token_encoder.char_embedding.weight"] = value
        elif key == "word_emb_layer.embedding.weight":
            out["token_encoder.word_embedding.weight"] = value
        elif m := re.fullmatch(r"highways\._layers\.(\d+)\.(weight|bias)", key):
            out.update(highway_from_allennlp(value, f"token_encoder.highways.{m.group(1)}", m.group(2)))
        elif re.fullmatch(r"(convolutions\.\d+|projection)\.(weight|bias)", key):
            out[f"token_encoder.{key}"] = value
        else:
            raise WeightFileError(f"token_embedder.pkl: unexpected tensor {key!r}")
    return out


def _lstm_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        m = re.fullmatch(r"(forward|backward)_layer_(\d+)\.(\w+)\.(weight|bias)", key)
        if not m:
            raise WeightFileError(f"encoder.pkl: unexpected tensor {key!r}")
        direction, layer, part, kind = m.groups()
        out.update(lstm_from_allennlp(part, kind, value, f"{lstm_direction(direction)}.{layer}"))
    return out


def convert(src: PathLike, out: PathLike, language: str | None = None) -> Path:
    """Convert their model folder ``src`` into a pyelmo model folder ``out`` (which must not exist).

    ``language``: the language of the model's training text (``"zh"``), recorded as ``"language"`` in
    ``config.json`` (their folders do not say it), so text of another language warns
    (:class:`pyelmo.embedding.embedder.LanguageWarning`); None: not recorded.
    """
    from pyelmo.errors import InputError
    from pyelmo.modelio.weights import save_pretrained

    from pyelmo.text.tokenize import is_language_code

    if language is not None and not is_language_code(language):
        raise InputError(f"the language must be a code such as zh or en, got {language!r}")
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise WeightFileError(f"model folder not found: {src}")
    if out.exists():
        raise WeightFileError(f"output folder already exists: {out}")
    network = _network_config(src)
    enc, tok = network.get("encoder", {}), network.get("token_embedder", {})
    if enc.get("name", "").lower() != "elmo" or tok.get("name", "").lower() != "cnn":
        raise WeightFileError(f"{src}: only the 'cnn' token embedder with the 'elmo' encoder converts "
                              f"(this one has {tok.get('name')!r} and {enc.get('name')!r})")
    if not tok.get("char_dim"):
        raise WeightFileError(f"{src}: a model without characters (char_dim 0) does not convert")
    chars = read_lexicon(src / "char.dic")
    words = read_lexicon(src / "word.dic") if tok.get("word_dim") else None
    tensors = {**_encoder_tensors(_load_state(src / "token_embedder.pkl")),
               **_lstm_tensors(_load_state(src / "encoder.pkl"))}
    try:
        max_chars = int(tok.get("max_characters_per_token", 50))
        config = ElmoConfig(
            char_cnn=CharCNNConfig(filters=tuple(tuple(f) for f in tok["filters"]), n_highway=tok["n_highway"],
                                   embedding_dim=tok["char_dim"], activation=tok.get("activation", "relu"),
                                   max_characters_per_token=BYTES_PER_CHAR * (max_chars - 2) + 2),
            lstm=LSTMConfig(dim=enc["dim"], projection_dim=enc["projection_dim"], n_layers=enc["n_layers"],
                            cell_clip=enc.get("cell_clip"), proj_clip=enc.get("proj_clip"),
                            use_skip_connections=True))
        section = {"char_lexicon": "char.dic", "word_lexicon": "word.dic" if words is not None else None,
                   "n_chars": tensors["token_encoder.char_embedding.weight"].shape[0],
                   "n_words": tensors["token_encoder.word_embedding.weight"].shape[0] if words is not None else 0,
                   "char_dim": tok["char_dim"], "word_dim": tok.get("word_dim") or 0, "filters": tok["filters"],
                   "n_highway": tok["n_highway"], "activation": tok.get("activation", "relu"),
                   "max_characters_per_token": max_chars}
    except (KeyError, TypeError, ValueError) as exc:
        raise WeightFileError(f"{src}: network config lacks or mangles {exc}") from None
    model = _build(config, section, chars, words, tensors, src)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_pretrained(model, tmp, metadata={**({"language": language} if language else {}), SECTION: section})
        shutil.copyfile(src / "char.dic", tmp / "char.dic")
        if words is not None:
            shutil.copyfile(src / "word.dic", tmp / "word.dic")
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _build(config: ElmoConfig, section: dict, chars: dict[str, int], words: dict[str, int] | None,
           tensors: dict[str, torch.Tensor], origin: PathLike, dropout: float = 0.0) -> LexiconBiLM:
    model = LexiconBiLM(config, section, chars, words, dropout=dropout)
    expected = model.state_dict()
    for name, target in expected.items():
        if name not in tensors:
            raise WeightFileError(f"{origin}: weights lack tensor {name!r}")
        if tuple(tensors[name].shape) != tuple(target.shape):
            raise WeightFileError(f"{origin}: tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                                  f"the config implies {tuple(target.shape)}")
    model.load_state_dict({k: tensors[k].float() for k in expected}, strict=True)
    return model.eval()


def is_converted(config: dict) -> bool:
    return isinstance(config.get(SECTION), dict)


def load_converted(directory: PathLike, dropout: float = 0.0, native: dict | None = None,
                   tensors: dict[str, torch.Tensor] | None = None) -> LexiconBiLM:
    """Load a folder written by ``convert`` (or continued from one by ``pyelmo train``); ``dropout``: for
    training; ``native``, ``tensors``: its ``config.json`` and weights when the caller has read them."""
    from pyelmo.modelio.weights import load_native_tensors, read_native_config

    directory = Path(directory)
    native = native if native is not None else read_native_config(directory)
    section = native[SECTION]
    chars = read_lexicon(directory / section["char_lexicon"])
    words = read_lexicon(directory / section["word_lexicon"]) if section.get("word_lexicon") else None
    config = ElmoConfig.from_options(native["options"])
    tensors = tensors if tensors is not None else load_native_tensors(directory)
    return _build(config, section, chars, words, tensors, directory, dropout)
