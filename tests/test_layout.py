"""The package's shape, held where it stands so issue 25 can only make it better (slice L0).

Read from the source with `ast` and plain text (no aotgrad module is imported): module and
function sizes, the modules directly in `aotgrad/`, import cycles (imports inside functions
included: that is how a cycle hides), what `runtime/` imports, and the stage order the docs
state. Each allow-list names what breaks a rule today; an entry that no longer breaks it
fails too, so the lists shrink as the code is mended and never grow back (a ratchet).
docs/runtime_rebuild.md (sections 1 and 4) says which slice mends what.
"""
from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "aotgrad"

MODULE_LINES = 600
LONG_MODULES = {  # today's lines in each; issue 25 slice C2 splits them
    "partition/min_cut.py",  # 732
    "functionalize/rewrite.py",  # 685
}

FUNCTION_LINES = 80
LONG_FUNCTIONS: set[str] = set()  # functions allowed over the budget (issue 25 split the last two, session 28)

FLAT_MODULES = 11  # .py files directly in aotgrad/ today; issue 25 aims at about 10 (runtime_rebuild.md §3)

CYCLES: set[frozenset[str]] = set()  # modules allowed to import each other (issue 25 broke the last, session 28)

PERSISTENCE = {"disk_cache", "graph_pickle", "cache_folder", "generated", "inductor_keys"}

STAGES = ["capture", "analyse", "joint", "functionalize", "partition", "compile", "run"]  # DESIGN.md's order
STAGE_WORDS = {  # how the texts name each stage
    "capture": r"captur", "analyse": r"analy[sz]", "joint": r"joint", "functionalize": r"functionali[sz]",
    "partition": r"partition", "compile": r"compil", "run": r"\brun(?:time)?\b",  # not "runs"
}


# -- reading the package


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its `__init__.py`)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines from `def` to the end) of every function and method, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _ratchet_failures(found: set, allowed: set, rule: str, list_name: str) -> list[str]:
    """What breaks a rule that is not allowed, and what is allowed but no longer breaks it."""
    failures = []
    if found - allowed:
        failures.append(f"{rule}: {sorted(found - allowed)}; split them (STYLE.md: named module-level steps), "
                        f"do not add them to {list_name}")
    if allowed - found:
        failures.append(f"no longer {rule}: {sorted(allowed - found)}; take them off {list_name} in "
                        f"tests/test_layout.py so they stay mended")
    return failures


# -- the import graph


def _is_in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _parents(name: str) -> list[str]:
    """The packages Python imports before `name`: aotgrad.a.b -> aotgrad, aotgrad.a."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _absolute(statement: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from ... import` reads, with relative imports resolved."""
    if not statement.level:
        return statement.module
    base = importer.split(".")[: len(importer.split(".")) + is_package - statement.level]
    return ".".join(base + ([statement.module] if statement.module else []))


def _targets(statement: ast.AST, importer: str, is_package: bool, modules: dict) -> set[str]:
    """The package's modules one import statement runs or reads from.

    A parent package counts when the import runs it (importing aotgrad.a.b runs aotgrad/a/__init__.py
    first), which it never does for the importer's own parents: they are running already. So the root
    `aotgrad` counts only when named (`import aotgrad`, `from aotgrad import nop`).
    """
    if isinstance(statement, ast.Import):
        named = {alias.name for alias in statement.names}
    else:
        source = _absolute(statement, importer, is_package)
        submodules = {f"{source}.{alias.name}" for alias in statement.names} & modules.keys()
        named = submodules | ({source} if len(submodules) < len(statement.names) else set())
    implied = {parent for name in named for parent in _parents(name) if not importer.startswith(parent + ".")}
    return (named | implied) & modules.keys()


def _imports_that_run(tree: ast.AST):
    """Every node of `tree` but those under `if TYPE_CHECKING:` (imports for annotations only,
    which never run, so they make no cycle)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in ast.walk(child))
            continue
        yield node
        yield from _imports_that_run(node)


def _import_graph() -> dict[str, dict[str, list[int]]]:
    """importer -> imported module -> the lines importing it, every import in the file counted."""
    modules, graph = _modules(), {}
    for name, path in modules.items():
        is_package, graph[name] = path.name == "__init__.py", {}
        for statement in _imports_that_run(_parse(path)):
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                for target in _targets(statement, name, is_package, modules) - {name}:
                    graph[name].setdefault(target, []).append(statement.lineno)
    return graph


def _reachable(graph: dict, start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _cycles(graph: dict) -> set[frozenset[str]]:
    """The strongly connected components of more than one module: modules that reach one another."""
    reach = {name: _reachable(graph, name) for name in graph}
    components = {frozenset(other for other in reach[name] if name in reach.get(other, ())) for name in graph}
    return {component for component in components if len(component) > 1}


def _cycle_lines(graph: dict, component: frozenset[str]) -> list[str]:
    """The import lines that hold a cycle's modules together."""
    return [f"{importer} line {', '.join(map(str, lines))} -> {target}"
            for importer in sorted(component) for target, lines in sorted(graph[importer].items())
            if target in component]


def _cycle_failures(graph: dict, found: set[frozenset], allowed: set[frozenset]) -> list[str]:
    """What differs from the allowed cycles: a new or grown one, or an allowed one broken or shrunk."""
    failures = []
    for component in found - allowed:
        if any(component < old for old in allowed):
            continue  # what is left of an allowed cycle: reported below
        grew = [sorted(old) for old in allowed if old < component]
        failures.append(f"import cycle {sorted(component)} {f'grew from {grew}' if grew else 'is new'}; "
                        f"break it, the imports holding it:\n  " + "\n  ".join(_cycle_lines(graph, component)))
    for component in allowed - found:
        if any(component < new for new in found):
            continue  # grown: reported above
        now = [sorted(new) for new in found if new < component]
        failures.append(f"allowed cycle {sorted(component)} is {f'now {now}' if now else 'broken'}; "
                        f"update CYCLES in tests/test_layout.py to match")
    return failures


# -- the stage order


def _stages_in(passage: str) -> list[str]:
    """The stages a passage names, in the order each is first named."""
    first = {stage: match.start() for stage, pattern in STAGE_WORDS.items()
             if (match := re.search(pattern, passage, re.IGNORECASE))}
    return sorted(first, key=first.get)


def _docstring(module: str) -> str:
    return ast.get_docstring(_parse(PACKAGE / module))


def _tour() -> str:
    """The package docstring's tour: from "Tour" to the glossary."""
    docstring = _docstring("__init__.py")
    return docstring[docstring.index("Tour"):].split("Glossary")[0]


def _pipeline_summary() -> str:
    """The first line of pipeline.py's docstring, from the chain of stages if it has arrows."""
    line = _docstring("pipeline.py").splitlines()[0]
    chain = re.search(r"\w+(?:\s*(?:->|→)\s*\w+)+", line)
    return chain.group() if chain else line


def _architecture_table() -> str:
    """The first column (the stage) of the first table in docs/architecture.md."""
    lines = (REPO / "docs" / "architecture.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = itertools.takewhile(lambda line: line.startswith("|"), lines[start:])
    return "\n".join(row.split("|")[1] for row in table)


# -- the tests


def test_no_module_grows_past_600_lines():
    """Modules stay under STYLE.md's ~600 lines: a long module owns too much to read in one sitting.

    Today's longer ones are allow-listed until issue 25 splits them; once one is under, it leaves the list.
    """
    long = {_relative(path) for path in _modules().values() if _line_count(path) > MODULE_LINES}
    failures = _ratchet_failures(long, LONG_MODULES, f"over {MODULE_LINES} lines", "LONG_MODULES")
    assert not failures, "\n".join(failures)


def test_no_function_grows_past_80_lines():
    """Functions and methods stay under 80 lines (STYLE.md aims at 60): past that, split into named steps.

    Counted from the `def` line to the last line, decorators left out; nested functions count on their own.
    """
    long = {f"{_relative(path)}:{name}" for path in _modules().values()
            for name, lines in _functions(_parse(path)) if lines > FUNCTION_LINES}
    failures = _ratchet_failures(long, LONG_FUNCTIONS, f"over {FUNCTION_LINES} lines", "LONG_FUNCTIONS")
    assert not failures, "\n".join(failures)


def test_no_new_module_directly_in_the_package():
    """The flat top of `aotgrad/` does not grow: a new module goes into the folder of its stage.

    Issue 25 moves modules into persistence/, observe/, tooling/ and front/; lower FLAT_MODULES as it does.
    """
    flat = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(flat) <= FLAT_MODULES, (
        f"{len(flat)} modules directly in aotgrad/, at most {FLAT_MODULES}: put the new one in a subpackage\n{flat}")
    assert len(flat) == FLAT_MODULES, f"only {len(flat)} modules directly in aotgrad/: lower FLAT_MODULES to it"


def test_no_new_import_cycle():
    """No import cycle among aotgrad's modules beyond today's, which may only break or shrink.

    Imports inside functions count (they are how a cycle hides until a call makes it bite), and so does
    the `__init__.py` an import runs first. Module names, not files: `aotgrad.trace` is trace/__init__.py.
    """
    graph = _import_graph()
    failures = _cycle_failures(graph, _cycles(graph), CYCLES)
    assert not failures, "\n".join(failures)


def test_the_cycle_finder_sees_function_level_and_package_imports():
    """The helpers above find what they claim, so the cycle test cannot pass by seeing nothing."""
    modules = {"aotgrad": None, "aotgrad.a": None, "aotgrad.a.b": None, "aotgrad.c": None}
    inside_a_function = ast.parse("def f():\n    from aotgrad.a.b import x\n").body[0].body[0]
    assert _targets(inside_a_function, "aotgrad.c", False, modules) == {"aotgrad.a", "aotgrad.a.b"}
    assert _targets(inside_a_function, "aotgrad.a.d", False, modules) == {"aotgrad.a.b"}  # aotgrad.a is running
    assert _targets(ast.parse("from .b import x").body[0], "aotgrad.a.d", False, modules) == {"aotgrad.a.b"}
    assert _targets(ast.parse("from aotgrad import c, nop").body[0], "aotgrad.a", False, modules) \
        == {"aotgrad", "aotgrad.c"}
    annotations_only = ast.parse("if TYPE_CHECKING:\n    import aotgrad.c\nelse:\n    import aotgrad.a\n")
    assert [n.names[0].name for n in _imports_that_run(annotations_only) if isinstance(n, ast.Import)] == ["aotgrad.a"]
    graph = {"aotgrad.a": {"aotgrad.b": [1]}, "aotgrad.b": {"aotgrad.a": [2]}, "aotgrad.c": {"aotgrad.a": [3]}}
    assert _cycles(graph) == {frozenset({"aotgrad.a", "aotgrad.b"})}


@pytest.mark.xfail(strict=True, reason="issue 25: runtime/boxed.py and runtime/lower.py import generated "
                                       "(the code cache; still to be handed to them)")
def test_runtime_imports_neither_persistence_nor_partition():
    """The runtime runs a plan it is handed: it never re-enters partitioning or reads the disk cache.

    Persistence modules are matched by their last name (disk_cache, generated, ...) wherever they live.
    """
    offending = [f"aotgrad/{_relative(_modules()[importer])}:{line} imports {target}"
                 for importer, targets in _import_graph().items() if _is_in(importer, "aotgrad.runtime")
                 for target, lines in sorted(targets.items())
                 if target.split(".")[-1] in PERSISTENCE or _is_in(target, "aotgrad.partition")
                 for line in lines]
    assert not offending, "\n".join(offending)


def test_the_stages_are_stated_in_one_order():
    """The tour, pipeline.py's first line and docs/architecture.md give DESIGN.md's stage order.

    A reader meets the stages in one of these three first; they must not learn two orders.
    """
    orders = {"aotgrad/__init__.py tour": _stages_in(_tour()),
              "aotgrad/pipeline.py line 1": _stages_in(_pipeline_summary()),
              "docs/architecture.md table": _stages_in(_architecture_table())}
    wrong = {text: order for text, order in orders.items() if order != STAGES}
    assert not wrong, f"stage order {' -> '.join(STAGES)} expected; " + "; ".join(
        f"{text} says {' -> '.join(order)}" for text, order in wrong.items())
