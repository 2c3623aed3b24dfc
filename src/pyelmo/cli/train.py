"""``pyelmo train``: train a biLM on raw text (one whitespace-tokenized sentence per line)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

EPILOG = """\
configuration: a TOML (.toml) or JSON file with sections char_cnn, lstm (or preset = "small"),
vocab, data, softmax, optim, train; see configs/ and docs/TRAINING.md. Any field can be
overridden: --set lstm.dim=512 --set train.max_steps=1000 (values are read as TOML).
train.products: "fused" (default: the same math in fewer, larger operations), "onednn" (that with
oneDNN prepacked products) or "plain" (the reference modules as they are); docs/TRAINING.md.

adapt a trained model to your text (a domain, another language): pyelmo train --config
configs/adapt.toml --init-from MODEL --data D --out O (docs/TRAINING.md, "Adapt a released model").

distributed (DistributedDataParallel; gloo on CPU, nccl on GPU; only rank 0 writes):
  one machine:  torchrun --nproc_per_node 4 -m pyelmo train --config C --data D --out O
  several:      torchrun --nnodes 2 --node_rank R --nproc_per_node 4 \\
                  --rdzv_backend c10d --rdzv_endpoint HOST:29500 -m pyelmo train ...
  data.batch_tokens is the GLOBAL batch; each rank gets every world-th sentence of it.
  --out must be on a filesystem shared by all nodes for --resume.

stopping: SIGTERM or SIGINT (Ctrl-C) finishes the optimizer step in progress (on every rank),
writes checkpoint.pt, prints the step and the --resume command, and exits with 143 (SIGTERM)
or 130 (SIGINT); model/ is written only by a run that ends by its own rules. A second signal,
more than 2 s after the first, aborts at once without a checkpoint.
"""

FLAGS = [  # (flag, config key, type, help)
    ("--max-steps", "train.max_steps", int, "stop after this many steps (0: by epochs)"),
    ("--max-epochs", "train.max_epochs", int, "stop after this many epochs"),
    ("--max-minutes", "train.max_minutes", float, "stop after this many minutes"),
    ("--batch-tokens", "data.batch_tokens", int, "padded token positions per global batch"),
    ("--negatives", "softmax.negatives", int, "sampled-softmax negatives per batch (0: full softmax)"),
    ("--optimizer", "optim.name", str, "adagrad or adamw"),
    ("--lr", "optim.lr", float, "learning rate"),
    ("--seed", "train.seed", int, "random seed (data order, init, negatives, dropout)"),
    ("--threads", "train.threads", int, "torch intra-op threads"),
    ("--vocab", "vocab.path", "PATH", "use this vocab.txt instead of building one"),
    ("--device", "train.device", str, "auto, cpu or cuda"),
    ("--freeze-bilm-steps", "train.freeze_bilm_steps", int,
     "with --init-from: first train the softmax alone for this many steps (default: 200 when the softmax is "
     "new, else 0)"),
]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train", help="train a biLM on raw text", description=__doc__,
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="training config (.toml or .json), e.g. configs/cpu-1h.toml; required unless "
                   "--set gives the model size (the defaults are the original 4096-cell model)")
    p.add_argument("--data", help="corpus directory (DIR/train/*.txt, DIR/valid/*.txt) or a text directory")
    p.add_argument("--train", nargs="+", metavar="FILE", help="training text files (or directories)")
    p.add_argument("--valid", nargs="+", metavar="FILE", help="validation text files (or directories)")
    p.add_argument("--out", required=True, help="output directory (checkpoint, metrics, model/)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--overwrite", action="store_true",
                   help="start afresh in an --out that holds an earlier run (its checkpoint is replaced)")
    p.add_argument("--init-from", metavar="MODEL",
                   help="continue a trained biLM: anything --model takes (english, a released name such as small "
                        "or original, a URL or archive, a run or exported folder, a folder converted from "
                        "ELMoForManyLangs, or a bilm-tf options file with --init-weight-file). A source with a "
                        "softmax continues with its vocabulary; without one, a softmax is built over the new "
                        "text's vocabulary and trained alone first (--freeze-bilm-steps)")
    p.add_argument("--init-weight-file", metavar="HDF5",
                   help="the bilm-tf weight file of the options file given to --init-from")
    p.add_argument("--new-softmax", action="store_true",
                   help="with --init-from: build a new softmax over this run's vocabulary (--vocab or the text's) "
                        "even when the source has one")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. lstm.dim=512 (repeatable)")
    for flag, key, kind, text in FLAGS:
        metavar = {int: "N", float: "X", "PATH": "PATH"}.get(kind, "NAME")
        p.add_argument(flag, type=str if kind == "PATH" else kind, dest=key.replace(".", "__"), metavar=metavar,
                       help=f"{text} ({key})")
    p.add_argument("--bf16", action="store_const", const=True, dest="train__bf16", help="bfloat16 autocast")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import ConfigError
    from pyelmo.training.data import resolve_data
    from pyelmo.training.start import InitFrom
    from pyelmo.training.trainer import Trainer

    out = Path(args.out)
    config = _config(args, out)
    data = None
    if args.data or args.train:
        data = resolve_data(args.data, args.train, args.valid)
    elif not args.resume:
        raise ConfigError("give --data DIR or --train FILES")
    init = InitFrom(args.init_from, args.init_weight_file, args.new_softmax) if args.init_from else None
    trainer = Trainer(config, out, data, resume=args.resume, init_from=init, progress=not args.no_progress)
    if trainer.dist.main:
        from pyelmo.training.report import start_summary

        print(start_summary(trainer), flush=True)
    result = trainer.run()
    if result.signal is not None:
        from pyelmo.training.stop import exit_code

        if trainer.dist.main:
            import signal

            print(f"stopped by {signal.Signals(result.signal).name} at step {result.steps} "
                  f"({result.tokens} tokens); checkpoint: {out / 'checkpoint.pt'}; continue with: "
                  f"pyelmo train --out {out} --resume", flush=True)
        return exit_code(result.signal)
    if trainer.dist.main:
        best = f", best validation perplexity {result.best_valid_ppl:.2f}" if result.best_valid_ppl else ""
        steps = f"{result.steps} step" + ("" if result.steps == 1 else "s")
        print(f"trained {steps}, {result.tokens} tokens{best}; stopped: {trainer.stopped}; model: {result.model_dir}")
    return 0


def _config(args: argparse.Namespace, out: Path):
    """The run's ``TrainConfig``: ``--config`` (or a resumed run's own), ``--set`` and the flags over it;
    a combination of options that cannot work is refused in one line."""
    from pyelmo.errors import ConfigError
    from pyelmo.training.checkpoints import RUN_NAME
    from pyelmo.training.config import load_config

    overrides = list(args.set)
    for flag, key, _, _ in FLAGS + [("--bf16", "train.bf16", bool, "")]:
        value = getattr(args, key.replace(".", "__"))
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    base = None
    if (args.init_weight_file or args.new_softmax) and not args.init_from:
        raise ConfigError("--init-weight-file and --new-softmax go with --init-from MODEL")
    if args.train__freeze_bilm_steps is not None and not (args.init_from or args.resume):
        raise ConfigError("--freeze-bilm-steps goes with --init-from (a new biLM trains everything from the start)")
    if args.resume:
        if args.init_from or args.init_weight_file or args.new_softmax:
            raise ConfigError("--resume cannot be combined with --init-from, --init-weight-file or --new-softmax "
                              "(the run remembers its start)")
        run_file = out / RUN_NAME
        if not run_file.is_file():
            raise ConfigError(f"nothing to resume: {run_file} does not exist")
        if args.config is None:
            base = json.loads(run_file.read_text(encoding="utf-8"))["config"]
    elif args.config is None and not args.init_from and not any(o.startswith(("preset", "lstm", "char_cnn"))
                                                                for o in overrides):
        raise ConfigError("give --config FILE (e.g. configs/cpu-1h.toml) or the model size (--set preset=small, "
                          "--set lstm.dim=...): the defaults are the original model's size (4096-cell LSTMs, "
                          "minutes per step on a CPU)")
    elif (out / RUN_NAME).exists() and not args.overwrite and os.environ.get("RANK", "0") == "0":
        raise ConfigError(f"{out} holds an earlier run: continue it with --resume, or replace it with --overwrite")
    return load_config(args.config, overrides, base=base)
