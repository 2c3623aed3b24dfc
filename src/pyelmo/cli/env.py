"""``pyelmo env``: the execution plan a model's products run with on this machine."""

from __future__ import annotations

import argparse
import json

from pyelmo.cli.common import add_model_arguments, add_plan_arguments, plan_settings, resolved_model

DESCRIPTION = """\
Print the execution plan pyelmo's inference products follow for a model on this machine, and
what it was decided from (CPU, PyTorch, oneDNN, threads): for each product weight and row class,
the kernel (torch.mm on W, oneDNN prepacked, or bmm: a time step's products of
both directions batched) and precision, and how each LSTM level runs its two directions. The
default plan is a fixed rule of the CPU's features and the PyTorch version, so the same command
and input give the same bits in every run. `pyelmo embed` records the plan in its output.
With --precision int8 it also says whether int8 is expected to pay on this CPU, by its class (AMX-INT8,
AVX512-VNNI or AVX-VNNI: yes; AVX2 without VNNI: no, as measured), in JSON as "int8_outlook"."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("env", help="the execution plan of a model's products on this machine",
                            description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser)
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.runtime.int8_outlook import int8_outlook

    embedder = ElmoEmbedder(resolved_model(args), **plan_settings(args))
    report = embedder.explain()
    outlook = int8_outlook() if embedder.options.plan.precision == "int8" else None
    if outlook is not None:
        report["int8_outlook"] = outlook.as_dict()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"plan: {report['plan']}")
    if outlook is not None:
        print(outlook.line())
    print("level order: " + ", ".join(f"{rows} {order}" for rows, order in report["level_order"].items()))
    width = max(len(row["product"]) for row in report["products"])
    kernel = max(len(row["kernel"]) for row in report["products"])
    print(f"{'product':{width}}  {'weight':>11}  {'rows':>5}  {'kernel':{kernel}}  precision")
    for row in report["products"]:
        shape = "x".join(map(str, row["weight"]))
        print(f"{row['product']:{width}}  {shape:>11}  {row['rows']:>5}  {row['kernel']:{kernel}}  {row['precision']}")
    return 0
