"""`is_dense_layout` (aotgrad/analysis.py) against eager's `aten.is_non_overlapping_and_dense`:
on concrete layouts, on symbolic sizes from a ShapeEnv (no guards added), and traced by Dynamo
with dynamic shapes, where SymInts look like ints and cannot be sorted by."""
import itertools

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.analysis import is_dense_layout


def _eager_dense(t: torch.Tensor) -> bool:
    return torch.ops.aten.is_non_overlapping_and_dense(t)


def _layouts():
    """Tensors of many layouts: permuted, sliced, expanded, with dims of size 0 and 1."""
    base = [torch.empty(2, 3, 4), torch.empty(2, 1, 4), torch.empty(1, 3, 1), torch.empty(2, 0, 4),
            torch.empty(5), torch.empty(1), torch.empty(()), torch.empty(2, 3, 4, 5)]
    for t in base:
        for perm in itertools.permutations(range(t.dim())):
            yield t.permute(perm)
            yield t.permute(perm).contiguous()
    full = torch.empty(4, 6, 8)
    yield from [full[:, ::2], full[::2], full[..., 1:], full[:, :, ::3], full[:1], full[:, :1, :1],
                torch.empty(3, 1).expand(3, 4), torch.empty(1, 4).expand(5, 4), torch.empty(4, 6).t()[::2],
                torch.empty(2, 3, 4).as_strided((2, 3), (1, 2)), torch.empty(24).as_strided((2, 3), (3, 1), 4)]


@pytest.mark.parametrize("t", list(_layouts()), ids=lambda t: f"{tuple(t.shape)}-{t.stride()}")
def test_concrete_layouts_agree_with_eager(t):
    assert is_dense_layout(t.shape, t.stride()) == _eager_dense(t)


def _symbolic(t: torch.Tensor):
    """A fake of `t` whose every size is a symbol (examples of 2 or more), and its ShapeEnv."""
    env = ShapeEnv()
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return FakeTensorMode(shape_env=env).from_tensor(t, symbolic_context=context), env


@pytest.mark.parametrize("make", [
    lambda f: f, lambda f: f.transpose(0, 2), lambda f: f.permute(2, 0, 1),
    lambda f: f[:, ::2], lambda f: f[..., 1:], lambda f: f.transpose(0, 1)[::2],
], ids=["contiguous", "transposed", "permuted", "strided_slice", "offset_slice", "transposed_slice"])
def test_symbolic_sizes_agree_with_eager_and_add_no_guards(make):
    real = make(torch.empty(4, 6, 8))
    fake, env = _symbolic(torch.empty(4, 6, 8))
    fake = make(fake)
    assert any(isinstance(s, torch.SymInt) for s in fake.stride())
    guards = len(env.guards)
    assert is_dense_layout(fake.shape, fake.stride()) == _eager_dense(real)
    assert len(env.guards) == guards


def _dense_or_not(x):
    if is_dense_layout(x.shape, x.stride()):
        return x + 1
    return x - 1


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 6), lambda: torch.randn(6, 4).t(),
                                  lambda: torch.randn(4, 12)[:, ::2]], ids=["contiguous", "transposed", "sliced"])
def test_traced_by_dynamo_with_dynamic_shapes(make):
    """Dynamo with dynamic=True: sorting by the strides was 'Unsupported: sort with non-constant keys'."""
    torch._dynamo.reset()
    x = make()
    compiled = torch.compile(_dense_or_not, backend="eager", fullgraph=True, dynamic=True)
    assert torch.equal(compiled(x), _dense_or_not(x))


def _leaf_grad(n: int, compiler_fn=None) -> torch.Tensor:
    torch.manual_seed(n)
    x = torch.randn(6, n).t().requires_grad_()  # a dense, non-contiguous leaf whose size changes
    w = torch.randn(6, 3)
    if compiler_fn is None:
        (x @ w).sin().sum().backward()
    else:
        with compiled_autograd.enable(compiler_fn):
            (x @ w).sin().sum().backward()
    return x.grad


def test_compiled_autograd_backward_compiled_by_dynamo_with_dynamic_shapes_accumulates_like_eager():
    """A backward compiled by torch.compile(dynamic=True, fullgraph=True), sizes changing: the
    leaf's gradient gets eager's values and layout (the accumulation, with its layout check,
    is a call out of the graph: it runs on the real tensors, never traced)."""
    torch._dynamo.reset()
    compiled_autograd.reset()

    def compiler_fn(gm):
        return torch.compile(gm, backend="eager", fullgraph=True, dynamic=True)
    for n in (3, 5, 7):
        eager, compiled = _leaf_grad(n), _leaf_grad(n, compiler_fn)
        assert torch.equal(compiled, eager) and compiled.stride() == eager.stride()
    assert aotgrad.counters["compiled_autograd"]["hits"] >= 1
