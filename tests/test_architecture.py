"""The layering rule of docs/ARCHITECTURE.md: a module imports only from its own layer or below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pyelmo"

#: Lowest first. A module may import modules of its own layer or of a lower one, never higher.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["errors", "fileio", "textfile", "paths", "characters", "tokenize", "batching"]),
    ("schemas", ["config", "vocab"]),
    ("model", ["kernelchoice", "kernels", "trainproducts", "encoder", "lstm", "strategy", "bilm", "fast"]),
    ("model files", ["weights", "downloads", "modelfiles", "hub", "interop", "models"]),
    ("uses of the model", ["embed", "embedfile", "sentenceindex", "mix", "lmtext", "lm", "predict", "senses", "demo", "corpus", "evaluation"]),
    ("applications", ["tasks", "serve", "integrations"]),
    ("training", ["training"]),
    ("interface", ["commands", "cli", "__main__", "__init__"]),
]


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts)


def _layer_of(module: str) -> int:
    """The layer of ``a.b.c`` (package ``a``'s layer; the package ``pyelmo`` itself is the interface)."""
    first = module.split(".")[0] if module else "__init__"
    for index, (_, names) in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"pyelmo.{module} has no layer in LAYERS (and docs/ARCHITECTURE.md): place it")


def _imports(path: Path) -> set[str]:
    """Every ``pyelmo.X`` a module imports, at the top or inside functions (relative imports resolved)."""
    found = set()
    package = _module_name(path).split(".")[:-1] if path.is_relative_to(SRC) else []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module and node.module.split(".")[0] == "pyelmo":
                found.add(node.module.partition(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "pyelmo")
    return found


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_module_imports_only_its_layer_or_below(path):
    name = _module_name(path)
    own = _layer_of(name if not name.endswith("__init__") or "." in name else "__init__")
    for imported in _imports(path):
        layer = _layer_of(imported)
        assert layer <= own, (f"pyelmo.{name} ({LAYERS[own][0]}) imports pyelmo.{imported} "
                              f"({LAYERS[layer][0]}), a higher layer")


def test_nothing_outside_training_and_the_commands_imports_training():
    for path in MODULES:
        name = _module_name(path)
        if name.split(".")[0] in ("training", "commands"):
            continue
        assert not any(i.split(".")[0] == "training" for i in _imports(path)), name


def test_the_layer_table_is_the_documented_one():
    doc = (SRC.parents[1] / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for layer, names in LAYERS:
        assert f"**{layer}**" in doc, layer
        for name in names:
            assert f"`{name}`" in doc, name


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: a model module importing the embedder is reported."""
    bad = SRC / "lstm.py"
    source = bad.read_text(encoding="utf-8") + "\n\ndef _f():\n    from pyelmo.embed import ElmoEmbedder\n"
    copy = tmp_path / "lstm.py"
    copy.write_text(source, encoding="utf-8")
    assert "embed" in _imports(copy) and _layer_of("embed") > _layer_of("lstm")


def test_the_command_line_builds_without_torch_and_takes_debug_after_the_command():
    """``pyelmo COMMAND --help`` stays fast: building every command's parser imports no torch."""
    import subprocess
    import sys

    code = ("import sys; from pyelmo.cli import build_parser; p = build_parser(); "
            "a = p.parse_args(['embed', 'in.txt', 'out.h5', '--debug']); "
            "b = p.parse_args(['--debug', 'embed', 'in.txt', 'out.h5']); c = p.parse_args(['embed', 'i', 'o']); "
            "print(a.debug, b.debug, c.debug, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False", "False"]


#: Modules still over the limit, each being split by the work that owns it (issue 16).
OVER_THE_LIMIT: set[str] = set()


def test_no_module_is_over_about_350_lines():
    """Split by job: a module over ~350 lines holds more than one job (docs/ARCHITECTURE.md)."""
    long = {_module_name(p): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 360}
    assert set(long) <= OVER_THE_LIMIT, long


def test_nothing_writes_run_settings_onto_a_model_it_was_handed():
    """Issue 16 item 2: ``ElmoEmbedder`` and ``Elmo`` keep their run options to themselves."""
    import torch

    from pyelmo import Elmo, ElmoEmbedder, batch_to_ids
    from pyelmo.weights import load_bilm_hdf5

    ref = SRC.parents[1] / "tests" / "fixtures" / "reference" / "allennlp"
    bilm = load_bilm_hdf5(ref / "options.json", ref / "lm_weights.hdf5")

    def settings(model):
        return {name: sorted(k for k in vars(m) if k != "training") for name, m in model.named_modules()}

    before, weights = settings(bilm), {k: v.clone() for k, v in bilm.state_dict().items()}
    for stateful in (False, True):
        ElmoEmbedder(bilm, stateful=stateful, token_cache_size=16).embed_batch([["a", "cat"], ["the", "dog", "ran"]])
    Elmo(bilm, num_output_representations=2, dropout=0.0)(batch_to_ids([["a", "cat"]]))
    assert settings(bilm) == before
    assert all(torch.equal(v, weights[k]) for k, v in bilm.state_dict().items())
