"""The layering rule of docs/ARCHITECTURE.md: a module imports only from its own layer or below."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "pyelmo"

#: Lowest first, by folder (a top-level module is its own entry). A module may import modules of
#: its own entry, of its layer or of a lower one, never higher.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation", ["errors", "fileio", "paths", "config", "text"]),
    ("modeling", ["modeling"]),
    ("runtime", ["runtime"]),
    ("model files", ["modelio"]),
    ("language model", ["lm"]),
    ("embedding", ["embedding"]),
    ("corpus", ["corpus"]),
    ("evaluation", ["evaluation"]),
    ("applications", ["tasks", "serve", "integrations", "web"]),
    ("training", ["training"]),
    ("interface", ["cli", "__main__", "__init__"]),
]
#: The most modules directly in ``src/pyelmo``: the rest live in folders by job.
MAX_TOP_LEVEL_MODULES = 12


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__") if name != "__init__" else ""


def _layer_of(module: str) -> int:
    """The layer of ``a.b.c`` (folder ``a``'s layer; the package ``pyelmo`` itself is the interface)."""
    first = module.split(".")[0] if module else "__init__"
    for index, (_, names) in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"pyelmo.{module} has no layer in LAYERS (and docs/ARCHITECTURE.md): place it")


def _imports(path: Path) -> set[str]:
    """Every ``pyelmo`` module a module imports, at the top or inside functions (relative imports
    resolved; ``from pyelmo.a import b`` counts as ``a.b`` where ``b`` is a module)."""
    found = set()
    package = _module_name(path).split(".")[:-1] if path.is_relative_to(SRC) else []
    if path.name == "__init__.py" and path.is_relative_to(SRC):
        package = _module_name(path).split(".") if _module_name(path) else []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "pyelmo":
                base = node.module.partition(".")[2]
            else:
                continue
            found.add(base)
            found.update(f"{base}.{a.name}".strip(".") for a in node.names if _is_module(f"{base}.{a.name}".strip(".")))
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "pyelmo")
    return found


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p) or "pyelmo")
def test_module_imports_only_its_layer_or_below(path):
    name = _module_name(path)
    own = _layer_of(name)
    for imported in _imports(path):
        layer = _layer_of(imported)
        assert layer <= own, (f"pyelmo.{name} ({LAYERS[own][0]}) imports pyelmo.{imported} "
                              f"({LAYERS[layer][0]}), a higher layer")


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (top level and inside functions), packages' ``__init__`` included."""
    return {_module_name(p): {i for i in _imports(p) if i != _module_name(p)} for p in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_model_imports_nothing_from_the_machinery_above_it():
    """modeling/ is plain ``nn.Module`` s: nothing of runtime/ (plans, kernels, caches), at the top or inside functions."""
    found = {f"{_module_name(p)} -> {i}" for p in (SRC / "modeling").glob("*.py") for i in _imports(p)
             if i.split(".")[0] not in ("modeling", "config", "errors")}
    assert not found, sorted(found)


def test_no_module_imports_a_cycle_even_inside_functions():
    """A package's ``__init__`` importing its own modules is not a cycle unless one of them imports it back."""
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(f"pyelmo.{m}" for m in cycle)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_few_modules_at_the_top_level():
    top = sorted(p.stem for p in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_nothing_outside_training_and_the_command_line_imports_training():
    for path in MODULES:
        name = _module_name(path)
        if name.split(".")[0] in ("training", "cli"):
            continue
        assert not any(i.split(".")[0] == "training" for i in _imports(path)), name


def test_the_layer_table_is_the_documented_one():
    doc = (SRC.parents[1] / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for layer, names in LAYERS:
        assert f"**{layer}**" in doc, layer
        for name in names:
            assert f"`{name}`" in doc or f"`{name}/`" in doc, name


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: a modeling module importing the embedder is reported."""
    source = (SRC / "modeling" / "lstm.py").read_text(encoding="utf-8")
    copy = tmp_path / "lstm.py"
    copy.write_text(source + "\n\ndef _f():\n    from pyelmo.embedding.embedder import ElmoEmbedder\n",
                    encoding="utf-8")
    assert "embedding.embedder" in _imports(copy)
    assert _layer_of("embedding.embedder") > _layer_of("modeling.lstm")


TESTS = Path(__file__).resolve().parents[1]
#: Test folders beside those named after a package folder: whole-project checks.
PROJECT_TEST_FOLDERS = {"project"}


def _misplaced_tests(tests: Path, src: Path) -> list[str]:
    """Test files not in ``tests/<folder>/``, where the folder is a package folder of ``src`` or a project one."""
    folders = {p.parent.name for p in src.glob("*/__init__.py")} | PROJECT_TEST_FOLDERS
    return sorted(str(p.relative_to(tests)) for p in tests.rglob("test_*.py")
                  if len(p.relative_to(tests).parts) != 2 or p.parent.name not in folders)


def test_tests_are_grouped_by_the_package_folder_they_test():
    assert _misplaced_tests(TESTS, SRC) == []


def test_the_grouping_check_catches_a_misplaced_test(tmp_path):
    for path in ("test_flat.py", "runtime/test_ok.py", "project/test_ok.py", "utils/test_odd.py",
                 "runtime/deep/test_deep.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("", encoding="utf-8")
    assert _misplaced_tests(tmp_path, SRC) == ["runtime/deep/test_deep.py", "test_flat.py", "utils/test_odd.py"]


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


def test_help_carries_no_benchmark_figures():
    """``--help`` says what an option does; speed-ups and rates belong in benchmarks/RESULTS.md."""
    import argparse
    import re

    from pyelmo.cli import build_parser

    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    yield from parsers(child)

    figure = re.compile(r"\d(?:\.\d+)?x\b|GFLOP|tokens/s|sentences/s")
    found = {p.prog: figure.findall(p.format_help()) for p in parsers(build_parser())}
    assert not {prog: hits for prog, hits in found.items() if hits}
    assert len(found) > 20


# -- size: a module holds one job, a function reads as named steps (docs/ARCHITECTURE.md) -----------------

MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60
#: Modules still over ``MAX_MODULE_LINES`` while issue 38 splits them; remove each name as its split lands.
LONG_MODULES_TO_SPLIT: set[str] = set()
#: Functions still over ``MAX_FUNCTION_LINES`` while issue 38 (item 4) splits them; likewise.
LONG_FUNCTIONS_TO_SPLIT: set[str] = set()


def _function_lengths(path: Path) -> dict[str, int]:
    """``module.Class.function`` (nested: ``module.outer.inner``) -> its lines, ``def`` to last line
    (a function's length includes the functions nested in it)."""
    module = _module_name(path) if path.is_relative_to(SRC) else path.stem
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}.{child.name}"
                found[name] = child.end_lineno - child.lineno + 1
                visit(child, name)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8")), module)
    return found


def test_no_module_is_over_300_lines():
    """Split by job: a module over 300 lines holds more than one job."""
    long = {_module_name(p): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not {m: n for m, n in long.items() if m not in LONG_MODULES_TO_SPLIT}, long
    assert not LONG_MODULES_TO_SPLIT - set(long), "now short enough: remove from LONG_MODULES_TO_SPLIT"


def test_no_function_is_over_60_lines():
    """A long function is a list of steps: each step gets a name (a function) of its own."""
    long = {f: n for p in MODULES for f, n in _function_lengths(p).items() if n > MAX_FUNCTION_LINES}
    assert not {f: n for f, n in long.items() if f not in LONG_FUNCTIONS_TO_SPLIT}, long
    assert not LONG_FUNCTIONS_TO_SPLIT - set(long), "now short enough: remove from LONG_FUNCTIONS_TO_SPLIT"


def test_the_length_check_names_methods_and_nested_functions(tmp_path):
    copy = tmp_path / "steps.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(61))
    copy.write_text(f"class A:\n    def run(self):\n{body.replace('    ', '        ')}\n"
                    f"def outer():\n    def inner():\n        return 1\n{body}", encoding="utf-8")
    assert _function_lengths(copy) == {"steps.A.run": 62, "steps.outer": 64, "steps.outer.inner": 2}


def test_nothing_writes_run_settings_onto_a_model_it_was_handed():
    """Issue 16 item 2: ``ElmoEmbedder`` and ``Elmo`` keep their run options to themselves."""
    import torch

    from pyelmo import Elmo, ElmoEmbedder, batch_to_ids
    from pyelmo.modelio.weights import load_bilm_hdf5

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


# -- the math once, in modeling/; runtime/ is handed tensors, never reads a model's fields -----------------

#: Names torch gives its tensors and modules (``weight``, ``bias``, ``parameters()``...): generic, not modeling's.
TORCH_NAMES = {"weight", "bias", "in_features", "out_features"}


def _class_vocabulary(paths) -> set[str]:
    """The names the classes of ``paths`` define: ``self.X = ...`` fields, class-level fields and methods."""
    names = set()
    for path in paths:
        for cls in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                        isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
    return names


def _modeling_fields() -> set[str]:
    """What modeling's objects hold by name and runtime/ must not read (runtime's own vocabulary and torch's
    generic names are left out: ``plan.level_order`` is runtime's, ``layer.weight`` torch's)."""
    import torch

    generic = set(dir(torch.Tensor)) | set(dir(torch.nn.Module)) | TORCH_NAMES
    runtime = _class_vocabulary((SRC / "runtime").glob("*.py"))
    return _class_vocabulary((SRC / "modeling").glob("*.py")) - generic - runtime - {"__init__"}


def _reads_of(path: Path, fields: set[str]) -> list[str]:
    """``obj.field`` reads (and calls) in ``path`` of any of ``fields``, on anything but ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in fields and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_runtime_reads_no_modeling_object_by_its_fields():
    """runtime/ swaps its modules in for modeling/'s by type (``runtime.planning.swap_modules``), never reaching
    into a layer's fields by name (duck typing the layering rule cannot see)."""
    fields = _modeling_fields()
    assert {"input_gates", "state_gates", "projection", "gate_bias", "cell", "token_encoder", "directions",
            "conv_max", "level"} <= fields
    reads = [r for path in sorted((SRC / "runtime").glob("*.py")) for r in _reads_of(path, fields)]
    assert not reads, reads


def test_the_field_check_catches_a_read(tmp_path):
    copy = tmp_path / "backends.py"
    copy.write_text("def steps(layer):\n    return layer.state_gates.weight, layer.gate_bias()\n", encoding="utf-8")
    assert _reads_of(copy, _modeling_fields()) == ["backends.py:2 .state_gates", "backends.py:2 .gate_bias"]


def _lstm_steps(path: Path) -> list[str]:
    """The functions of ``path`` that compute an LSTM cell: they apply both ``sigmoid`` and ``tanh``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            called = {(c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", None))
                      for c in ast.walk(node) if isinstance(c, ast.Call)}
            if {"sigmoid", "tanh"} <= called:
                found.append(f"{_module_name(path) if path.is_relative_to(SRC) else path.stem}."
                             f"{getattr(node, 'name', 'lambda')}")
    return found


def test_one_lstm_step_in_the_package():
    """The cell is written once, in modeling/lstm.py; every backend and variant runs it."""
    steps = [s for path in MODULES for s in _lstm_steps(path)]
    assert steps == ["modeling.lstm.cell"], steps


def test_the_step_check_catches_a_second_cell(tmp_path):
    copy = tmp_path / "fast.py"
    copy.write_text("import torch\n\ndef step(g, c):\n    i, f = g.sigmoid().chunk(2)\n"
                    "    return f * c + i * torch.tanh(g)\n", encoding="utf-8")
    assert _lstm_steps(copy) == ["fast.step"]
