"""``pyelmo export``: write a model in another layout.

``--format bilm-hdf5`` (the default) writes a trained model in the released bilm-tf layout:
``options.json`` + ``weights.hdf5`` (readable by AllenNLP and ``pyelmo.modelio.weights.load_bilm_hdf5``),
``softmax.hdf5`` (datasets ``softmax/W`` (vocab, P) and ``softmax/b`` (vocab,)) and ``vocab.txt`` into OUTDIR:

  pyelmo export --model runs/x/model runs/x/bilm-tf

``--format onnx`` writes the biLM as an ONNX graph, ``model.onnx`` (character ids (batch, tokens, 50)
int64 from batch_to_ids, without <S>/</S> -> ``layers`` (layers, batch, tokens, dim) float32 and ``mask``
(batch, tokens)), and ``config.json`` (options, character ids, fingerprint) into OUTDIR, for ONNX Runtime
(``pyelmo embed --runtime onnxruntime --model OUTDIR``) or any ONNX engine; it needs pip install 'pyelmo[onnx]':

  pyelmo export --format onnx elmo-onnx --model english

``--format web`` writes a static page that runs the model in the browser (ONNX Runtime Web, no pyelmo
process): index.html, the page's scripts, model.onnx and onnxruntime-web's files into OUTDIR; serve it with
any static server (a Chinese model gets a Chinese page, its input words separated by spaces):

  pyelmo export --format web elmo-web --model english && cd elmo-web && python -m http.server

Without --model the shipped English model is exported.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pyelmo.cli.common import add_model_arguments, model_source, positionals_anywhere


@dataclass(frozen=True)
class ExportFormat:
    """One output layout of ``pyelmo export``: its help and what writes it (``run(args) -> message``)."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], str]


def _bilm_hdf5(args: argparse.Namespace) -> str:
    from pyelmo.errors import InputError
    from pyelmo.lm.export import export_bilm_hdf5

    if args.options_file or args.weight_file:
        raise InputError("--format bilm-hdf5 needs a model with its softmax (--model); --options-file/--weight-file "
                         "name a biLM alone (--format onnx takes them)")
    out = export_bilm_hdf5(args.model, args.outdir, overwrite=args.overwrite)
    return f"wrote {out}/options.json, weights.hdf5, softmax.hdf5, vocab.txt"


def _onnx(args: argparse.Namespace) -> str:
    from pyelmo.modelio.onnx_export import export_onnx

    model, weight_file = model_source(args)
    done = export_onnx(model, args.outdir, weight_file=weight_file, overwrite=args.overwrite)
    return f"wrote {done['folder']}/model.onnx ({done['bytes'] / 1e6:.1f} MB), config.json in {done['seconds']:.1f} s"


def _web(args: argparse.Namespace) -> str:
    from pyelmo.web.export import export_web

    model, weight_file = model_source(args)
    done = export_web(model, args.outdir, weight_file=weight_file, overwrite=args.overwrite)
    return (f"wrote {done['folder']}/index.html with model.onnx and onnxruntime-web ({done['bytes'] / 1e6:.1f} MB) "
            f"in {done['seconds']:.1f} s; serve it: cd {done['folder']} && python -m http.server")


#: The output layouts, by ``--format`` name (the first is the default).
FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("bilm-hdf5", "the released bilm-tf layout, with the softmax and vocabulary", _bilm_hdf5),
    ExportFormat("onnx", "the biLM as an ONNX graph (model.onnx + config.json), for ONNX Runtime", _onnx),
    ExportFormat("web", "a static page running the biLM in the browser (index.html, model.onnx, onnxruntime-web)",
                 _web),
)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a model (bilm-tf HDF5 layout, ONNX, or a web page)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    positionals_anywhere(p)
    p.add_argument("outdir", metavar="OUTDIR", help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace outputs already in OUTDIR")
    default = next(iter(FORMATS))
    p.add_argument("--format", choices=list(FORMATS), default=default,
                   help="output layout (default %(default)s): " + "; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()))
    add_model_arguments(p, released=False)
    group = next(g for g in p._action_groups if g.title and g.title.startswith("model"))
    group.add_argument("--options-file", metavar="JSON",
                       help="with --format onnx or web: a released-format options file (with --weight-file)")
    group.add_argument("--weight-file", metavar="HDF5", help="with --format onnx or web: its bilm-tf weight file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.modelio.onnx_folder import is_export_folder

    outdir = Path(args.outdir)
    if (outdir / "config.json").is_file() and not (args.format in ("onnx", "web") and is_export_folder(outdir)):
        given = args.model or args.options_file
        hint = "" if given else f": pyelmo export --model {args.outdir} OUTDIR"
        raise InputError(f"{args.outdir} is a model directory, not an output folder{hint}")
    print(FORMATS[args.format].run(args))
    return 0
