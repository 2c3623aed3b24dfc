"""``pair`` (a throwaway kind, to count the files a new kind touches): a label per pair of texts,
``label<TAB>text a<TAB>text b``, classified as one text ``a ||| b``."""

from __future__ import annotations

from pyelmo.errors import InputError
from pyelmo.tasks.data import Example
from pyelmo.tasks.kinds.classify import Classify
from pyelmo.tasks.kind import register


class Pair(Classify):
    name, order, extension = "pair", 4, "tsv"
    help = "pair (TSV of two texts)"
    description = "pair:     a label per pair of texts, label<TAB>text a<TAB>text b."
    predict_help = "pair: INPUT has label<TAB>text a<TAB>text b lines; OUTPUT label<TAB>probability<TAB>text."
    options = ()

    def read(self, path, pretokenized=False, labelled=True) -> list:
        from pyelmo.text.tokenize import tokenize

        out = []
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise InputError(f"{path}:{number}: expected label<TAB>text a<TAB>text b")
            out.append(Example((*tokenize(parts[1]), "|||", *tokenize(parts[2])), parts[0] if labelled else None,
                               number))
        return out


register(Pair())
