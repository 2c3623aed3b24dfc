"""ELMoForManyLangs' token encoder on pyelmo's biLM: characters and words by their lexicons
(:mod:`pyelmo.modelio.elmoformanylangs` converts their folders)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from pyelmo.config import ElmoConfig
from pyelmo.errors import WeightFileError
from pyelmo.fileio import PathLike
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import BOS_CHAR, EOS_CHAR, EOW_CHAR
from pyelmo.modeling.encoder import Highway

#: The ``config.json`` section of a converted folder.
SECTION = "elmoformanylangs"


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

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """``char_ids (..., max_chars)`` -> token vectors."""
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
