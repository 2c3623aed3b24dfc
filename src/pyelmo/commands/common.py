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


def model_source(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(model, weight_file) arguments for ``pyelmo.models.load`` from parsed flags."""
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
    from pyelmo.embed import ElmoEmbedder

    model, weight_file = model_source(args)
    return ElmoEmbedder(model, weight_file, **kwargs)

