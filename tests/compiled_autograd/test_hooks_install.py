"""Importing aotgrad changes nothing in PyTorch; the first `enable()` starts recording hook
registrations and finds those made before (aotgrad/compiled_autograd/hooks.py `install`).
Each test runs in a fresh interpreter: installation happens once per process."""
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.one_compiler  # subprocesses with their own compiler


def _run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_import_leaves_torch_unchanged():
    out = _run("""
        import inspect
        import torch
        from torch.nn.modules import module as nn_module

        def snapshot():
            return {"Tensor.register_hook": torch.Tensor.register_hook,
                    "Tensor.retain_grad": torch.Tensor.retain_grad,
                    "Function.apply": inspect.getattr_static(torch.autograd.Function, "apply"),
                    "Function._register_hook": inspect.getattr_static(torch.autograd.Function, "_register_hook"),
                    "set_materialize_grads": torch.autograd.function.FunctionCtx.set_materialize_grads,
                    "engine": torch.autograd.variable.Variable._execution_engine,
                    "registration hooks": list(nn_module._global_module_registration_hooks.values())}

        before = snapshot()
        import aotgrad, aotgrad.compiled_autograd
        after = snapshot()
        print("changed", [name for name in before if before[name] != after[name]])
        h = torch.rand(3, requires_grad=True) * 3
        h.retain_grad()
        h.retain_grad()  # raised "Boolean value of Tensor ... is ambiguous" once aotgrad wrapped it at import
        h.sum().backward()
        print("retained", h.grad.tolist())
        from aotgrad.compiled_autograd.calls import SavedTensorsView
        print("view is a Node", issubclass(SavedTensorsView, torch.autograd.graph.Node))
        with aotgrad.compiled_autograd.enable(lambda gm: gm):
            print("view is a Node inside", issubclass(SavedTensorsView, torch.autograd.graph.Node))
    """)
    assert "changed []" in out
    assert "retained [1.0, 1.0, 1.0]" in out
    # the ctx view becomes a virtual subclass of torch.autograd.graph.Node at the first enable()
    assert "view is a Node False" in out and "view is a Node inside True" in out


def test_retain_grad_twice_under_compiled_autograd():
    out = _run("""
        import torch, aotgrad
        with aotgrad.compiled_autograd.enable(lambda gm: gm):
            x = torch.rand(3, requires_grad=True)
            h = x * 3
            h.retain_grad()
            h.retain_grad()
            (h * h).sum().backward()
            print("grad", torch.equal(h.grad, 2 * h.detach()), aotgrad.counters["compiled_autograd"]["captures"])
    """)
    assert "grad True 1" in out


@pytest.mark.parametrize("custom", [False, True])
def test_hooks_registered_before_the_first_enable_are_run(custom):
    """A live non-leaf's hook and retain_grad, a node pre-hook (and a custom Function), all
    made before compiled autograd was first enabled: eager's gradients and hook calls. The
    backward is captured; with the custom Function (its arguments were not recorded) it runs
    on PyTorch's engine."""
    out = _run(f"""
        import torch, aotgrad

        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                return x * k
            @staticmethod
            def backward(ctx, g):
                return g * 2, None

        def step(compiled):
            torch.manual_seed(0)
            calls = []
            x = torch.randn(4, requires_grad=True)
            h = x.sin()
            h.register_hook(lambda g: calls.append("tensor") or g * 3)
            h.retain_grad()
            m = h * 2
            m.grad_fn.register_prehook(lambda gs: calls.append("pre") or None)
            y = Double.apply(m, 2) if {custom} else m * 2
            if compiled:
                with aotgrad.compiled_autograd.enable(lambda gm: gm):
                    y.sum().backward()
            else:
                y.sum().backward()
            return calls, x.grad, h.grad

        eager = step(False)
        compiled = step(True)
        print("same", eager[0] == compiled[0], torch.equal(eager[1], compiled[1]), torch.equal(eager[2], compiled[2]))
        counts = aotgrad.counters["compiled_autograd"]
        print("counters", counts["captures"], counts["eager_fallbacks"])
    """)
    assert "same True True True" in out, out
    assert ("counters 0 1" if custom else "counters 1 0") in out, out


def test_hook_of_a_tensor_gone_before_the_first_enable_runs_eagerly():
    """A hook on a non-leaf whose Python tensor no longer exists lives in the C++ node only:
    aotgrad cannot see it, so that backward runs on PyTorch's engine (and the hook runs)."""
    out = _run("""
        import torch, aotgrad
        calls = []
        x = torch.randn(4, requires_grad=True)
        h = x.sin()
        h.register_hook(lambda g: calls.append("tensor") or g * 3)
        y = (h * 2).sum()
        del h
        with aotgrad.compiled_autograd.enable(lambda gm: gm):
            y.backward()
            counts = aotgrad.counters["compiled_autograd"].copy()  # a Counter: 0 for a name never counted
            print("eager", calls, torch.equal(x.grad, 6 * x.detach().cos()), counts["eager_fallbacks"], counts["captures"])
            x.grad = None
            del y
            (x.sin() * 2).sum().backward()  # that graph is freed: the next backward is compiled
            print("then", aotgrad.counters["compiled_autograd"]["captures"])
    """)
    assert "eager ['tensor'] True 1 0" in out, out
    assert "then 1" in out, out


@pytest.mark.parametrize("where", ["module", "optimizer"])
def test_hook_dicts_held_by_python_objects_do_not_stop_compiling(where):
    """Modules' and optimizers' hook dicts look like autograd's; they are not autograd's."""
    out = _run(f"""
        import torch, aotgrad
        model = torch.nn.Linear(3, 1)
        if "{where}" == "module":
            model.register_forward_hook(lambda *a: None)
        else:
            torch.optim.SGD(model.parameters(), lr=0.1).register_step_post_hook(lambda *a: None)
        with aotgrad.compiled_autograd.enable(lambda gm: gm):
            model(torch.randn(2, 3)).sum().backward()
        counts = aotgrad.counters["compiled_autograd"]
        print("counters", counts["captures"], counts["eager_fallbacks"])
    """)
    assert "counters 1 0" in out, out


def test_a_hook_registered_in_a_compiled_function_after_the_first_enable():
    """Dynamo replays `x.register_hook(h)` of a compiled function through the recording
    wrapper; traced itself, the wrapper replayed its own call without end (RecursionError
    when the first enable() ran in a compiled training step)."""
    out = _run("""
        import torch, aotgrad
        model = torch.nn.Linear(6, 3)

        @torch.compile(backend="aotgrad")
        def train_step(x):
            loss = model(x).sum()
            loss.backward()
            return loss.detach()

        with aotgrad.compiled_autograd.enable(lambda gm: gm):
            train_step(torch.randn(4, 6))
        torch._dynamo.reset()

        def fn(x, y):
            x.register_hook(lambda g: g * 3)
            return x + y

        x = torch.tensor([0.5, 0.5], requires_grad=True)
        torch.compile(fn, backend="eager")(x, torch.ones(2)).sum().backward()
        print("grad", x.grad.tolist())
    """)
    assert "grad [3.0, 3.0]" in out, out
