"""``pyelmo serve``: the JSON API and the page, run by uvicorn."""

from __future__ import annotations

import argparse

from pyelmo.cli.common import add_lang_argument, add_model_arguments, add_precision_arguments

DESCRIPTION = """\
Serve a biLM over HTTP: a page at / to type sentences, click a word and see its
similarity to the same word in the other sentences per layer, a 2-D projection of its
contexts and the LM's predictions for it; and a JSON API for programs:

  POST /v1/embed        per-token vectors (chosen layers, their average or a mix)
  POST /v1/similarity   a word's cosine similarity across sentences, per layer
  POST /v1/neighbours   a word's nearest contexts in a built-in sample corpus
  POST /v1/predict      the LM's top words for a blank (___)
  POST /v1/tokenize     tokens as the other endpoints see them
  GET  /health, GET /v1/models, GET /openapi.json

Concurrent requests are batched into one biLM call (the first waits at most
--max-wait-ms for others). Requests over the limits get a 4xx JSON error naming the
field. Raw-text sentences are split into words as --lang says (Chinese, Japanese and
Thai by a word segmenter, an optional extra); lists of tokens are taken as they are.
With --lang zh the page is in Chinese and opens on a Chinese example, and the sample
corpus has Chinese sentences besides the English ones.
SIGTERM (or Ctrl-C) stops accepting connections, finishes the requests in
flight and exits 0. The sample corpus's vectors are computed at start and cached in
$PYELMO_SERVE_CACHE (default ~/.cache/pyelmo/serve). Needs the `serve` extra:
pip install 'pyelmo[serve]'."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="a page and a JSON API over HTTP (embed, similarity, neighbours, predict)",
                            description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="server processes, each with its own copy of the model (default 1)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="PyTorch threads per worker for the model (default: one fewer than the CPUs, at "
                             "least 1; the other runs the server itself)")
    add_model_arguments(parser)
    add_precision_arguments(parser.add_argument_group("precision (default: exact float32; shown in /v1/models)"),
                            kept=True)
    add_lang_argument(parser, suffix=" (in the server's log)")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--max-wait-ms", type=float, default=5.0, metavar="MS",
                          help="longest a request waits for others to share its biLM call (default 5)")
    batching.add_argument("--max-batch-tokens", type=int, default=4096, metavar="N",
                          help="token positions per biLM call (default 4096)")
    batching.add_argument("--no-batching", action="store_true",
                          help="embed each request alone, in arrival order (for comparison)")
    limits = parser.add_argument_group("limits per request")
    limits.add_argument("--max-body-bytes", type=int, default=1_000_000, metavar="N", help="default 1000000")
    limits.add_argument("--max-sentences", type=int, default=64, metavar="N", help="default 64")
    limits.add_argument("--max-tokens", type=int, default=100, metavar="N",
                        help="tokens per sentence (default 100)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="uvicorn's log level (default info)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os

    from dataclasses import asdict

    from pyelmo.cli.common import check_precision, model_source, quantization
    from pyelmo.errors import InputError
    from pyelmo.serve.process import check_address, check_serve_extra, run_server

    check_serve_extra()
    if args.threads is None:
        args.threads = max(1, (os.cpu_count() or 2) - 1)
    for name in ("port", "workers", "threads", "max_batch_tokens", "max_body_bytes", "max_sentences", "max_tokens"):
        value = getattr(args, name)
        if value < (0 if name == "port" else 1) or (name == "port" and value > 65535):
            raise InputError(f"--{name.replace('_', '-')} out of range: {value}")
    if args.max_wait_ms < 0:
        raise InputError(f"--max-wait-ms must not be negative: {args.max_wait_ms}")
    from pyelmo.text.tokenize import check_lang

    check_lang(args.lang)  # --lang zh|ja|th: its segmenter is installed
    check_address(args.host, args.port)
    check_precision(args)  # before the workers start
    rule = quantization(args)

    model, weight_file = model_source(args)  # no --model: build_service resolves the shipped model of --lang
    settings = {"model": model, "weight_file": weight_file, "lang": args.lang, "threads": args.threads,
                "precision": args.precision, "quantization": None if rule is None else asdict(rule),
                "int8_cache": args.int8_cache,
                "batching": not args.no_batching,
                "max_wait": args.max_wait_ms / 1000, "max_batch_tokens": args.max_batch_tokens,
                "limits": {"max_body_bytes": args.max_body_bytes, "max_sentences": args.max_sentences,
                           "max_tokens": args.max_tokens}}
    banner = (f"pyelmo serve: http://{args.host}:{args.port}/ (batching "
              f"{'off' if args.no_batching else f'on, max wait {args.max_wait_ms:g} ms'}; {args.workers} worker(s), "
              f"{args.threads} model thread(s) each)")
    run_server(settings, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level,
               banner=banner)
    return 0
