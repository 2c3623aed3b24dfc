"""Regenerate tests/data/evaluation/wordnet/: a few real WordNet 3.0 entries, renumbered.

Usage: python make_wordnet_fixture.py /path/to/usr/share/wordnet
Keeps the index lines of LEMMAS and the data lines of their synsets, drops pointers (the
evaluation does not follow them) and rewrites synset offsets to byte offsets in the new
files, as WordNet requires. Exception lines whose base form is a kept lemma are kept.
"""

import sys
from pathlib import Path

LEMMAS = {"noun": ["absence", "abuse", "bank", "goose"], "verb": ["abandon", "bake"], "adj": ["bright", "cold"],
          "adv": ["well"]}
OUT = Path(__file__).parent / "wordnet"


def main(src: Path) -> None:
    OUT.mkdir(exist_ok=True)
    for pos, lemmas in LEMMAS.items():
        index = {}
        for line in (src / f"index.{pos}").read_text(encoding="utf-8").splitlines():
            f = line.split()
            if line.startswith(" ") or not f or f[0] not in lemmas:
                continue
            index[f[0]] = f
        data_lines = (src / f"data.{pos}").read_bytes()
        offsets = []
        for f in index.values():
            n = int(f[2])
            offsets += [o for o in f[-n:] if o not in offsets]
        new_lines, mapping, pos_bytes, words = [], {}, 0, {}
        for off in offsets:
            start = int(off)
            raw = data_lines[start : data_lines.index(b"\n", start)].decode("utf-8")
            head, gloss = raw.split(" | ", 1)
            f = head.split()
            if f[2] == "s":  # adjective satellites need their head synset: left out
                continue
            w_cnt = int(f[3], 16)
            p_at = 4 + 2 * w_cnt
            p_cnt = int(f[p_at])
            for w in f[4:p_at:2]:  # every word of a kept synset needs an index line (NLTK names synsets by it)
                w = w.lower().split("(")[0]
                if w not in index:
                    words.setdefault(w, []).append(off)
            rest = f[p_at + 1 + 4 * p_cnt :]
            new = " ".join([f"{pos_bytes:08d}"] + f[1:p_at] + ["000"] + rest) + " | " + gloss + "  \n"
            mapping[off] = f"{pos_bytes:08d}"
            new_lines.append(new)
            pos_bytes += len(new.encode("utf-8"))
        (OUT / f"data.{pos}").write_text("".join(new_lines), encoding="utf-8")
        idx = []
        for lemma in sorted(index):
            f = index[lemma]
            n, p = int(f[2]), int(f[3])
            kept = [mapping[o] for o in f[-n:] if o in mapping]
            tagsense = min(int(f[5 + p]), len(kept))
            idx.append(" ".join([lemma, f[1], str(len(kept)), "0", str(len(kept)), str(tagsense)] + kept) + "  \n")
        letter = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}[pos]
        for w, offs in words.items():  # other words: only the kept synsets
            idx.append(" ".join([w, letter, str(len(offs)), "0", str(len(offs)), "0"] + [mapping[o] for o in offs])
                       + "  \n")
        idx.sort()
        (OUT / f"index.{pos}").write_text("".join(idx), encoding="utf-8")
        exc = [ln + "\n" for ln in (src / f"{pos}.exc").read_text(encoding="utf-8").splitlines()
               if ln.split()[1:2] and ln.split()[1] in lemmas]
        (OUT / f"{pos}.exc").write_text("".join(exc), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
