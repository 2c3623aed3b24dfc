"""``pyelmo demo`` and ``pyelmo similarity``: the same word, different contexts, different vectors."""

from __future__ import annotations

import argparse

from pyelmo.cli.common import add_lang_argument, add_model_arguments, load_embedder
from pyelmo.errors import InputError

DEMO_DESCRIPTION = """\
Show what ELMo adds over static word vectors. For "bank" (money vs river), "apple"
(fruit vs company) and "play" (game, role, music), print the cosine similarity of the
word's vectors across sentences at layer 0 (context-independent: 1.000 for the same
spelling; "apple" and "Apple" differ in their characters, so even layer 0 differs), at
each contextual layer and at the average of the layers. Then, over several contexts per
sense, the mean similarity of same-sense pairs vs different-sense pairs per layer (the
claim is "closer within a sense than across senses"; layer 0 has no gap by construction).
The PNG shows the top-layer similarity heatmap of "bank" in 16 contexts ordered by sense,
their PCA projection, and per word a bar chart of same- vs different-sense similarity.

--lang zh: the same in Chinese, for 苹果 (fruit vs company) and 运动 (sport vs movement),
segmented by jieba (pip install 'pyelmo[zh]'), on the shipped Chinese model unless --model names
another. Without
an installed font with Chinese characters, the figure names the words in pinyin and numbers
the sentences."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help='the "bank" example: contextual vs static vectors',
                          description=DEMO_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(demo)
    demo.add_argument("--out", "--plot", dest="plot", default="pyelmo-demo.png", metavar="PNG",
                      help="where to write the figure (default pyelmo-demo.png in the current folder; '' to skip "
                           "it); an earlier demo figure there is replaced, any other file only with --overwrite")
    demo.add_argument("--overwrite", action="store_true", help="replace --out even if the demo did not write it")
    demo.add_argument("--lang", choices=("en", "zh"), default="en",
                      help="the demo's language: en (bank, apple, play; default) or zh (苹果, 运动; without --model, "
                           "on the shipped Chinese model)")
    demo.set_defaults(func=run_demo)

    sim = sub.add_parser("similarity", help="cosine similarity of a word across two sentences, per layer",
                         description="Cosine similarity of WORD's vectors in two sentences, at every layer "
                                     "and at the average of the layers. Sentences are raw text, split into "
                                     "words Moses-style or, for Chinese, Japanese and Thai, by a word "
                                     "segmenter (--lang).")
    sim.add_argument("first", metavar="SENTENCE1")
    sim.add_argument("second", metavar="SENTENCE2")
    sim.add_argument("--word", help="the word to compare (its first occurrence in each sentence)")
    sim.add_argument("--index", type=int, nargs="+", metavar="I",
                     help="compare the tokens at these positions instead (0-based, after tokenization): one "
                          "for both sentences or one per sentence; picks a later occurrence or a piece of a "
                          "word the tokenizer splits")
    add_lang_argument(sim)
    add_model_arguments(sim)
    sim.set_defaults(func=run_similarity)


def run_demo(args: argparse.Namespace) -> int:
    from pyelmo.evaluation.demo import all_context_vectors, demo_data, format_separation, format_table, separation_of, \
        similarity_rows
    from pyelmo.evaluation.sensefigure import write_sense_figure
    from pyelmo.text.tokenize import check_lang

    replaced = bool(args.plot) and _check_plot_path(args.plot, args.overwrite)  # before any work
    check_lang(args.lang)  # a missing segmenter fails before the model loads
    seed_pairs, _, labels = demo_data(args.lang)
    embedder = load_embedder(args)
    rows = [row for word, sentences in seed_pairs for row in similarity_rows(embedder, word, sentences, lang=args.lang)]
    print(format_table(rows))
    print()
    contexts = all_context_vectors(embedder, lang=args.lang)
    print(format_separation([separation_of(vectors, word, senses) for word, (vectors, senses, _) in contexts.items()]))
    if args.plot:
        written = write_sense_figure(contexts, args.plot, labels).resolve()
        print(f"wrote the figure to {written}" + (" (replacing the one an earlier run wrote)" if replaced else ""))
    return 0


def _check_plot_path(plot: str, overwrite: bool) -> bool:
    """Whether the figure replaces an earlier demo figure; an error if its folder is missing or not
    writable, if it is a folder, or if it is another file (without ``overwrite``)."""
    from pyelmo.evaluation.sensefigure import is_demo_figure
    from pyelmo.fileio import check_output_file

    path = check_output_file(plot, overwrite=True, what="--out")
    if not path.exists():
        return False
    if is_demo_figure(path):
        return True
    if not overwrite:
        raise InputError(f"--out {path} exists and is not a figure pyelmo demo wrote: choose another --out, "
                         f"or replace it with --overwrite")
    return False


def run_similarity(args: argparse.Namespace) -> int:
    from pyelmo.evaluation.demo import format_table, similarity_rows
    from pyelmo.text.tokenize import check_lang, text_language

    if not args.word and not args.index:
        raise InputError("give --word WORD or --index I [J]")
    if args.index and len(args.index) > 2:
        raise InputError(f"--index takes one or two positions, got {len(args.index)}")
    positions = (args.index * 2)[:2] if args.index else None
    for sentence in (args.first, args.second):  # a missing segmenter fails before the model loads
        check_lang(text_language(sentence, args.lang) or "en")
    print(format_table(similarity_rows(load_embedder(args), args.word, [args.first, args.second], positions,
                                       lang=args.lang)))
    return 0
