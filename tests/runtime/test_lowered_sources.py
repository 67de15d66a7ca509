"""Goldens of the runtime code aotgrad generates (slice L0 of docs/runtime_rebuild.md), and the
general (interpreted) path checked against it.

Issue 25 moves every runtime step into a step object with `run` and `emit`; the generated code
must stay line for line the same. Each golden is a compile record's `wrapper`: the generated
call (or the line saying calls take the general path), `run_forward` and `run_backward`, for
one small function per runtime feature (CASES). Each golden test also checks that the compiled
function gives eager's outputs, input writes and gradients, so no golden pins a wrong program.

To change a golden on purpose, rewrite them and review the diff like code:

    EXPECTTEST_ACCEPT=1 python -m pytest tests/runtime/test_lowered_sources.py

Nothing in the sources varies from run to run, so nothing is normalised: constants are named
`c0, c1, ...` in the order the code names them, functions by their `__name__` (under
torch.compile: "torch.compile graph"), and the file names that carry a counter
(`<aotgrad call 12>`) are not part of `.source`. `_golden` checks that no address or such file
name got in.

`force_general_path` (and the fixture `general_path`) make compiles take the general path: every
section's steps interpreted (runtime/lower.py's `generate` off), so no generated call (the front
looks the entry up by its key and runs the call's steps, runtime/call.py) and the forward's and
backward's steps interpreted (runtime/forward.py, runtime/backward.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from expecttest import TestCase

import aotgrad
from aotgrad import backends
from aotgrad.observe import phases
from tests.general_path import force_general_path
from tests.oracle import clone_inputs


# -- the functions ------------------------------------------------------------------

def matmul_relu(x, w, b):
    return (x @ w + b).relu()


def batch_norm(x, weight, bias, running_mean, running_var, num_batches_tracked):
    num_batches_tracked.add_(1)  # as nn.BatchNorm1d does in training
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.1, eps=1e-5)


def mul_into_input(x, w):
    x.mul_(w)  # x does not require grad; after the write it does, with a history through w
    return x.sin()


def view_of_input(x, w):
    return x.view(-1), (x * w).sum()


def grad_on_inside(w, m):
    with torch.enable_grad():  # called under no_grad
        return w.sin() * (m > 0)  # m requires grad and gets none


def sin_and_cos(x):
    return x.sin(), x.cos()


def reshaped_by_sizes(x, w):
    y = (x @ w).relu()
    return y.reshape(-1, 2 * w.shape[1]).sum(0) * x.shape[0]


# -- how each is compiled -------------------------------------------------------------

def _aot_function(fn: Callable) -> Callable:
    return aotgrad.aot_function(fn, aotgrad.nop)


def _writes_in_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """A forward compiler that makes the write-backs the pipeline lets a graph make itself
    (BatchNorm's running statistics: those aotgrad_inductor writes inside the graph) as
    Inductor's kernels do, into the inputs' memory without a version bump, returns None in
    their place and says so (`input_writes`): the epilogue keeps only the version bumps eager makes."""
    writes = backends._in_graph_writes(gm)
    graph = aotgrad.nop(gm, example_inputs)

    def run(args: list):
        inputs = list(args)  # (the boxed graph clears `args`)
        outs = list(graph(args))
        for i, slot in writes:
            inputs[i].data.copy_(outs[slot])
            outs[slot] = None
        return outs
    run._boxed_call = True
    run.input_writes = tuple(slot for _, slot in writes)
    return run


def _aot_function_writing_in_graph(fn: Callable) -> Callable:
    return aotgrad.aot_function(fn, _writes_in_graph, aotgrad.nop)


def _torch_compile(dynamic: bool) -> Callable[[Callable], Callable]:
    def compile_(fn: Callable) -> Callable:
        torch._dynamo.reset()  # a compile of its own each time, whatever compiled `fn` before
        return torch.compile(fn, backend="aotgrad", dynamic=dynamic)
    return compile_


@dataclass(frozen=True)
class Case:
    """A function, its example inputs and how it is compiled and called."""

    fn: Callable
    inputs: Callable[[], list]            # fresh example inputs (called under a fixed seed)
    compile: Callable[[Callable], Callable] = _aot_function
    grad_mode: bool = True                # grad mode of the call
    backward_through: tuple[int, ...] | None = None  # outputs given a gradient; None: all requiring grad


def _batch_norm_inputs() -> list:
    return [torch.randn(8, 4), torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True),
            torch.zeros(4), torch.ones(4), torch.tensor(0)]


CASES = {
    "plain": Case(matmul_relu, lambda: [torch.randn(4, 3), torch.randn(3, 5, requires_grad=True),
                                        torch.randn(5, requires_grad=True)]),
    "batch_norm": Case(batch_norm, _batch_norm_inputs, _torch_compile(dynamic=False)),
    "batch_norm_written_in_graph": Case(batch_norm, _batch_norm_inputs, _aot_function_writing_in_graph),
    "loud_write_back": Case(mul_into_input, lambda: [torch.randn(3), torch.randn(3, requires_grad=True)]),
    "output_views_input": Case(view_of_input, lambda: [torch.randn(2, 3), torch.randn(3, requires_grad=True)]),
    "inference": Case(matmul_relu, lambda: [torch.randn(4, 3), torch.randn(3, 5), torch.randn(5)]),
    "detached_input_and_enable_grad": Case(grad_on_inside, lambda: [torch.randn(3, requires_grad=True),
                                                                    torch.randn(3, requires_grad=True)],
                                           grad_mode=False),
    "absent_tangent": Case(sin_and_cos, lambda: [torch.randn(3, requires_grad=True)], backward_through=(0,)),
    "dynamic": Case(reshaped_by_sizes, lambda: [torch.randn(8, 4), torch.randn(4, 3, requires_grad=True)],
                    _torch_compile(dynamic=True)),
    "dynamic_tangent_layout": Case(matmul_relu, lambda: [torch.randn(4, 3), torch.randn(3, 5, requires_grad=True),
                                                         torch.randn(5, requires_grad=True)],
                                   _torch_compile(dynamic=True)),
}


# -- running a case -------------------------------------------------------------------

@dataclass
class Observed:
    """What a call and its backward did, to compare with eager's."""

    outputs: list[tuple]   # per output: value, requires_grad, has a grad_fn, is a view, inputs sharing its memory
    inputs: list[tuple]    # per input after the call: value, requires_grad, has a grad_fn, version moved by
    grads: list[Any]       # per input that was a leaf requiring grad: its .grad after the backward


def _inputs(case: Case) -> list:
    torch.manual_seed(0)
    return case.inputs()


def _observe(fn: Callable, case: Case) -> Observed:
    args = clone_inputs(_inputs(case))
    versions = [a._version for a in args]
    leaves = [a.is_leaf and a.requires_grad for a in args]
    with torch.set_grad_enabled(case.grad_mode):
        outs = fn(*args)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    storages = [a.untyped_storage()._cdata for a in args]
    observed = Observed(
        [(o.detach().clone(), o.requires_grad, o.grad_fn is not None, o._is_view(),
          [i for i, s in enumerate(storages) if s == o.untyped_storage()._cdata]) for o in outs],
        [(a.detach().clone(), a.requires_grad, a.grad_fn is not None, a._version - v) for a, v in zip(args, versions)],
        [])
    through = case.backward_through if case.backward_through is not None else \
        [j for j, o in enumerate(outs) if o.requires_grad]
    if through:
        torch.manual_seed(1)
        torch.autograd.backward([outs[j] for j in through], [torch.randn_like(outs[j]) for j in through])
    observed.grads = [a.grad for a, leaf in zip(args, leaves) if leaf]
    return observed


def _assert_same(actual: Observed, expected: Observed, exact: bool) -> None:
    tolerance = dict(rtol=0, atol=0) if exact else {}
    for what in ("outputs", "inputs"):
        for k, (a, e) in enumerate(zip(getattr(actual, what), getattr(expected, what), strict=True)):
            torch.testing.assert_close(a[0], e[0], **tolerance, msg=lambda m: f"{what} {k}: {m}")
            assert a[1:] == e[1:], f"{what} {k}: {a[1:]} != {e[1:]}"
    for k, (a, e) in enumerate(zip(actual.grads, expected.grads, strict=True)):
        assert (a is None) == (e is None), f"grad {k}: {a} != {e}"
        if a is not None:
            torch.testing.assert_close(a, e, **tolerance, msg=lambda m: f"grad {k}: {m}")


def _compile_and_observe(case: Case) -> tuple[phases.CompileRecord, Observed]:
    compiled = case.compile(case.fn)
    with phases.watch() as records:
        observed = _observe(compiled, case)
    (record,) = records
    return record, observed


# what would make a golden depend on the run: an address (a default repr's "at 0x7f..."), or
# the name of a generated code's file, which carries a counter ("<aotgrad call 12>")
_RUN_DEPENDENT = re.compile(r"0x[0-9a-fA-F]{4,}|<aotgrad ")


def _golden(name: str) -> str:
    """The `wrapper` of case `name`'s compile, after checking the compiled call against eager's."""
    case = CASES[name]
    record, observed = _compile_and_observe(case)
    _assert_same(observed, _observe(case.fn, case), exact=False)
    source = record.wrapper
    assert not _RUN_DEPENDENT.search(source), f"run-dependent text in the generated source:\n{source}"
    return source


# -- forcing the general path -------------------------------------------------------------

@pytest.fixture
def general_path(monkeypatch) -> list:
    """The test's compiles take the general path (force_general_path)."""
    return force_general_path(monkeypatch)


# -- the goldens ------------------------------------------------------------------------

class LoweredSources(TestCase):
    maxDiff = None  # a failing golden shows its whole diff

    def test_plain(self):
        """matmul + relu with a weight and bias requiring grad: input checks, the Function, no epilogue."""
        self.assertExpectedInline(_golden("plain"), """\
def call(args):  # matmul_relu
    if len(args) != 3:
        return MISS
    a0, a1, a2, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is False
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is True
            and a1.is_leaf is True
            and type(a2) is c2
            and a2.shape == c8
            and a2.stride() == c9
            and a2.storage_offset() == 0
            and a2.dtype is c3
            and a2.device == c10
            and a2.requires_grad is True
            and a2.is_leaf is True
            and len({id(a0), id(a1), id(a2)}) == 3):
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1, a2)
    return_values = [outs[0]]
    return return_values[0]

def run_forward(ctx, args):  # outputs: 1
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[1:len(results)])
    ctx.output_versions = [results[2]._version]
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0,)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, results[0], results[1])
""")

    def test_batch_norm(self):
        """BatchNorm in training under torch.compile: the count written back quietly, the running
        statistics through `.data` (no version bump); only the offsets and leafness checked."""
        self.assertExpectedInline(_golden("batch_norm"), """\
def call(args):  # torch.compile graph
    if len(args) != 6:
        return MISS
    a0, a1, a2, a3, a4, a5, = args
    if not (grad_enabled() is True
            and a0.storage_offset() == 0
            and a1.storage_offset() == 0
            and a2.storage_offset() == 0
            and a3.storage_offset() == 0
            and a4.storage_offset() == 0
            and a4.is_leaf is True
            and a5.storage_offset() == 0
            and a5.is_leaf is True
            and len({id(a0), id(a1), id(a2), id(a3), id(a4), id(a5)}) == 6):
        return MISS
    if len({a0.untyped_storage()._cdata, a1.untyped_storage()._cdata, a2.untyped_storage()._cdata, a3.untyped_storage()._cdata, a4.untyped_storage()._cdata, a5.untyped_storage()._cdata}) != 6:
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1, a2, a3, a4, a5)
    with no_grad():  # written back: not seen by autograd
        foreach_copy_([a0], [outs[1]])
    with no_grad():  # written as eager does: no version bump
        foreach_copy_([a2.data, a3.data], [outs[2], outs[3]])
    return_values = [outs[0]]
    return tuple(return_values)

def run_forward(ctx, args):  # outputs: 4
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    o1 = results[1]
    if isinstance(o1, Tensor) and o1._base is not None:
        o1 = not_a_view(o1, args)
    o2 = results[2]
    if isinstance(o2, Tensor) and o2._base is not None:
        o2 = not_a_view(o2, args)
    o3 = results[3]
    if isinstance(o3, Tensor) and o3._base is not None:
        o3 = not_a_view(o3, args)
    (o0, o1, o2, o3) = apart((o0, o1, o2, o3), c0, c1)
    ctx.plan = plan
    ctx.save_for_backward(*results[4:len(results)])
    ctx.output_versions = [results[6]._version, results[7]._version]
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None, (o1.shape, o1.dtype, o1.device) if isinstance(o1, Tensor) else None, (o2.shape, o2.dtype, o2.device) if isinstance(o2, Tensor) else None, (o3.shape, o3.dtype, o3.device) if isinstance(o3, Tensor) else None]
    ctx.mark_non_differentiable(*[o for o in (o1, o2, o3) if isinstance(o, Tensor)])
    ctx.set_materialize_grads(False)
    return (o0, o1, o2, o3)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, None, None, None, results[0], results[1])
""")

    def test_batch_norm_written_in_graph(self):
        """The same BatchNorm with a forward compiler that writes the statistics itself: the
        epilogue only bumps the count's version."""
        self.assertExpectedInline(_golden("batch_norm_written_in_graph"), """\
def call(args):  # batch_norm
    if len(args) != 6:
        return MISS
    a0, a1, a2, a3, a4, a5, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is False
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is True
            and a1.is_leaf is True
            and type(a2) is c2
            and a2.shape == c8
            and a2.stride() == c9
            and a2.storage_offset() == 0
            and a2.dtype is c3
            and a2.device == c10
            and a2.requires_grad is True
            and a2.is_leaf is True
            and type(a3) is c2
            and a3.shape == c11
            and a3.stride() == c12
            and a3.storage_offset() == 0
            and a3.dtype is c3
            and a3.device == c13
            and a3.requires_grad is False
            and type(a4) is c2
            and a4.shape == c14
            and a4.stride() == c15
            and a4.storage_offset() == 0
            and a4.dtype is c3
            and a4.device == c16
            and a4.requires_grad is False
            and type(a5) is c2
            and a5.shape == c17
            and a5.stride() == c18
            and a5.storage_offset() == 0
            and a5.dtype is c19
            and a5.device == c20
            and a5.requires_grad is False
            and len({id(a0), id(a1), id(a2), id(a3), id(a4), id(a5)}) == 6):
        return MISS
    if len({a0.untyped_storage()._cdata, a1.untyped_storage()._cdata, a2.untyped_storage()._cdata, a3.untyped_storage()._cdata, a4.untyped_storage()._cdata, a5.untyped_storage()._cdata}) != 6:
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1, a2, a3, a4, a5)
    increment_version([a5])  # written inside the graph: their version bumps
    return_values = [outs[0]]
    return return_values[0]

def run_forward(ctx, args):  # outputs: 4
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    o1 = results[1]
    if isinstance(o1, Tensor) and o1._base is not None:
        o1 = not_a_view(o1, args)
    o2 = results[2]
    if isinstance(o2, Tensor) and o2._base is not None:
        o2 = not_a_view(o2, args)
    o3 = results[3]
    if isinstance(o3, Tensor) and o3._base is not None:
        o3 = not_a_view(o3, args)
    (o0, o1, o2, o3) = apart((o0, o1, o2, o3), c0, c1)
    ctx.plan = plan
    ctx.save_for_backward(*results[4:len(results)])
    ctx.output_versions = [results[6]._version, results[7]._version]
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None, (o1.shape, o1.dtype, o1.device) if isinstance(o1, Tensor) else None, (o2.shape, o2.dtype, o2.device) if isinstance(o2, Tensor) else None, (o3.shape, o3.dtype, o3.device) if isinstance(o3, Tensor) else None]
    ctx.mark_non_differentiable(*[o for o in (o1, o2, o3) if isinstance(o, Tensor)])
    ctx.set_materialize_grads(False)
    return (o0, o1, o2, o3)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, results[0], results[1], None, None, None)
""")

    def test_loud_write_back(self):
        """An input written with a value that requires grad: a write-back autograd sees (WriteBack.run)."""
        self.assertExpectedInline(_golden("loud_write_back"), """\
def call(args):  # mul_into_input
    if len(args) != 2:
        return MISS
    a0, a1, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is False
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is True
            and a1.is_leaf is True
            and len({id(a0), id(a1)}) == 2):
        return MISS
    if len({a0.untyped_storage()._cdata, a1.untyped_storage()._cdata}) != 2:
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1)
    inputs = [a0, a1]
    c8.run(inputs, outs)  # write back input 0
    return_values = [outs[0]]
    return return_values[0]

def run_forward(ctx, args):  # outputs: 2
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    o1 = results[1]
    if isinstance(o1, Tensor) and o1._base is not None:
        o1 = not_a_view(o1, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[2:len(results)])
    ctx.output_versions = [results[3]._version]
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None, (o1.shape, o1.dtype, o1.device) if isinstance(o1, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0, o1)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None or grads[1] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    t1 = grads[1]
    if t1.stride() != c1 and t1.numel() > 1:
        t1 = coerce_tangent(t1, ctx.out_meta[1], c1)
    args = [*ctx.saved_tensors, t0, t1]
    del t0, t1
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, results[0])
""")

    def test_output_views_input(self):
        """An output viewing an input: the memory-sharing check and the general `epilogue.run`."""
        self.assertExpectedInline(_golden("output_views_input"), """\
def call(args):  # view_of_input
    if len(args) != 2:
        return MISS
    a0, a1, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is False
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is True
            and a1.is_leaf is True
            and len({id(a0), id(a1)}) == 2):
        return MISS
    if len({a0.untyped_storage()._cdata, a1.untyped_storage()._cdata}) != 2:
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1)
    return_values = epilogue.run([a0, a1], outs)
    return tuple(return_values)

def run_forward(ctx, args):  # outputs: 1
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[1:len(results)])
    ctx.output_versions = ()
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0,)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, results[0])
""")

    def test_inference(self):
        """No input requires grad: the forward graph under no_grad, no Function, no plan."""
        self.assertExpectedInline(_golden("inference"), """\
def call(args):  # matmul_relu
    if len(args) != 3:
        return MISS
    a0, a1, a2, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is False
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is False
            and type(a2) is c2
            and a2.shape == c8
            and a2.stride() == c9
            and a2.storage_offset() == 0
            and a2.dtype is c3
            and a2.device == c10
            and a2.requires_grad is False
            and len({id(a0), id(a1), id(a2)}) == 3):
        return MISS
    with no_grad():
        outs = forward([a0, a1, a2])
    return_values = [outs[0]]
    return return_values[0]
""")

    def test_detached_input_and_enable_grad(self):
        """Called under no_grad, grad mode turned on inside; an input requiring grad that gets none
        is passed detached."""
        self.assertExpectedInline(_golden("detached_input_and_enable_grad"), """\
def call(args):  # grad_on_inside
    if len(args) != 2:
        return MISS
    a0, a1, = args
    if not (grad_enabled() is False
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is True
            and a0.is_leaf is True
            and type(a1) is c2
            and a1.shape == c5
            and a1.stride() == c6
            and a1.storage_offset() == 0
            and a1.dtype is c3
            and a1.device == c7
            and a1.requires_grad is True
            and a1.is_leaf is True
            and len({id(a0), id(a1)}) == 2):
        return MISS
    d1 = a1.detach()  # requires grad, gets none: no edge to it
    if not grad_enabled():  # the function turns grad mode on inside
        with enable_grad():
            outs = (apply if functorch_active() else fast_apply)(plan, a0, d1)
    else:
        outs = (apply if functorch_active() else fast_apply)(plan, a0, d1)
    return_values = [outs[0]]
    return return_values[0]

def run_forward(ctx, args):  # outputs: 1
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[1:len(results)])
    ctx.output_versions = ()
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0,)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, results[0], results[1])
""")

    def test_absent_tangent(self):
        """Two outputs, the backward through one: the straight backward is not taken when a
        gradient is missing (the golden holds its guard)."""
        self.assertExpectedInline(_golden("absent_tangent"), """\
def call(args):  # sin_and_cos
    if len(args) != 1:
        return MISS
    a0, = args
    if not (grad_enabled() is True
            and type(a0) is c2
            and a0.shape == c0
            and a0.stride() == c1
            and a0.storage_offset() == 0
            and a0.dtype is c3
            and a0.device == c4
            and a0.requires_grad is True
            and a0.is_leaf is True):
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0)
    return_values = [outs[0], outs[1]]
    return tuple(return_values)

def run_forward(ctx, args):  # outputs: 2
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    o1 = results[1]
    if isinstance(o1, Tensor) and o1._base is not None:
        o1 = not_a_view(o1, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[2:len(results)])
    ctx.output_versions = ()
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None, (o1.shape, o1.dtype, o1.device) if isinstance(o1, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0, o1)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None or grads[1] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    t1 = grads[1]
    if t1.stride() != c1 and t1.numel() > 1:
        t1 = coerce_tangent(t1, ctx.out_meta[1], c1)
    args = [*ctx.saved_tensors, t0, t1]
    del t0, t1
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, results[0])
""")

    def test_dynamic(self):
        """dynamic=True under torch.compile: dynamo guards all but leafness and distinctness;
        sizes saved for the backward (`ctx.saved_sizes`); a tangent of static layout ([2 * s])."""
        self.assertExpectedInline(_golden("dynamic"), """\
def call(args):  # torch.compile graph
    if len(args) != 2:
        return MISS
    a0, a1, = args
    if not (grad_enabled() is True
            and a1.is_leaf is True
            and len({id(a0), id(a1)}) == 2):
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1)
    return_values = [outs[0]]
    return tuple(return_values)

def run_forward(ctx, args):  # outputs: 1
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[1:len(results) - 2])
    ctx.output_versions = ()
    ctx.saved_sizes = results[len(results) - 2:]
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0,)

def run_backward(ctx, grads):
    if grad_enabled() or grads[0] is None:
        return general_backward(ctx, grads)
    t0 = grads[0]
    if t0.stride() != c0 and t0.numel() > 1:
        t0 = coerce_tangent(t0, ctx.out_meta[0], c0)
    args = [*ctx.saved_tensors, *ctx.saved_sizes, t0]
    del t0
    ctx.maybe_clear_saved_tensors()  # unless retain_graph: the graph frees each as it goes
    results = backward(args)
    return (None, None, results[0])
""")

    def test_dynamic_tangent_layout(self):
        """dynamic=True with a tangent of symbolic layout ([s0, s1]): the tangent's layout is made
        per call, which has no straight code (PrepareTangents), so the backward is interpreted."""
        self.assertExpectedInline(_golden("dynamic_tangent_layout"), """\
def call(args):  # torch.compile graph
    if len(args) != 3:
        return MISS
    a0, a1, a2, = args
    if not (grad_enabled() is True
            and a1.is_leaf is True
            and a2.is_leaf is True
            and len({id(a0), id(a1), id(a2)}) == 3):
        return MISS
    outs = (apply if functorch_active() else fast_apply)(plan, a0, a1, a2)
    return_values = [outs[0]]
    return tuple(return_values)

def run_forward(ctx, args):  # outputs: 1
    results = forward(list(args))
    o0 = results[0]
    if isinstance(o0, Tensor) and o0._base is not None:
        o0 = not_a_view(o0, args)
    ctx.plan = plan
    ctx.save_for_backward(*results[1:len(results)])
    ctx.output_versions = [results[3]._version]
    ctx.saved_sizes = ()
    ctx.out_meta = [(o0.shape, o0.dtype, o0.device) if isinstance(o0, Tensor) else None]
    ctx.set_materialize_grads(False)
    return (o0,)

# run_backward: interpreted
#   ChooseVariant(sources=(0,))
#   PrepareTangents(sources=(0,), layouts=(DenseOrder(inner_to_outer=(1, 0)),))
#   CallBackward(backward=run, tangents=1, sizes=False)
#   ScatterGrads(inputs=3, grad_inputs=(1, 2))
""")


def test_every_case_has_a_golden():
    """Each case in CASES is pinned by a golden test of the same name."""
    assert {f"test_{name}" for name in CASES} <= set(dir(LoweredSources))


# -- the general path against the generated one and eager ---------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_the_general_path_does_what_the_generated_code_does(name, monkeypatch):
    """Compiled twice, once with the generated code and once with it forced off: the same
    outputs, input writes (values, versions, histories) and gradients, bit for bit, and both
    eager's."""
    case = CASES[name]
    generated_record, generated = _compile_and_observe(case)
    with monkeypatch.context() as patch:
        backwards = force_general_path(patch)
        general_record, general = _compile_and_observe(case)
    assert not generated_record.wrapper.startswith("# (calls take the general path)")
    assert general_record.wrapper.startswith("# (calls take the general path)")
    if "def run_forward" in generated_record.wrapper:  # (a training compile)
        assert "# run_forward: interpreted" in general_record.wrapper and "def run_forward" not in general_record.wrapper
        assert "# run_backward: interpreted" in general_record.wrapper and "def run_backward" not in general_record.wrapper
        assert backwards or all(g is None for g in general.grads)
    _assert_same(general, generated, exact=True)
    _assert_same(generated, _observe(case.fn, case), exact=False)


def test_the_general_path_fixture_turns_the_generated_call_off(general_path):
    """With `general_path`, a compile of a function that would get a generated call gets none,
    its forward and backward steps are interpreted."""
    record, observed = _compile_and_observe(CASES["plain"])
    assert record.wrapper.startswith("# (calls take the general path)")
    assert "# run_forward: interpreted\n#   CallGraph(" in record.wrapper
    assert "# run_backward: interpreted\n#   ChooseVariant(" in record.wrapper
    assert len(general_path) == 1
    _assert_same(observed, _observe(matmul_relu, CASES["plain"]), exact=False)
