"""The Chinese sense demonstration (``pyelmo demo --lang zh``): 苹果 (the fruit, the company) and 运动
(sport and exercise, a political or social movement), in sentences that jieba segments with the word
as a token of its own.  Layer 0 sees only the characters, so it gives the same vector in every context."""

from __future__ import annotations

#: (word, sentences) compared across contexts in the printed table.
SEED_PAIRS: list[tuple[str, list[str]]] = [
    ("苹果", ["我每天早上吃一个苹果。", "苹果发布了新款笔记本电脑。"]),
    ("运动", ["他每天坚持运动一个小时。", "他参加了当年的学生运动。"]),
]

#: Several contexts per sense: the same-sense vs different-sense table and the figure.
SENSE_CONTEXTS: dict[str, dict[str, list[str]]] = {
    "苹果": {
        "fruit": [
            "我每天早上吃一个苹果。",
            "酒店每天送两个苹果和一根香蕉。",
            "这个苹果又甜又脆。",
            "妈妈在市场上买了一袋苹果。",
            "果园里的苹果熟了。",
            "她把苹果洗干净切成小块。",
        ],
        "company": [
            "苹果发布了新款笔记本电脑。",
            "我一直用苹果的电脑，设计很人性化。",
            "这台电脑的屏幕不如苹果的屏幕。",
            "苹果的键盘手感很好。",
            "苹果的系统比这个好用多了。",
            "他买了一台苹果的笔记本。",
        ],
    },
    "运动": {
        "sport": [
            "他每天坚持运动一个小时。",
            "跑步是一项很好的运动。",
            "我国的排球运动发展很快。",
            "孩子们在操场上做运动。",
            "年轻人喜欢篮球和网球等运动。",
        ],
        "movement": [
            "他参加了当年的学生运动。",
            "这场运动是由一个组织发起的。",
            "一场反对殖民统治的运动开始了。",
            "这项运动的目的是帮助穷人。",
            "农民们参加了这场运动。",
        ],
    },
}

#: The words as the figure names them when no font with Chinese characters is installed.
LATIN_LABELS = {"苹果": "pingguo (apple)", "运动": "yundong (sport / movement)"}


def chinese_font() -> str | None:
    """The name of an installed font with Chinese characters that matplotlib finds, or None."""
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    return next((n for n in ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
                             "WenQuanYi Micro Hei", "Droid Sans Fallback", "AR PL UMing CN", "SimHei",
                             "Microsoft YaHei", "PingFang SC", "Noto Sans CJK JP") if n in names), None)
