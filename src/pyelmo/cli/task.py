"""``pyelmo task``: train, evaluate and apply classifiers, taggers and readers on ELMo features; build task data."""

from __future__ import annotations

import argparse
import sys
import textwrap

from pyelmo.cli.common import add_model_arguments, add_precision_arguments, model_source, quantization
from pyelmo.cli.task_data import add_data_parsers

INTRODUCTION = """\
Task models on frozen biLM features, as in the ELMo paper: the biLM's layers are mixed by
learned softmax weights and a scale (gamma), concatenated with static word vectors, and fed
to a BiLSTM; only the task model is trained.  Metrics are in percent (0-100).
"""
EXAMPLES = """\
  pyelmo task train classify --train train.tsv --dev dev.tsv --out my-model
  pyelmo task evaluate my-model --test test.tsv --json
  pyelmo task predict my-model input.txt output.tsv
  pyelmo task data build task-data
"""


def _kinds() -> list:
    from pyelmo.tasks.kind import kind_names, task_kind

    return [task_kind(name) for name in kind_names()]


def _description() -> str:
    """The command's description: the introduction, each registered kind's paragraph (its name, then its
    description, in a column of their own), examples."""
    paragraphs = (textwrap.fill(kind.description, 92, initial_indent=f"  {kind.name + ':':10}",
                                subsequent_indent=" " * 12) for kind in _kinds())
    return "\n".join([INTRODUCTION, *paragraphs, "", EXAMPLES])


TRUST_HELP = ("go on when a data file looks like another kind of file (a CoNLL file given to classify, columns "
              "swapped, no blank lines between sentences): the check is then a warning. Small files only warn "
              "anyway; the evidence needed to refuse: docs/RELIABILITY.md")
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``task`` with its actions ``train``, ``evaluate``, ``predict`` and ``data build``/``static``."""
    p = subparsers.add_parser("task", help="train and use classifiers, taggers and readers on ELMo features",
                              description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="task_command", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    _add_train_parser(sub)
    _add_evaluate_parser(sub)
    _add_predict_parser(sub)
    add_data_parsers(sub)


def _add_train_parser(sub: argparse._SubParsersAction) -> None:
    kinds = _kinds()
    t = sub.add_parser("train", help="train a task model (early stopping on --dev)", description=_description(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("kind", choices=[k.name for k in kinds],
                   help=", ".join(k.help for k in kinds[:-1]) + f" or {kinds[-1].help}")
    t.add_argument("--train", required=True, metavar="FILE", help="training data")
    t.add_argument("--dev", required=True, metavar="FILE", help="development data (early stopping)")
    t.add_argument("--out", required=True, metavar="DIR", help="folder for the trained model (must not exist)")
    t.add_argument("--json", action="store_true",
                   help="print only the outcome of training, as one JSON object (stdout holds nothing else)")
    add_model_arguments(t)
    _add_feature_arguments(t.add_argument_group("features"))
    _add_training_arguments(t.add_argument_group("training"))
    _add_kind_options(t.add_argument_group("options of some kinds only"), kinds)
    _add_precision(t, "how the biLM computes the layers the task model trains on")
    t.set_defaults(func=_train)


def _add_kind_options(group: argparse._ArgumentGroup, kinds: list) -> None:
    """Each kind's own options, once each (kinds may share one); ``kind_options``: field -> the kinds it is of."""
    owners: dict[str, list[str]] = {}
    options = {}
    for kind in kinds:
        for option in kind.options:
            options.setdefault(option.flag, option)
            owners.setdefault(option.field, []).append(kind.name)
    for option in options.values():
        how = {"action": "store_true"} if option.type is None else {"type": option.type, "metavar": option.metavar}
        group.add_argument(option.flag, dest=option.field, default=None,
                           help=f"{', '.join(owners[option.field])}: {option.help}", **how)
    group.set_defaults(kind_options=owners)


def _add_feature_arguments(f: argparse._ArgumentGroup) -> None:
    from pyelmo.tasks import CONTEXTS, FEATURES
    from pyelmo.tasks.options import TrainOptions

    f.add_argument("--features", choices=FEATURES, default=TrainOptions.features,
                   help=f"static vectors, ELMo, or both concatenated (default {TrainOptions.features})")
    f.add_argument("--static-vectors", metavar="FILE",
                   help="word2vec or GloVe text file, or a folder made by 'pyelmo task data static' (default: the "
                        "English word2vec vectors shipped with pyelmo)")
    f.add_argument("--top-layer", action="store_true",
                   help="ELMo from the biLM's top layer only (default: a learned mix of all layers)")
    f.add_argument("--mix-l2", type=float, default=1e-3, metavar="LAMBDA",
                   help="lambda of the lambda*||w||^2 penalty on the mix weights (default 0.001; 1 keeps "
                        "the mix near an average)")
    f.add_argument("--elmo-output", action="store_true",
                   help="also concatenate a second ELMo mix to the encoder's output (paper Table 3; "
                        "qa: one for the passage and one for the question); needs --features elmo or "
                        "static+elmo")
    f.add_argument("--bilm-context", choices=CONTEXTS, default=None,
                   help="what the biLM reads: the whole example at once (line), or each sentence of it on "
                        "its own, its layers concatenated back in token order (sentence; pieces longer than "
                        "the biLM's training length are cut); stored with the model (default: the kind's, " +
                        ", ".join(f"{k.context} for {k.name}" for k in _kinds()) + ")")
    f.add_argument("--trust-format", action="store_true", help=TRUST_HELP)


def _add_training_arguments(r: argparse._ArgumentGroup) -> None:
    r.add_argument("--seed", type=int, default=1, metavar="N", help="random seed (default 1)")
    r.add_argument("--train-fraction", type=float, default=1.0, metavar="F",
                   help="train on a fixed subset of this fraction of --train (default 1)")
    r.add_argument("--max-minutes", type=float, default=None, metavar="M",
                   help="stop training after M minutes (the best model so far is kept)")
    r.add_argument("--max-epochs", type=int, default=20, metavar="N", help="at most N epochs (default 20)")
    r.add_argument("--patience", type=int, default=3, metavar="N",
                   help="stop after N epochs without a better dev score (default 3)")
    r.add_argument("--min-steps", type=int, default=300, metavar="N",
                   help="train for at least N optimizer updates (default 300): early stopping waits for them, "
                        "and on small data an epoch is several passes over it, so that --max-epochs epochs "
                        "hold at least N updates (0: plain epochs)")
    defaults = {name: "; ".join(f"{k.name}: {k.defaults[name]:g}" for k in _kinds())
                for name in ("batch_size", "lr", "hidden")}
    r.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help=f"examples per batch (default: the kind's, {defaults['batch_size']})")
    r.add_argument("--lr", type=float, default=None, metavar="X",
                   help=f"Adam learning rate (default: the kind's, {defaults['lr']})")
    r.add_argument("--hidden", type=int, default=None, metavar="N",
                   help=f"BiLSTM size per direction (default: the kind's, {defaults['hidden']})")
    r.add_argument("--cache-dir", metavar="DIR",
                   help="keep the biLM layers of each data file here and reuse them in later runs")
    r.add_argument("--quiet", action="store_true", help="no progress output")


def _add_evaluate_parser(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("evaluate", help="score a trained model on labelled data")
    e.add_argument("dir", metavar="DIR", help="a trained task model")
    e.add_argument("--test", required=True, metavar="FILE", help="labelled data in the model's format")
    e.add_argument("--json", action="store_true",
                   help="print only the metrics (percent), as one JSON object with \"scale\": \"percent\" "
                        "(stdout holds nothing else)")
    add_model_arguments(e)
    e.add_argument("--cache-dir", metavar="DIR", help="reuse / keep the biLM layers of --test here")
    e.add_argument("--trust-format", action="store_true", help=TRUST_HELP)
    e.add_argument("--quiet", action="store_true", help="no progress output")
    _add_precision(e, "how the biLM computes the layers (default: as in training)")
    e.set_defaults(func=_evaluate)


def _add_predict_parser(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser("predict", help="label new data with a trained model",
                        description="  ".join(f"{k.name}: {k.predict_help}" for k in _kinds()))
    pr.add_argument("dir", metavar="DIR", help="a trained task model")
    pr.add_argument("input", metavar="INPUT", help="data to label")
    pr.add_argument("output", metavar="OUTPUT", help="where to write the labels (must not exist unless --overwrite)")
    pr.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    add_model_arguments(pr)
    pr.add_argument("--quiet", action="store_true", help="no progress output")
    _add_precision(pr, "how the biLM computes the layers (default: as in training)")
    pr.set_defaults(func=_predict)


def _add_precision(parser: argparse.ArgumentParser, title: str) -> None:
    add_precision_arguments(parser.add_argument_group(f"precision ({title})"), tasks=True,
                            help="Stored with a trained model.",
                            min_weight_help="plan's; the shipped model's are all smaller")


def _bilm_source(args: argparse.Namespace):
    from pyelmo.tasks.options import BiLMSource

    model, weight_file = model_source(args)
    return BiLMSource(model, weight_file)


def _train(args: argparse.Namespace) -> int:
    from pyelmo.cli.common import print_json
    from pyelmo.errors import InputError
    from pyelmo.tasks.kind import task_kind
    from pyelmo.tasks.metrics import SCALE
    from pyelmo.tasks.options import TrainOptions
    from pyelmo.tasks.train import train_task

    kind = task_kind(args.kind)
    own = {}  # the kind's own options that were given
    for field, owners in args.kind_options.items():
        if getattr(args, field) is not None and kind.name not in owners:
            raise InputError(f"--{field.replace('_', '-')} is an option of {' and '.join(owners)} task models, "
                             f"not of {kind.name}")
        if getattr(args, field) is not None:
            own[field] = getattr(args, field)
    options = TrainOptions(features=args.features, seed=args.seed, train_fraction=args.train_fraction,
                           max_minutes=args.max_minutes, max_epochs=args.max_epochs, patience=args.patience,
                           min_steps=args.min_steps,
                           batch_size=args.batch_size, lr=args.lr, hidden=args.hidden, mix_l2=args.mix_l2,
                           top_only=args.top_layer, elmo_output=args.elmo_output, trust_format=args.trust_format,
                           progress=not args.quiet, cache_dir=args.cache_dir, bilm_context=args.bilm_context,
                           precision=args.precision or "float32", quantization=quantization(args), **own)
    saved = train_task(kind.name, args.train, args.dev, args.out, options, _bilm_source(args), args.static_vectors)
    t = saved["training"]
    if args.json:
        print_json({"out": args.out, "kind": kind.name, "best_dev": t["best_dev"], "epochs": len(t["history"]),
                    "steps": t["steps"], "seconds": t["seconds"], "stop_reason": t["stop_reason"], "scale": SCALE})
        return 0
    print(f"saved {args.out}: best dev {t['best_dev']:.2f}% after {len(t['history'])} epoch(s), {t['steps']} steps, "
          f"{t['seconds']:.0f} s; stopped: {t['stop_reason']}")
    return 0


def _load(args: argparse.Namespace):
    from pyelmo.tasks.saved import load_task

    return load_task(args.dir, _bilm_source(args), progress=not args.quiet,
                     cache_dir=getattr(args, "cache_dir", None), precision=args.precision,
                     quantization=quantization(args))


def _read(args: argparse.Namespace, path: str, labelled: bool):
    """The task model's kind and the examples of ``path``, read before the model is loaded."""
    from pyelmo.tasks.kind import task_kind
    from pyelmo.tasks.saved import read_saved

    saved, _ = read_saved(args.dir)
    kind = task_kind(saved["kind"])
    examples = kind.read(path, saved["options"].get("pretokenized", False), labelled=labelled)
    if labelled:
        kind.check(examples, path, training=False, trust_format=args.trust_format)
    return kind, examples


def _evaluate(args: argparse.Namespace) -> int:
    from pyelmo.cli.common import print_json
    from pyelmo.tasks.metrics import SCALE
    from pyelmo.tasks.train import warn_unseen_labels

    kind, test = _read(args, args.test, labelled=True)
    runner = _load(args)
    warn_unseen_labels(kind, test, runner.labels, args.test)
    metrics = runner.evaluate(test)
    if args.json:
        print_json({**metrics, "scale": SCALE})
        return 0
    for key, value in metrics.items():
        if value is not None:
            print(f"{key}: {value:.2f}%" if isinstance(value, float) else f"{key}: {value}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from pyelmo.fileio import check_output_file, write_text_atomic

    check_output_file(args.output, args.overwrite)  # before any work
    kind, examples = _read(args, args.input, labelled=False)
    predictions = _load(args).predict(examples)
    write_text_atomic(args.output, kind.write(args.input, examples, predictions))
    print(f"wrote {len(examples)} prediction(s) to {args.output}", file=sys.stderr)
    return 0
