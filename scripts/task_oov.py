"""Share of test tokens without a shipped static vector, per task (docs/TASKS.md).

    python scripts/task_oov.py work-data/tasks
"""

import sys
from pathlib import Path

from pyelmo.tasks.kind import task_kind
from pyelmo.tasks.static import load_static

static = load_static()
for task, kind, ext in (("bbc", "classify", "tsv"), ("tweets", "classify", "tsv"), ("pos", "tag", "conll"),
                        ("ner", "tag", "conll")):
    tokens = [t for e in task_kind(kind).read(Path(sys.argv[1]) / task / f"test.{ext}") for t in e.tokens]
    unknown = sum(static.lookup(t) is None for t in tokens)
    print(f"{task}: {unknown / len(tokens):.1%} of {len(tokens)} test tokens have no static vector")
