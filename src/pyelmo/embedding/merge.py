"""``pyelmo embed-merge``: the HDF5 files of sharded ``embed`` runs joined into one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from pyelmo.errors import InputError
from pyelmo.fileio import atomic_writer, check_output_file


def merge_shards(shards: Sequence[str | os.PathLike], output_file: str | os.PathLike, overwrite: bool = False,
                 links: bool = False) -> int:
    """Join the HDF5 files of ``embed_file(..., shard=(i, n))`` runs into one file (written atomically).

    The merged file holds every sentence's vectors (``links=True``: an HDF5 external link per
    sentence instead, so no vectors are copied but the shard files must stay where they are,
    relative to it) and the union of the shards' ``sentence_to_index`` (the highest line
    index of a sentence repeated across shards). Returns the number of sentences.
    """
    import h5py

    output = check_output_file(output_file, overwrite)
    merged: dict[str, str] = {}
    count, has_index = 0, False
    with atomic_writer(output) as tmp, h5py.File(tmp, "w") as out:
        for shard in shards:
            shard = Path(shard)
            if not shard.is_file():
                raise InputError(f"shard file not found: {shard}")
            with h5py.File(shard, "r") as f:
                for key in f:
                    if key == "sentence_to_index":
                        has_index = True
                        for text, index in json.loads(f[key][0]).items():
                            if text not in merged or int(index) > int(merged[text]):
                                merged[text] = index
                    elif key not in out:
                        if links:
                            out[key] = h5py.ExternalLink(os.path.relpath(shard.resolve(), output.parent.resolve()),
                                                         key)
                        else:
                            f.copy(f[key], out, name=key)
                        count += 1
        if has_index:
            ordered = dict(sorted(merged.items(), key=lambda item: int(item[1])))
            out.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())[0] = json.dumps(ordered)
    return count
