"""ELMoForManyLangs (HIT-SCIR) model folders -> pyelmo model folders.

Their folder: ``config.json`` (``config_path`` names the network config JSON), ``char.dic`` and
``word.dic`` (``token<TAB>id`` lexicons), ``token_embedder.pkl`` and ``encoder.pkl`` (state dicts
saved with ``torch.save``; read here with ``torch.load(weights_only=True)``, which unpickles
tensors only). Their network is ELMo's with two differences in the token encoder: characters
are ids in their lexicon (not UTF-8 bytes), and a word embedding (ids in ``word.dic``) is
concatenated before the projection. Their LSTM stack is AllenNLP's (skip connections between
layers, forget bias inside the bias).

The converted folder is a native pyelmo folder (``config.json`` + ``model.safetensors``) with
the two lexicons and an ``elmoformanylangs`` section in ``config.json``; its options size the
character embedding by their lexicon (``char_cnn.lexicon``) and the word embedding
(``char_cnn.word_embedding``). ``pyelmo.load`` builds pyelmo's ``BiLM`` from it, whose token
encoder takes the usual ``batch_to_ids`` input (every API and command works unchanged, planned
like any model) through :class:`pyelmo.modelio.lexicon.LexiconIds`, which maps each token to their
ids exactly as their ``create_one_batch`` does (including their ``<bow>``/``<eow>`` order).

Their encoder is stateful: in one ``sents2elmo`` call, each batch after the first starts from
the states an earlier batch (in shuffled order) ended with. pyelmo is stateless, so its vectors
are those of their first batch of a fresh ``Embedder`` (``stateful=True`` carries states too).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import torch

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modelio.allennlp import highway_from_allennlp, lstm_direction, lstm_from_allennlp
from pyelmo.modelio.lexicon import CHAR_LEXICON, SECTION, WORD_LEXICON, LexiconIds, read_lexicon, section
from pyelmo.modeling.bilm import BiLM

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
    chars = read_lexicon(src / CHAR_LEXICON)
    words = read_lexicon(src / WORD_LEXICON) if tok.get("word_dim") else None
    tensors = {**_encoder_tensors(_load_state(src / "token_embedder.pkl")),
               **_lstm_tensors(_load_state(src / "encoder.pkl"))}
    try:
        max_chars = int(tok.get("max_characters_per_token", 50))
        config = ElmoConfig(
            char_cnn=CharCNNConfig(filters=tuple(tuple(f) for f in tok["filters"]), n_highway=tok["n_highway"],
                                   embedding_dim=tok["char_dim"], activation=tok.get("activation", "relu"),
                                   max_characters_per_token=BYTES_PER_CHAR * (max_chars - 2) + 2,
                                   **_lexicon_sizes(tensors, chars, tok.get("word_dim") or 0, words is not None)),
            lstm=LSTMConfig(dim=enc["dim"], projection_dim=enc["projection_dim"], n_layers=enc["n_layers"],
                            cell_clip=enc.get("cell_clip"), proj_clip=enc.get("proj_clip"),
                            use_skip_connections=True))
    except (KeyError, TypeError, ValueError) as exc:
        raise WeightFileError(f"{src}: network config lacks or mangles {exc}") from None
    model = _build(config, LexiconIds(chars, words, max_chars), tensors, src)
    metadata = {**({"language": language} if language else {}),
                SECTION: section(config.char_cnn, words is not None, max_chars)}
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_pretrained(model, tmp, metadata=metadata)
        shutil.copyfile(src / CHAR_LEXICON, tmp / CHAR_LEXICON)
        if words is not None:
            shutil.copyfile(src / WORD_LEXICON, tmp / WORD_LEXICON)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _lexicon_sizes(tensors: dict[str, torch.Tensor], chars: dict[str, int], word_dim: int, words: bool) -> dict:
    """The ``CharCNNConfig`` fields of their lexicons: the character embedding's rows and padding id, the word
    embedding's size and rows."""
    n_words = tensors["token_encoder.word_embedding.weight"].shape[0] if words else 0
    return {"n_lexicon_characters": tensors["token_encoder.char_embedding.weight"].shape[0],
            "lexicon_padding_id": chars.get("<pad>", 0), "word_dim": word_dim if words else 0, "n_words": n_words}


def _build(config: ElmoConfig, token_ids: LexiconIds, tensors: dict[str, torch.Tensor], origin: PathLike,
           dropout: float = 0.0) -> BiLM:
    model = BiLM(config, dropout=dropout, token_ids=token_ids)
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
                   tensors: dict[str, torch.Tensor] | None = None) -> BiLM:
    """Load a folder written by ``convert`` (or continued from one by ``pyelmo train``); ``dropout``: for
    training; ``native``, ``tensors``: its ``config.json`` and weights when the caller has read them."""
    from pyelmo.modelio.weights import load_native_tensors, read_native_config

    directory = Path(directory)
    native = native if native is not None else read_native_config(directory)
    lexicons = native[SECTION]
    chars = read_lexicon(directory / lexicons["char_lexicon"])
    words = read_lexicon(directory / lexicons["word_lexicon"]) if lexicons.get("word_lexicon") else None
    config = ElmoConfig.from_options(native["options"])
    if not config.char_cnn.n_lexicon_characters:  # converted before the options said it: from the section
        sizes = {"n_lexicon_characters": lexicons["n_chars"], "lexicon_padding_id": chars.get("<pad>", 0),
                 "word_dim": lexicons["word_dim"] if words is not None else 0,
                 "n_words": lexicons["n_words"] if words is not None else 0}
        config = config.replace(char_cnn=dataclasses.replace(config.char_cnn, **sizes))
    tensors = tensors if tensors is not None else load_native_tensors(directory)
    return _build(config, LexiconIds(chars, words, lexicons["max_characters_per_token"]), tensors, directory, dropout)
