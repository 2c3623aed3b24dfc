"""Fresh ``pyelmo embed`` processes of the same input, two at a time, each pair one process of each source tree:
how many distinct outputs each tree gave (docs/RELIABILITY.md, the fixed defect "MKL's first tanh").

    git archive HEAD~1 src | tar -x -C /tmp/base
    python benchmarks/fresh_bits_ab.py --base /tmp/base/src --runs 400 -- --threads 2

The input is the 60 sentences of ``tests/runtime/test_same_bits.py`` (seed 7); the model the ``bilm-tf``
reference fixture unless flags after ``--`` name another (they go to every ``pyelmo embed``). An output is the
SHA-1 of its vectors.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "reference" / "bilm-tf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the src/ folder of the tree to compare with")
    parser.add_argument("--tree", default=str(ROOT / "src"), help="this tree's src/ folder (default: this checkout's)")
    parser.add_argument("--runs", type=int, default=200, help="processes in all, half per tree")
    parser.add_argument("flags", nargs="*", help="more `pyelmo embed` flags (after --)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    from test_same_bits import embed, sentences

    model = [] if {"--model", "--options-file"} & set(args.flags) else \
        ["--options-file", str(FIXTURE / "options.json"), "--weight-file", str(FIXTURE / "lm_weights.hdf5")]
    trees = {"base": args.base, "tree": args.tree}
    with tempfile.TemporaryDirectory() as tmp:
        text = sentences(Path(tmp) / "s.txt", "en")

        def one(i: int) -> tuple[str, str]:
            name, out = ("base", "tree")[i % 2], Path(tmp) / f"{i}.h5"
            try:  # the test's fresh `pyelmo embed --all` process and the SHA-1 of its vectors
                return name, embed([*model, *args.flags], text, out, None, {"PYTHONPATH": trees[name]})[:12]
            finally:
                out.unlink()

        with ThreadPoolExecutor(2) as pool:
            counts = collections.Counter(pool.map(one, range(args.runs)))
    for (name, sha), n in sorted(counts.items()):
        print(f"{name} {sha} {n}")


if __name__ == "__main__":
    main()
