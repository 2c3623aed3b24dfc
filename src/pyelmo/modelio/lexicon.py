"""ELMoForManyLangs' lexicons as the input of pyelmo's token encoder: each token's characters and word by
their ids in ``char.dic`` and ``word.dic`` (:mod:`pyelmo.modelio.elmoformanylangs` converts their folders).

Mapping pyelmo's byte ids to their ids is input preparation: :class:`LexiconIds` is the token encoder's
``token_ids`` module (:class:`pyelmo.modeling.encoder.TokenEncoder`), whose character embedding, CNN and word
embedding the config sizes (``char_cnn.n_lexicon_characters``, ``char_cnn.word_dim``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from pyelmo.config import CharCNNConfig
from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modeling.characters import BOS_CHAR, EOS_CHAR, EOW_CHAR

#: The ``config.json`` section of a converted folder.
SECTION = "elmoformanylangs"
#: The lexicons' file names in a converted folder.
CHAR_LEXICON, WORD_LEXICON = "char.dic", "word.dic"


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


class LexiconIds(nn.Module):
    """Rows of pyelmo's byte ids ``(R, C)`` -> their character ids ``(R, max_chars)`` and word ids ``(R,)``
    (None without a word lexicon), exactly as their ``create_one_batch`` makes them (a module without
    weights: the token encoder's ``token_ids``)."""

    def __init__(self, chars: dict[str, int], words: dict[str, int] | None, max_chars: int) -> None:
        super().__init__()
        for special in ("<bow>", "<eow>", "<oov>", "<pad>", "<bos>", "<eos>"):
            if special not in chars:
                raise WeightFileError(f"character lexicon lacks {special!r}")
        if words is not None and not {"<oov>", "<bos>", "<eos>"} <= words.keys():
            raise WeightFileError("word lexicon lacks '<oov>', '<bos>' or '<eos>'")
        self.chars, self.words, self.max_chars = chars, words, max_chars

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

    def forward(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
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
        words = torch.tensor(word_ids, dtype=torch.long, device=rows.device) if self.words is not None else None
        return char_ids.to(rows.device), words


def lexicon_ids(bilm: nn.Module) -> LexiconIds | None:
    """The lexicons ``bilm``'s token encoder maps tokens by (a model converted from ELMoForManyLangs), or None."""
    token_ids = getattr(bilm.token_encoder, "token_ids", None)
    return token_ids if isinstance(token_ids, LexiconIds) else None


def save_lexicons(bilm: nn.Module, directory: PathLike) -> dict:
    """Write the lexicons of ``bilm`` (if it has them: :func:`lexicon_ids`) into ``directory`` (atomically) as
    their files; returns the ``config.json`` section that names them (``{}`` for a model without lexicons)."""
    from pyelmo.fileio import write_text_atomic

    ids = lexicon_ids(bilm)
    if ids is None:
        return {}
    for name, lexicon in ((CHAR_LEXICON, ids.chars), (WORD_LEXICON, ids.words)):
        if lexicon is not None:  # the ideographic space is a lone id, as their files write it
            lines = (f"{t}\t{i}" if t != "\u3000" else str(i) for t, i in lexicon.items())
            write_text_atomic(Path(directory) / name, "".join(line + "\n" for line in lines))
    return {SECTION: section(bilm.config.char_cnn, ids.words is not None, ids.max_chars)}


def section(c: CharCNNConfig, words: bool, max_chars: int) -> dict:
    """The ``config.json`` section of a converted folder (``c``: its ``CharCNNConfig``; ``words``: whether it
    has a word lexicon; ``max_chars``: their characters per token)."""
    return {"char_lexicon": CHAR_LEXICON, "word_lexicon": WORD_LEXICON if words else None,
            "n_chars": c.n_lexicon_characters, "n_words": c.n_words, "char_dim": c.embedding_dim,
            "word_dim": c.word_dim, "filters": [list(f) for f in c.filters], "n_highway": c.n_highway,
            "activation": c.activation, "max_characters_per_token": max_chars}
