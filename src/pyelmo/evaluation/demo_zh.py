"""The Chinese sense demonstration (``pyelmo demo --lang zh``): seven words of two senses each (苹果 the fruit
or the company, 运动 sport or a social movement, 出口 exit or export, 水平 level or horizontal, 东西 thing or
east-west, 生气 angry or vitality, 骄傲 pride or arrogant), in sentences that jieba segments with the word as a
token of its own.  Layer 0 sees only the characters, so it gives the same vector in every context."""

from __future__ import annotations

#: (word, sentences) compared across contexts in the printed table.
SEED_PAIRS: list[tuple[str, list[str]]] = [
    ("苹果", ["我每天早上吃一个苹果。", "苹果发布了新款笔记本电脑。"]),
    ("运动", ["他每天坚持运动一个小时。", "他参加了当年的学生运动。"]),
]

#: Several contexts per sense: the same-sense vs different-sense table and the figure. Modern everyday
#: sentences in which jieba segments the word as a token of its own (a test checks it). The held-out
#: contexts of the same words, for measuring, are ``tests/data/senses-zh.tsv``.
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
    "出口": {
        "exit": ["商场的出口在电梯旁边。", "地铁站有四个出口。", "请从东边的出口离开。", "我们在出口等你。"],
        "export": ["今年的出口增长很快。", "这家公司的产品主要用于出口。", "他们扩大了纺织品的出口。",
                   "出口企业的利润下降了。"],
    },
    "水平": {
        "level": ["他的汉语水平很高。", "人民的生活水平不断提高。", "这家医院的医疗水平很好。", "她的演讲水平进步很快。"],
        "horizontal": ["把这块木板放水平。", "桌面不水平，球会滚下去。", "飞机保持水平飞行。", "地面要铺得很水平。"],
    },
    "东西": {
        "thing": ["我去超市买点东西。", "这个东西很好用。", "她把东西忘在出租车上了。", "这家店的东西很便宜。"],
        "east-west": ["这条大街东西走向。", "城市的东西两边差别很大。", "长城东西绵延上万里。", "这座桥连接了东西两岸。"],
    },
    "生气": {
        "angry": ["妈妈听了以后非常生气。", "他生气地关上了门。", "老板因为这件事很生气。", "服务员的态度让我很生气。"],
        "vitality": ["春天的校园充满了生气。", "新来的年轻人给工厂带来了生气。", "这座老城又有了生气。",
                     "农村面貌一新，处处充满生气。"],
    },
    "骄傲": {
        "pride": ["他是我们全家的骄傲。", "我为祖国感到骄傲。", "这些成绩让父母很骄傲。", "运动员们是国家的骄傲。"],
        "arrogant": ["他太骄傲了，听不进别人的意见。", "取得成绩以后不要骄傲。", "虚心使人进步，骄傲使人落后。",
                     "这个人很骄傲，看不起别人。"],
    },
}

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
