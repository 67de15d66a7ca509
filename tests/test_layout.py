"""The package's shape, held where it stands so it can only get better (issue 25's budgets).

Read from the source with `ast` (nothing imported): no module over 600 lines and no function over
80, no import cycle among aotgrad's modules (function-level imports included: they are how a cycle
hides), and no more modules directly in `aotgrad/` than today. Each allow-list names what breaks a
rule now; an entry that no longer breaks it fails too, so the list shrinks as the code is mended.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "aotgrad"

MODULE_LINES, FUNCTION_LINES = 600, 80
LONG_MODULES = {"partition/min_cut.py", "functionalize/rewrite.py", "report.py", "compiled_autograd/key.py"}
LONG_FUNCTIONS = {"analysis.py:analyse_outputs", "trace/tracer.py:GraphRecorder.__torch_dispatch__"}
FLAT_MODULES = 29  # (issue 25 wants about 10; this only keeps the number from growing)
# Modules that import each other, through imports inside functions: (the cycles to break)
CYCLES = [
    {"aotgrad.api", "aotgrad.simplified"},
    {"aotgrad.runtime.function", "aotgrad.runtime.wrapper"},
    {"aotgrad.errors", "aotgrad.trace.tracer", "aotgrad.trace.symbolic"},
    {"aotgrad.compiled_autograd.replay", "aotgrad.compiled_autograd.replay_code"},
    {"aotgrad.config", "aotgrad.logs"},
    {"aotgrad.distributed", "aotgrad.distributed.ddp", "aotgrad.distributed.explain"},
]


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, prefix + node.name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def _imports(tree: ast.AST, modules: dict) -> set[str]:
    """The package's modules `tree` imports anywhere in it (inside functions too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            named_only = any(f"{node.module}.{alias.name}" not in modules for alias in node.names)
            found.update(submodules | ({node.module} if named_only else set()))
    return found


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while not component or w != v:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
            if len(component) > 1:
                found.append(component)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_grows_past_600_lines():
    long = {_relative(p) for p in _modules().values() if len(p.read_text().splitlines()) > MODULE_LINES}
    assert long == LONG_MODULES, f"over {MODULE_LINES} lines: {sorted(long - LONG_MODULES)}; " \
        f"now within (take them off LONG_MODULES): {sorted(LONG_MODULES - long)}"


def test_no_function_grows_past_80_lines():
    long = {f"{_relative(p)}:{name}" for p in _modules().values()
            for name, lines in _functions(ast.parse(p.read_text())) if lines > FUNCTION_LINES}
    assert long == LONG_FUNCTIONS, f"over {FUNCTION_LINES} lines: {sorted(long - LONG_FUNCTIONS)}; " \
        f"now within (take them off LONG_FUNCTIONS): {sorted(LONG_FUNCTIONS - long)}"


def test_no_new_module_directly_in_the_package():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= FLAT_MODULES, f"{len(flat)} modules directly in aotgrad/ (at most {FLAT_MODULES}): {flat}"


def test_no_new_import_cycle():
    """Import cycles, the package's `__init__` left out (every module is reached through it)."""
    modules = _modules()
    edges = {name: _imports(ast.parse(path.read_text()), modules) - {"aotgrad"}
             for name, path in modules.items() if name != "aotgrad"}
    cycles = _cycles(edges)
    new = [sorted(c) for c in cycles if c not in CYCLES]
    gone = [sorted(c) for c in CYCLES if c not in cycles]
    assert not new and not gone, f"new cycles: {new}; broken (take them off CYCLES): {gone}"


def test_the_cycle_finder_finds_a_loop_through_a_function_level_import():
    tree = ast.parse("def f():\n    from aotgrad.b import x\n")
    modules = {"aotgrad.a": None, "aotgrad.b": None}
    assert _imports(tree, modules) == {"aotgrad.b"}
    assert _cycles({"aotgrad.a": {"aotgrad.b"}, "aotgrad.b": {"aotgrad.a"}, "aotgrad.c": {"aotgrad.a"}}) \
        == [{"aotgrad.a", "aotgrad.b"}]
