"""``pyelmo download`` and ``pyelmo models``: released models by name, fetched into the cache."""

from __future__ import annotations

import argparse

DOWNLOAD_DESCRIPTION = """\
Fetch a model into the cache ($PYELMO_HOME, else ~/.cache/pyelmo) and verify it: size,
sha256 (pinned, or recorded on the first download and checked afterwards) and every
dataset the options require. NAME|URL is a name from 'pyelmo models', a URL (of a .zip /
.tar.gz archive holding options.json + model.hdf5, as NLPL's repository serves them, or of
a weight file with options.json beside it), or a local archive. An interrupted download
resumes where it stopped. With PYELMO_OFFLINE=1 nothing is fetched: the error names every
file the model lacks, the URL of each and the exact cache path to put it at. --dir DIR on a
machine with network, then copying DIR/models/NAME to that cache path, also works."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("download", help="fetch a released model (by name or URL) into the cache",
                            description=DOWNLOAD_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="NAME|URL", help="e.g. original, small, or https://.../model.zip")
    parser.add_argument("--dir", metavar="DIR", help="cache root to use instead of $PYELMO_HOME / ~/.cache/pyelmo")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_download)

    models = sub.add_parser("models", help="list the released models: size, dims, source, cached?",
                            description="The models pyelmo knows by name. 'english' ships inside the package; "
                                        "the others are downloaded on first use (or with 'pyelmo download').")
    models.add_argument("--dir", metavar="DIR", help="cache root to look in (default $PYELMO_HOME / ~/.cache/pyelmo)")
    models.set_defaults(func=run_models)


def run_download(args: argparse.Namespace) -> int:
    from pyelmo.modelio.resolve import resolve_model

    files = resolve_model(args.source).fetch(args.dir, progress=not args.quiet)
    print(f"{args.source}: {files.options.parent}")
    return 0


def run_models(args: argparse.Namespace) -> int:
    from pyelmo.modelio import hub

    rows = hub.listing(args.dir)
    columns = ["name", "size", "dims", "cached", "source"]
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip())
    print(f"cache: {hub.models_dir(args.dir)}")
    return 0
