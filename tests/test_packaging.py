"""pyproject.toml against the package: the dependencies are what aotgrad/ imports (no more,
no fewer), the `aotgrad` console command and the PEP 561 marker are declared, and the
version is one number."""
import ast
import re
import sys
from pathlib import Path

import pytest

import aotgrad

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "aotgrad"
# A distribution whose import name differs from its name would go here; none does yet.
IMPORT_NAMES: dict[str, str] = {}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _distribution(requirement: str) -> str:
    """'scipy>=1.10' -> 'scipy'; 'torch>=2.11,<2.15' -> 'torch'."""
    return re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0).lower()


def third_party_imports(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Top-level module -> where it is imported, for every import in the package's files
    (function-level ones too) of a module that is neither the standard library nor aotgrad."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top != "aotgrad":
                    found.setdefault(top, []).append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_every_dependency_is_imported_by_the_package():
    imported = third_party_imports()
    for requirement in _pyproject()["project"]["dependencies"]:
        name = _distribution(requirement)
        assert IMPORT_NAMES.get(name, name) in imported, (
            f"pyproject.toml depends on {requirement!r}, but nothing in aotgrad/ imports it: "
            "move it to the extra that needs it")


def test_every_import_is_a_dependency_or_the_report_extra():
    project = _pyproject()["project"]
    declared = {IMPORT_NAMES.get(n, n) for n in map(_distribution, project["dependencies"])}
    report_extra = {IMPORT_NAMES.get(n, n) for n in map(_distribution, project["optional-dependencies"]["report"])}
    undeclared = {module: where for module, where in third_party_imports().items()
                  if module not in declared | report_extra}
    assert undeclared == {}, "imported by aotgrad/ but not in pyproject.toml's dependencies"
    assert report_extra == {"matplotlib"}  # report.py's curves, imported where they are drawn


def test_the_checker_sees_function_level_imports(tmp_path):
    (tmp_path / "m.py").write_text("import os\n\ndef f():\n    from networkx import flow\n    import aotgrad.api\n")
    assert list(third_party_imports(tmp_path)) == ["networkx"]


def test_networkx_is_only_a_test_dependency():
    project = _pyproject()["project"]
    assert "networkx" not in map(_distribution, project["dependencies"])
    assert "networkx" in map(_distribution, project["optional-dependencies"]["test"])


def test_console_command_is_the_cli_main():
    assert _pyproject()["project"]["scripts"] == {"aotgrad": "aotgrad.__main__:main"}


def test_package_is_marked_typed_and_ships_the_marker():
    assert (PACKAGE / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["aotgrad"]


def test_version_is_the_projects():
    assert aotgrad.__version__ == _pyproject()["project"]["version"]
