"""Make the static word vectors shipped beside the default model (``static.safetensors`` + ``static-vocab.txt``).

``pyelmo task data static CORPUS OUT`` (word2vec, gensim skip-gram, on the first ``--max-tokens`` tokens of the
pretraining corpus's train split, its ``--top`` most frequent words stored as float16) with the settings the
shipped files were made with (:data:`SHIPPED`) and the shipped English model's folder as OUT (``--out``: another).
Any other flag of that command follows CORPUS and overrides the setting here.  The command and settings used for
the shipped files are recorded in docs/TASKS.md.

    python scripts/make_static_vectors.py /work/data/corpus-v2 --max-tokens 15000000 --dim 200 --epochs 3
"""

from __future__ import annotations

import argparse

from pyelmo.cli import main as pyelmo
from pyelmo.modelio.hub import shipped_folder

#: The shipped files' settings: ``pyelmo task data static`` flags (later flags override them).
SHIPPED = ("--max-tokens", "15000000", "--dim", "200", "--epochs", "3", "--min-count", "5", "--top", "20000",
           "--workers", "2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Other flags: see 'pyelmo task data static --help'.")
    parser.add_argument("corpus", help="pretraining corpus folder (with train/*.txt)")
    parser.add_argument("--out", default=str(shipped_folder("english")), help="output folder (default: the shipped "
                                                                              "English model's)")
    args, flags = parser.parse_known_args()
    return pyelmo(["task", "data", "static", args.corpus, args.out, *SHIPPED, *flags])


if __name__ == "__main__":
    raise SystemExit(main())
