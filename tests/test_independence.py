"""aotgrad implements the system itself: none of PyTorch's implementations of it may be
imported or referenced inside aotgrad/ (DESIGN.md, "Built on, and built here")."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "aotgrad"

FORBIDDEN_MODULES = [
    "torch._functorch.aot_autograd", "torch._functorch._aot_autograd", "torch._functorch.partitioners",
    "torch._functorch.compilers", "functorch.compile", "torch._functorch.eager_transforms",
    "torch.fx.experimental.proxy_tensor", "torch._subclasses.functional_tensor", "torch.func.functionalize",
    "torch._C._functionalization", "torch._dynamo.compiled_autograd", "torch._C._dynamo.compiled_autograd",
    "torch._dynamo.backends.distributed", "torch._dynamo.backends.common",
    "torch._dynamo._trace_wrapped_higher_order_op", "torch._higher_order_ops", "torch.export",
]
FORBIDDEN_NAMES = {"make_fx", "functionalize_fn", "_sync", "compile_fx", "compile_fx_aot", "aot_autograd",
                   "aot_function_pt", "_enable_functionalization", "_disable_functionalization"}


def _python_files():
    return sorted(PACKAGE.rglob("*.py"))


def _dotted(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if a.name in FORBIDDEN_NAMES]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node)]
            if node.attr in FORBIDDEN_NAMES and _dotted(node.value).startswith("torch"):
                found.append(f"{path.name}:{node.lineno} uses {_dotted(node)}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.startswith(("torch.", "functorch")) else []
        for name in names:
            for bad in FORBIDDEN_MODULES:
                if name == bad or name.startswith(bad + ".") or name.startswith(bad + "_"):
                    found.append(f"{path.name}:{getattr(node, 'lineno', '?')} references {name}")
    return found


def test_package_has_python_files():
    assert len(_python_files()) > 10


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_does_not_use_pytorch_implementation_of_aotgrad(path):
    assert _violations(path) == []


def test_checker_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from torch.fx.experimental.proxy_tensor import make_fx\n"
                   "import torch._functorch.partitioners\n"
                   "x = torch._inductor.compile_fx.compile_fx\n")
    assert len(_violations(bad)) >= 3


_TRAPPED = [
    ("torch._functorch.aot_autograd", ["aot_function", "aot_module", "aot_module_simplified",
                                       "create_joint", "aot_export_joint_simple", "aot_export_module"]),
    ("torch._functorch.partitioners", ["default_partition", "min_cut_rematerialization_partition"]),
    ("torch.fx.experimental.proxy_tensor", ["make_fx"]),
    ("torch._inductor.compile_fx", ["compile_fx", "compile_fx_aot"]),
]


def _training_step(model, x) -> None:
    import torch

    import aotgrad

    aotgrad.aot_module(model, aotgrad.nop)(x).sum().backward()
    torch._dynamo.reset()
    torch.compile(model, backend="aotgrad")(x).sum().backward()
    torch._dynamo.reset()


def test_a_training_step_calls_none_of_them(monkeypatch):
    """Their entry points raise if called; aotgrad's own paths must not notice. (Every module
    is imported before any trap is set, and the step runs once untrapped so that what it
    imports lazily is imported then: a module imported while trapped, e.g. Inductor's
    pattern_matcher with its `from ... import make_fx`, would keep the trap after the test.)"""
    import importlib

    import torch

    def trap(name):
        def called(*args, **kwargs):
            raise AssertionError(f"aotgrad called PyTorch's {name}")
        return called

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    x = torch.randn(8, 4)
    _training_step(model, x)
    for p in model.parameters():
        p.grad = None
    modules = [(importlib.import_module(module_name), names) for module_name, names in _TRAPPED]
    for module, names in modules:  # (all imported first: compile_fx's imports bind make_fx)
        for name in names:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, trap(f"{module.__name__}.{name}"))
    _training_step(model, x)
    assert all(p.grad is not None for p in model.parameters())
