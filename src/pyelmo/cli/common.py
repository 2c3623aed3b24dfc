"""Arguments shared by the commands that load a biLM."""

from __future__ import annotations

import argparse

from pyelmo.errors import InputError


def add_model_arguments(parser: argparse.ArgumentParser, released: bool = True) -> None:
    """--model, and (with ``released``) --options-file / --weight-file."""
    group = parser.add_argument_group("model (default: the shipped English model)")
    if not released:
        group.add_argument("--model", metavar="DIR", help="native model directory (config.json + model.safetensors)")
        return
    group.add_argument("--model", metavar="NAME|DIR|URL",
                       help="a released model by name (english, small, medium, original, original-5.5b, pubmed; "
                            "see 'pyelmo models'; downloaded once into the cache), a model directory, or a URL "
                            "or .zip/.tar.gz archive holding options.json + model.hdf5")
    group.add_argument("--options-file", metavar="JSON", help="released-format options file (with --weight-file)")
    group.add_argument("--weight-file", metavar="HDF5", help="released-format bilm-tf weight file (with --options-file)")


class _PositionalsAnywhere(argparse.ArgumentParser):
    """argparse's intermixed parsing for one command: its positionals may stand before, between
    or after its options (``export MODEL --format X OUT`` as well as ``export OUT --model MODEL``)."""

    _inner = False

    def parse_known_args(self, args=None, namespace=None):
        if self._inner:  # parse_known_intermixed_args calls back into parse_known_args
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def positionals_anywhere(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Let ``parser`` (a command's parser) take its positionals anywhere among its options."""
    parser.__class__ = _PositionalsAnywhere
    return parser


def native_model_dir(model: str | None):
    """The native model directory ``--model`` names, or the shipped model's."""
    from pathlib import Path

    from pyelmo.modelio.load import default_model_dir

    return Path(model) if model else default_model_dir()


def model_source(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(model, weight_file) arguments for ``pyelmo.modelio.load.load`` from parsed flags."""
    options_file, weight_file = getattr(args, "options_file", None), getattr(args, "weight_file", None)
    if args.model and (options_file or weight_file):
        raise InputError("give either --model or --options-file/--weight-file, not both")
    if bool(options_file) != bool(weight_file):
        raise InputError("--options-file and --weight-file go together")
    if options_file:
        return options_file, weight_file
    return args.model, None


def load_embedder(args: argparse.Namespace, **kwargs):
    """An ``ElmoEmbedder`` for the model the flags name."""
    from pyelmo.embedding.embedder import ElmoEmbedder

    model, weight_file = model_source(args)
    return ElmoEmbedder(model, weight_file, **kwargs)



def print_json(obj) -> None:
    """``obj`` as one strict JSON document on stdout, the command's only output there with ``--json``
    (a non-finite number is null: JSON has no NaN or Infinity)."""
    import json
    import math

    def finite(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    print(json.dumps(finite(obj), allow_nan=False), flush=True)
