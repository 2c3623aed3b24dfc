"""Arguments shared by the commands that load a biLM."""

from __future__ import annotations

import argparse
import gc

from pyelmo.cli import OneLineErrors
from pyelmo.errors import InputError


def add_model_arguments(parser: argparse.ArgumentParser, released: bool = True) -> None:
    """--model, and (with ``released``) --options-file / --weight-file; without ``released``, for the
    commands that need the softmax too (predict, perplexity, export)."""
    group = parser.add_argument_group("model (default: the shipped English model)")
    if not released:
        group.add_argument("--model", metavar="DIR",
                           help="a model with its softmax: a folder 'pyelmo train' wrote (RUN or RUN/model), one "
                                "'pyelmo export' wrote, or a shipped model (english; chinese, the default with "
                                "--lang zh). The released models (original, ...) have none")
        return
    from pyelmo.modelio.hub import RELEASES

    group.add_argument("--model", metavar="NAME|DIR|URL",
                       help="a model by name: shipped (english; chinese, the default with --lang zh) or released "
                            f"({', '.join(RELEASES)}; downloaded once into the cache; see "
                            "'pyelmo models'), a model folder ('pyelmo train', "
                            "'export' or 'convert' output, or DIR/models/NAME after 'pyelmo download NAME --dir "
                            "DIR'), or a URL or .zip/.tar.gz archive holding options.json + model.hdf5")
    group.add_argument("--options-file", metavar="JSON", help="released-format options file (with --weight-file)")
    group.add_argument("--weight-file", metavar="HDF5", help="released-format bilm-tf weight file (with --options-file)")


#: What a command that can keep the int8 weights on disk (--int8-cache) adds to --precision's help.
INT8_OUTLOOK = "int8: 'pyelmo env --precision int8' says whether int8 is expected to pay on this CPU."


class _PrecisionAction(argparse.Action):
    """Sets ``precision``: ``--precision NAME``, or an alias flag such as ``--bf16`` (``const``: the name it maps
    to, here at argument parsing only: the library takes one precision). Two different ones are a usage error."""

    def __call__(self, parser, namespace, values, option_string=None):
        name = self.const if self.nargs == 0 else values
        if getattr(namespace, self.dest, None) not in (None, name):
            raise argparse.ArgumentError(self, f"the precision is given twice, as {getattr(namespace, self.dest)} and "
                                               f"{name}: give one")
        setattr(namespace, self.dest, name)


def add_precision_arguments(group, tasks: bool = False, help: str = "", min_weight_help: str = "",
                            kept: bool = False) -> None:
    """--precision (its choices, the registered precisions: :mod:`pyelmo.runtime.precision`; ``tasks``: those
    task models take) and --int8-min-weight (``kept``: and --int8-cache, the opt-in to keep the int8 weights on
    disk)."""
    from pyelmo.runtime import precision

    group.add_argument("--precision", choices=precision.names(tasks), default=None, action=_PrecisionAction,
                       help=f"{precision.help_text(tasks)} {INT8_OUTLOOK if kept else ''} {help}".strip())
    group.add_argument("--int8-min-weight", type=int, default=None, metavar="N",
                       help="with --precision int8: quantize the weights of at least N elements (default: the "
                            + (min_weight_help or "plan's rule, which 'pyelmo env --precision int8' shows; smaller "
                                                  "products stay float32, where int8 does not pay") +
                            "; 0 quantizes every product)")
    if kept:
        group.add_argument("--int8-cache", action="store_true",
                           help="with --precision int8: keep the int8 weights on disk after the first load "
                                "(~/.cache/pyelmo/int8/, or $PYELMO_INT8_CACHE) and reuse them at the next loads "
                                "instead of quantizing again (the same vectors either way; what it saves: "
                                "benchmarks/RESULTS.md)")


def quantization(args: argparse.Namespace):
    """The quantization rule of --int8-min-weight (:class:`pyelmo.runtime.precision.Quantization`; ``None`` when
    not given: the plan's default), the one place the flag becomes the rule; a negative N is a one-line error."""
    from pyelmo.runtime.precision import Quantization

    return Quantization.of(getattr(args, "int8_min_weight", None))


def check_precision(args: argparse.Namespace) -> None:
    """--precision and --int8-min-weight checked before any work (for commands that load the model later)."""
    from pyelmo.runtime.plan import ExecutionPlan

    ExecutionPlan.for_machine(precision=args.precision, quantization=quantization(args))


def plan_settings(args: argparse.Namespace) -> dict:
    """The ``ElmoEmbedder``/``RunOptions.inference`` keyword arguments of the execution-plan flags
    (``precision``, ``quantization``; ``kernels`` and ``int8_cache`` where the command has those flags)."""
    settings = {"precision": getattr(args, "precision", None), "quantization": quantization(args)}
    if hasattr(args, "kernels"):
        settings["kernels"] = args.kernels
    if getattr(args, "steps", None):
        settings["steps"] = args.steps
    if hasattr(args, "int8_cache"):
        settings["int8_cache"] = args.int8_cache
    return settings


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """--precision (and its alias --bf16) and --kernels: the execution plan of the inference products."""
    from pyelmo.runtime.rules import KERNEL_RULES, STEP_MODES

    group = parser.add_argument_group("execution plan (default: a fixed rule of this CPU; the same bits every run)")
    add_precision_arguments(group, kept=True, help="Speed and accuracy: benchmarks/RESULTS.md")
    group.add_argument("--bf16", action=_PrecisionAction, nargs=0, dest="precision", const="bfloat16",
                       help="the same as --precision bfloat16")
    group.add_argument("--kernels", choices=KERNEL_RULES, default=None,
                       help="the kernel of every exact product: fixed (the default: oneDNN where this PyTorch has it for "
                            "products of up to 64 rows, else torch.mm), mm or onednn (see 'pyelmo env')")
    group.add_argument("--steps", choices=STEP_MODES, default=None,
                       help="how each LSTM time step runs: eager (the default on a CPU), graphs (the default on a CUDA "
                            "device: each step's kernels replayed as one CUDA graph) or static (graphs' fixed "
                            "buffers, run eagerly); the same vectors either way")


LANG_HELP = ("the language of the raw text, which chooses how it is split into words: auto (default: from the "
             "script of each text: kana -> ja, Chinese characters -> zh, Thai letters -> th, else en), en "
             "(Moses-style, on spaces and punctuation), zh (jieba), ja (SudachiPy, short units), th (PyThaiNLP); "
             "zh, ja and th need their extra, e.g. pip install 'pyelmo[zh]'. Without --model, --lang zh uses the "
             "shipped Chinese model. When the model's language is known and the text's differs, a warning says so "
             "once, naming the shipped model of the text's language")


def add_lang_argument(parser: argparse.ArgumentParser, default: str | None = "auto", prefix: str = "",
                      suffix: str = "") -> None:
    """--lang: the language raw text is tokenized as (``pyelmo.text.tokenize``)."""
    from pyelmo.text.tokenize import LANG_CHOICES

    parser.add_argument("--lang", choices=LANG_CHOICES, default=default, help=prefix + LANG_HELP + suffix)


class _PositionalsAnywhere(OneLineErrors):
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


def model_source(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(model, weight_file) of the parsed flags, checked: ``--model`` (None: none given) or ``--options-file`` with
    ``--weight-file``; :func:`resolved_model` makes them a model."""
    options_file, weight_file = getattr(args, "options_file", None), getattr(args, "weight_file", None)
    if args.model and (options_file or weight_file):
        raise InputError("give either --model or --options-file/--weight-file, not both")
    if bool(options_file) != bool(weight_file):
        raise InputError("--options-file and --weight-file go together")
    if options_file:
        return options_file, weight_file
    return args.model, None


def resolved_model(args: argparse.Namespace):
    """The model the flags name (:func:`pyelmo.modelio.resolve.resolve_model`): without one, the shipped model of
    the command's ``--lang`` (``chinese`` for zh; the shipped English model without --lang)."""
    from pyelmo.modelio.resolve import resolve_model

    return resolve_model(*model_source(args), lang=getattr(args, "lang", None))


def prefetched_model(args: argparse.Namespace, runtime: str = "torch"):
    """:func:`resolved_model`, for a command that loads it in PyTorch (``runtime``): a bilm-tf model's weights are
    read (:meth:`~pyelmo.modelio.resolve.ResolvedModel.prefetch`: in a forked process or a thread) while this
    imports PyTorch, with the cyclic garbage collector paused (the import makes objects by the hundred thousand,
    which would set off its full collections meanwhile)."""
    source = resolved_model(args)
    if runtime == "torch":
        source.prefetch()
        collecting = gc.isenabled()
        gc.disable()
        try:
            import torch  # noqa: F401
        finally:
            if collecting:
                gc.enable()
    return source


def load_embedder(args: argparse.Namespace, **kwargs):
    """An ``ElmoEmbedder`` for the model the flags name (:func:`prefetched_model`)."""
    source = prefetched_model(args, kwargs.get("runtime", "torch"))
    from pyelmo.embedding.embedder import ElmoEmbedder

    return ElmoEmbedder(source, **kwargs)


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
