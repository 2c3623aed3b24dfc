"""``pyelmo embed-merge``: join the HDF5 files of sharded ``pyelmo embed --shard I/N`` runs."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Join the output files of `pyelmo embed --shard I/N` runs (one per shard) into OUTPUT: every
sentence's dataset, keyed by its global line index, and the union of their
sentence_to_index. By default the vectors are copied, so OUTPUT stands on its own; with
--links it holds HDF5 external links to the shard files instead (no copying, but the shard
files must then stay where they are, relative to OUTPUT)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("embed-merge", help="join the HDF5 files of sharded embed runs", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shards", nargs="+", metavar="SHARD", help="HDF5 files written by pyelmo embed --shard")
    parser.add_argument("output", metavar="OUTPUT", help="HDF5 file to write")
    parser.add_argument("--links", action="store_true", help="external links to the shard files instead of copies")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.embedding.merge import merge_shards

    count = merge_shards(args.shards, args.output, overwrite=args.overwrite, links=args.links)
    print(f"wrote {count} sentences to {args.output}")
    return 0
