"""The Chinese sense demonstration (``pyelmo demo --lang zh``): seven words of two senses each (苹果 the fruit
or the company, 运动 sport or a social movement, 出口 exit or export, 水平 level or horizontal, 东西 thing or
east-west, 生气 angry or vitality, 骄傲 pride or arrogant), in sentences that jieba segments with the word as a
token of its own.  Layer 0 sees only the characters, so it gives the same vector in every context."""

from __future__ import annotations

from pathlib import Path

from pyelmo.evaluation.senses import read_sense_contexts

#: (word, sentences) compared across contexts in the printed table.
SEED_PAIRS: list[tuple[str, list[str]]] = [
    ("苹果", ["我每天早上吃一个苹果。", "苹果发布了新款笔记本电脑。"]),
    ("运动", ["他每天坚持运动一个小时。", "他参加了当年的学生运动。"]),
]

#: Several contexts per sense: the same-sense vs different-sense table and the figure. Modern everyday
#: sentences in which jieba segments the word as a token of its own (a test checks it), in ``data/demo-zh.tsv``
#: (beside ``demo-en.tsv``, :data:`pyelmo.evaluation.demo.DATA`). The held-out contexts of the same words, for
#: measuring, are ``tests/data/senses-zh.tsv``.
SENSE_CONTEXTS: dict[str, dict[str, list[str]]] = read_sense_contexts(Path(__file__).with_name("data") / "demo-zh.tsv")

#: The words as the figure names them when no font with Chinese characters is installed.
LATIN_LABELS = {"苹果": "pingguo (apple)", "运动": "yundong (sport / movement)", "出口": "chukou (exit / export)",
                "水平": "shuiping (level / horizontal)", "东西": "dongxi (thing / east-west)",
                "生气": "shengqi (angry / vitality)", "骄傲": "jiao'ao (pride / arrogant)"}


def chinese_font() -> str | None:
    """The name of an installed font with Chinese characters that matplotlib finds, or None."""
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    return next((n for n in ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
                             "WenQuanYi Micro Hei", "Droid Sans Fallback", "AR PL UMing CN", "SimHei",
                             "Microsoft YaHei", "PingFang SC", "Noto Sans CJK JP") if n in names), None)
