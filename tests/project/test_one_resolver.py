"""One model resolver (docs/ARCHITECTURE.md): what a model argument is, is decided in ``modelio/resolve.py``
(with ``modelio/hub.py``'s tables of names), and a model's weights are read in ``modelio/`` only."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pyelmo"

#: Where a model argument may be told apart: the resolver, and the hub that holds the names' tables.
RESOLVER = {"modelio/resolve.py", "modelio/hub.py"}
#: The calls that decide what a name is (a URL, an archive, the shipped model of a language).
DECIDING_CALLS = {"is_url", "is_archive", "default_model"}
#: The tables a name is looked up in.
NAME_TABLES = {"RELEASES", "SHIPPED"}
#: The model formats (``ResolvedModel.format``) a switch on them would compare with.
FORMATS = {"pyelmo", "bilm-tf", "elmoformanylangs"}
#: Files outside ``modelio/`` that read safetensors files of their own, none of them a biLM's: a task
#: model's weights, the static word vectors, the int8 weight cache.
OWN_SAFETENSORS = {"tasks/saved.py", "tasks/static.py", "runtime/int8_cache.py"}


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _interpretations(path: Path, root: Path = SRC) -> list[str]:
    """Each place ``path`` tells a model argument apart: a deciding call, a look-up of a name in a table of
    names, or a comparison of a ``format`` with a model format; as ``file:line what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        what = None
        if isinstance(node, ast.Call) and _name(node.func) in DECIDING_CALLS:
            what = f"calls {_name(node.func)}"
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            what = next((f"looks a name up in {_name(c)}" for c in node.comparators if _name(c) in NAME_TABLES), None)
        if isinstance(node, ast.Compare) and _name(node.left) == "format":
            constants = {c.value for c in node.comparators if isinstance(c, ast.Constant)}
            what = f"switches on format {sorted(constants & FORMATS)}" if constants & FORMATS else what
        if what:
            found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {what}")
    return found


def _reads_safetensors(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "safetensors":
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "safetensors" for a in node.names):
            return True
    return False


def _files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_only_the_resolver_tells_a_model_argument_apart():
    """No second reading of a name: not ``hub`` against the resolver, not the LM head's own format switch,
    not the task code's name-or-path rule, not a caller's language -> model rule."""
    outside = [f for p in _files() if p.relative_to(SRC).as_posix() not in RESOLVER for f in _interpretations(p)]
    assert outside == []
    assert [f for f in _interpretations(SRC / "modelio" / "resolve.py") if "default_model" in f]  # its one home


def test_the_language_rule_is_called_once():
    calls = [f for p in _files() for f in _interpretations(p) if "calls default_model" in f]
    assert len(calls) == 1 and calls[0].startswith("modelio/resolve.py:"), calls


def test_model_weights_are_read_in_modelio_only():
    """The LM head and every biLM load through the resolver's record (``modelio``); the other safetensors
    readers read files of their own."""
    readers = {p.relative_to(SRC).as_posix() for p in _files() if _reads_safetensors(p)}
    outside = readers - OWN_SAFETENSORS
    assert outside and all(r.startswith("modelio/") for r in outside), sorted(readers)
    assert not OWN_SAFETENSORS - readers, "no longer reads safetensors: remove from OWN_SAFETENSORS"
    assert not any(r.startswith("lm/") for r in readers)


def test_the_check_catches_a_second_interpretation(tmp_path):
    copy = tmp_path / "model.py"
    copy.write_text("from pyelmo.modelio.hub import RELEASES, default_model, is_url\n\n"
                    "def pick(name, lang, source):\n"
                    "    if name in RELEASES or is_url(name):\n        return name\n"
                    "    if source.format == 'bilm-tf':\n        return 'hdf5'\n"
                    "    return default_model(lang)\n", encoding="utf-8")
    assert sorted(_interpretations(copy, tmp_path)) == [
        "model.py:4 calls is_url", "model.py:4 looks a name up in RELEASES",
        "model.py:6 switches on format ['bilm-tf']", "model.py:8 calls default_model"]
    copy.write_text("from safetensors.torch import load_file\n", encoding="utf-8")
    assert _reads_safetensors(copy)
