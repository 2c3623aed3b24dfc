"""``pyelmo embed``: a file of sentences to an HDF5 file of contextual vectors."""

from __future__ import annotations

import argparse

from pyelmo.cli.common import add_lang_argument, add_model_arguments, add_plan_arguments, plan_settings, prefetched_model
from pyelmo.text.batching import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_CACHE_SIZE

DESCRIPTION = """\
Embed INPUT (one whitespace-tokenized sentence per line, or raw text with --tokenize;
'-' reads stdin) into OUTPUT, an HDF5 file in the layout of AllenNLP's `elmo` command:
one float32 dataset per line, keyed by its line index ("0", "1", ...), shaped (layers,
tokens, dim) with --all or (tokens, dim) with --top / --average (with --sentence-vectors
one vector per line: (layers, dim) or (dim,), the mean over the line's tokens), plus
`sentence_to_index` (JSON) unless --forget-sentences. Work is kept in .OUTPUT.parts/
(one file per 1024 lines) and the output appears only when complete; after an
interruption, --resume continues where the run stopped. Without --model or
--options-file/--weight-file the shipped English model is used.

The products follow an execution plan: by default a fixed rule of this CPU's features and the
PyTorch version, so the same command and input give the same bits in every run; the plan is
recorded in OUTPUT's attributes, and `pyelmo env` prints it. --precision int8 is an explicit reduced-precision mode for
large corpora on a CPU: the released models' large products run on int8 weights (quantized at
load, the only copy kept) and int8 inputs; the same bits every run, vectors close to the exact
ones (OUTPUT records precision = int8)."""


TOKENIZE_HELP = ("the lines are raw text: split them into words (Moses-style, or for Chinese, Japanese and Thai "
                 "with a word segmenter; see --lang), as `pyelmo similarity` does, instead of on whitespace")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("embed", help="embed a file of sentences into HDF5", description=DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", metavar="INPUT", help="text file, one tokenized sentence per line ('-' = stdin)")
    parser.add_argument("output", metavar="OUTPUT", help="HDF5 file to write")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--all", dest="output_format", action="store_const", const="all",
                     help="all layers, (layers, tokens, dim) per sentence (default)")
    fmt.add_argument("--top", dest="output_format", action="store_const", const="top",
                     help="top layer only, (tokens, dim)")
    fmt.add_argument("--average", dest="output_format", action="store_const", const="average",
                     help="mean of the layers, (tokens, dim)")
    parser.add_argument("--sentence-vectors", action="store_true",
                        help="one vector per line instead of per token: the mean over the line's tokens (TF Hub "
                             "ELMo's `default` output; padding never counts), of the layers --all/--top/--average "
                             "choose: (layers, dim) or (dim,); OUTPUT records pooling = mean")
    add_model_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help=f"sentences per batch with --stateful or --max-tokens 0; otherwise sentences are "
                             f"sorted by length in windows of 16 x N (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N",
                        help="without --stateful: pack length-sorted sentences into batches of at most N token "
                             f"positions (0: fixed --batch-size batches; default {DEFAULT_MAX_TOKENS}); "
                             "the vectors do not depend on it")
    parser.add_argument("--token-cache-size", type=int, default=DEFAULT_TOKEN_CACHE_SIZE, metavar="N",
                        help=f"keep N token-encoder outputs across batches (0: off; default {DEFAULT_TOKEN_CACHE_SIZE})")
    parser.add_argument("--shard", metavar="I/N",
                        help="embed only lines whose index is I modulo N (keys stay the line indexes); 'env' "
                             "takes I and N from torchrun's RANK and WORLD_SIZE; '{rank}' in OUTPUT is replaced "
                             "by I. Join the shard files with pyelmo embed-merge")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--tokenize", action="store_true", help=TOKENIZE_HELP)
    add_lang_argument(parser, default=None, prefix="with --tokenize: ")
    parser.add_argument("--stateful", action="store_true",
                        help="carry LSTM states from batch to batch row by row, like the original "
                             "implementations (batches are consecutive lines); default: every sentence "
                             "starts from zero states")
    parser.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")
    parser.add_argument("--use-sentence-keys", action="store_true",
                        help="key datasets by the sentence text instead of the line index")
    parser.add_argument("--skip-blank-lines", action="store_true",
                        help="accept blank lines (their dataset is an empty array) instead of failing")
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument("--resume", action="store_true",
                        help="continue an interrupted run with the same input, model and settings, "
                             "reusing the segments it finished")
    add_plan_arguments(parser)
    from pyelmo.modelio.onnx_runtime import DEFAULT_RUNTIME, RUNTIMES

    parser.add_argument("--runtime", choices=list(RUNTIMES), default=DEFAULT_RUNTIME,
                        help="the execution backend: " + "; ".join(f"{k}: {v}" for k, v in RUNTIMES.items()) +
                             ". --model may be a folder 'pyelmo export --format onnx' wrote (onnxruntime only)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--no-overlap-writes", dest="overlap_writes", action="store_false",
                        help="write the vectors to disk between batches instead of in a background thread "
                             "while the next batches are computed (the same file either way)")
    parser.set_defaults(func=run, output_format="all")


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``I/N`` or ``env`` (torchrun's ``RANK``/``WORLD_SIZE``) -> ``(I, N)`` (the job checks its range)."""
    import os

    from pyelmo.errors import InputError

    if value is None:
        return None
    if value == "env":
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise InputError("--shard env needs RANK and WORLD_SIZE (run it under torchrun)")
        value = f"{os.environ['RANK']}/{os.environ['WORLD_SIZE']}"
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise InputError(f"--shard must be I/N or env, got {value!r}") from None
    return index, count


def embed_job(args: argparse.Namespace):
    """The :class:`~pyelmo.embedding.job.EmbedJob` of the command line (checked: before the model loads)."""
    from pyelmo.embedding.job import EmbedJob

    shard = parse_shard(args.shard)
    output = args.output.replace("{rank}", str(shard[0])) if shard is not None else args.output
    return EmbedJob(args.input, output, output_format=args.output_format,
                    pool="mean" if args.sentence_vectors else None, forget_sentences=args.forget_sentences,
                    use_sentence_keys=args.use_sentence_keys, skip_blank_lines=args.skip_blank_lines,
                    tokenize=args.tokenize, lang=args.lang, shard=shard, resume=args.resume,
                    overwrite=args.overwrite, progress=not args.no_progress, overlap_writes=args.overlap_writes)


def run(args: argparse.Namespace) -> int:
    from pyelmo.errors import InputError
    from pyelmo.modelio.onnx_runtime import check_runtime

    check_runtime(args.runtime)
    job = embed_job(args)
    job.check_run(args.stateful)  # before the model loads
    source = prefetched_model(args, args.runtime)  # a bilm-tf model's weights are read while PyTorch is imported
    from pyelmo.embedding.embedder import ElmoEmbedder

    if args.threads is not None:
        import torch

        if args.threads < 1:
            raise InputError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    embedder = ElmoEmbedder(source, batch_size=args.batch_size, stateful=args.stateful,
                            device=args.device, max_tokens=args.max_tokens or None,
                            token_cache_size=args.token_cache_size, runtime=args.runtime, **plan_settings(args))
    count = embedder.embed_job(job)
    print(f"wrote {count} sentences to {job.output}")
    return 0
