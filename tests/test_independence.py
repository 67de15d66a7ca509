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


# -- importing aotgrad changes nothing in PyTorch ------------------------------------------

ROOT = PACKAGE.parent

_SNAPSHOT = r"""
import json, sys, types
import torch, torch._dynamo, torch._functorch.config, torch._inductor.config
import torch.autograd.function, torch.nn.functional, torch.nn.modules.module as nn_module
from torch.nn.parallel import DistributedDataParallel

NAMESPACES = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional,
              "torch.autograd": torch.autograd, "torch.autograd.Function": torch.autograd.Function,
              "FunctionCtx": torch.autograd.function.FunctionCtx, "torch.nn.Module": torch.nn.Module,
              "DistributedDataParallel": DistributedDataParallel, "torch.fx.GraphModule": torch.fx.GraphModule}
CONFIGS = {"torch._dynamo.config": torch._dynamo.config, "torch._inductor.config": torch._inductor.config,
           "torch._functorch.config": torch._functorch.config}


def snapshot():
    state = {f"{name}.{key}": id(value) for name, ns in NAMESPACES.items() for key, value in vars(ns).items()
             if not isinstance(value, types.ModuleType)}
    state.update({f"{name}.{key}": repr(value) for name, config in CONFIGS.items()
                  for key, value in config.get_config_copy().items()})
    state.update({f"nn.modules.module.{key}": len(value) for key, value in vars(nn_module).items()
                  if key.startswith("_global_") and isinstance(value, dict)})
    state.update({"grad_enabled": torch.is_grad_enabled(), "default_dtype": str(torch.get_default_dtype()),
                  "deterministic": torch.are_deterministic_algorithms_enabled(),
                  "execution_engine": id(torch.autograd.Variable._execution_engine),
                  "optimize_ddp": repr(torch._dynamo.config.optimize_ddp)})
    # PyTorch's logging: aotgrad makes its artifact loggers at the first compile (torch_logs.py)
    registry = torch._logging._internal.log_registry
    state.update({"torch._logging.artifact_loggers": repr(sorted(registry.artifact_log_qnames)),
                  "torch._logging.logs": repr(sorted(registry.get_log_qnames())),
                  "torch._logging.artifacts": repr(sorted(registry.artifact_names))})
    return state


before = snapshot()
import aotgrad
after = snapshot()
print(json.dumps(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))))
"""

# `import aotgrad` changes nothing; compiled autograd starts recording hook registrations and
# DDP modules at its first `enable()` (tests/compiled_autograd/test_hooks_install.py).
KNOWN_CHANGES: list = []


def _run_python(code: str, *args: str) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_importing_aotgrad_leaves_pytorchs_configs_and_state_as_they_were():
    """In a fresh process: Dynamo's, Inductor's and functorch's configs (optimize_ddp among
    them: DDP splitting stays PyTorch's to choose), grad mode, dtype, the autograd engine,
    PyTorch's logging registry, and PyTorch's functions and classes are what they were."""
    import json

    assert json.loads(_run_python(_SNAPSHOT)) == KNOWN_CHANGES


_INDUCTOR_UNDER_DDP = r"""
import json, os, sys, tempfile
import torch, torch.distributed as dist
from torch._dynamo.backends.distributed import DDPOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP
if sys.argv[1] == "with_aotgrad":
    import aotgrad
from tests.distributed.models import Layers

dist.init_process_group("gloo", init_method="file://" + os.path.join(tempfile.mkdtemp(), "store"), rank=0,
                        world_size=1)
calls = []
compile_fn = DDPOptimizer.compile_fn


def recording_compile_fn(self, gm, example_inputs, **kwargs):
    # which backend PyTorch's splitter wraps; each piece then runs as traced (Inductor's C++
    # compile of the pieces is not what this checks)
    calls.append(getattr(self.backend_compile_fn, "_compiler_name", None))
    self.backend_compile_fn = lambda piece, inputs, **kw: piece.forward
    compiled = compile_fn(self, gm, example_inputs, **kwargs)
    calls.append(len(self.buckets))
    return compiled


DDPOptimizer.compile_fn = recording_compile_fn
torch.manual_seed(0)
model = Layers(3)
x = torch.randn(4, 512)
expected = model(x)
out = torch.compile(DDP(model, bucket_cap_mb=1), backend="inductor")(x)  # a bucket per layer (1.002 MiB each)
out.sum().backward()
dist.destroy_process_group()
print(json.dumps({"optimize_ddp": torch._dynamo.config.optimize_ddp, "ddp_optimizer_calls": calls,
                  "same_output": torch.allclose(out, expected),
                  "all_grads": all(p.grad is not None for p in model.parameters())}))
"""


def test_inductor_under_ddp_still_gets_pytorchs_ddp_optimizer_with_aotgrad_imported():
    import json

    without = json.loads(_run_python(_INDUCTOR_UNDER_DDP, "without_aotgrad"))
    with_aotgrad = json.loads(_run_python(_INDUCTOR_UNDER_DDP, "with_aotgrad"))
    assert without == {"optimize_ddp": True, "ddp_optimizer_calls": ["inductor", 3], "same_output": True,
                       "all_grads": True}
    assert with_aotgrad == without
