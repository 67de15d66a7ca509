"""In-place metadata changes of inputs (`t_`, `transpose_`, `unsqueeze_`, `squeeze_`,
`as_strided_`, `resize_`, `detach_`, `requires_grad_`): the compiled function leaves each
input as eager does (sizes, strides, offset, data, requires_grad, history, `._base`), its
outputs and the gradients too. The runtime replays the recorded ops on the caller's tensor
(runtime/epilogue.ReplayMetadata) after writing its data back in its original geometry."""
from __future__ import annotations

from typing import Callable

import pytest
import torch

import aotgrad


def _state(t: torch.Tensor, inputs: list, bases: list) -> tuple:
    """What the caller can see of a tensor, with `._base` and storage sharing as positions."""
    base = t._base
    base_at = None if base is None else next((k for k, b in enumerate(bases) if b is base), "other")
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.requires_grad, t.is_leaf,
            t.grad_fn is None, base_at,
            tuple(k for k, x in enumerate(inputs) if x is t),
            tuple(k for k, x in enumerate(inputs) if x.untyped_storage()._cdata == t.untyped_storage()._cdata))


def _run(fn: Callable, make: Callable, compiled: Callable | None):
    """fn (or compiled) on fresh inputs from make() -> (inputs, leaves); backward on what requires grad."""
    torch.manual_seed(0)
    inputs, leaves = make()
    bases = [x._base for x in inputs]
    outs = (compiled or fn)(*inputs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    seen = {
        "outputs": [_state(o, inputs, bases + inputs) for o in outs],
        "inputs": [_state(x, inputs, bases) for x in inputs],
        "output values": [o.detach().clone() for o in outs],
        "input values": [x.detach().clone() for x in inputs],
        "bases": [None if b is None else b.detach().clone() for b in bases],
    }
    roots = [t for t in outs + inputs if t.requires_grad and t.grad_fn is not None]
    roots += [o for o in outs if o.requires_grad and o.is_leaf and not any(o is x for x in inputs)]
    if roots:
        gen = torch.Generator().manual_seed(0)
        total = sum((r * torch.randn(r.shape, generator=gen)).sum() for r in roots)
        total.backward()
    seen["grads"] = [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]
    return seen


def assert_like_eager(fn: Callable, make: Callable, compiled: Callable | None = None) -> None:
    """Compiled against eager, on fresh inputs, twice: the first call compiles, the second hits
    the cache (a generated call path of its own)."""
    compiled = compiled or aotgrad.aot_function(fn, aotgrad.nop)
    expected = _run(fn, make, None)
    for call in ("first call", "second call"):
        _same(_run(fn, make, compiled), expected, call)


def _same(actual: dict, expected: dict, call: str) -> None:
    for key in ("outputs", "inputs"):
        assert actual[key] == expected[key], f"{call}: {key}: {actual[key]} != eager {expected[key]}"
    for key in ("output values", "input values", "bases", "grads"):
        for k, (a, e) in enumerate(zip(actual[key], expected[key])):
            if e is None or a is None:
                assert a is None and e is None, f"{call}: {key} {k}: {a} != eager {e}"
            else:
                torch.testing.assert_close(a, e, msg=lambda m: f"{call}: {key} {k}: {m}")


def _non_leaf(*shape, requires_grad=True):
    """make(): one non-leaf input (a leaf times one) and its leaf."""
    def make():
        leaf = torch.arange(float(torch.Size(shape).numel())).reshape(shape).requires_grad_(requires_grad)
        return [leaf * 1], [leaf]
    return make


def _plain(*shape):
    def make():
        return [torch.arange(float(torch.Size(shape).numel())).reshape(shape)], []
    return make


@pytest.mark.parametrize("requires_grad", [False, True])
def test_transpose_then_write_then_view(requires_grad):
    def fn(a):
        a.t_()
        a[0].mul_(2)
        return a.view(a.shape)
    assert_like_eager(fn, _non_leaf(3, 3, requires_grad=requires_grad))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_metadata_only_then_compute(requires_grad):
    def fn(a):
        a.transpose_(1, 0)
        tmp = a.mul(2)
        return tmp.transpose(1, 0), a.sum(0)
    assert_like_eager(fn, _non_leaf(3, 2, 4, requires_grad=requires_grad))


@pytest.mark.parametrize("op", ["unsqueeze_", "squeeze_", "squeeze_dim", "swapdims_", "t_twice", "chain"])
def test_each_metadata_op_with_a_write_and_outputs_viewing_the_input(op):
    def fn(a):
        if op == "unsqueeze_":
            a.unsqueeze_(1)
        elif op == "squeeze_":
            a.squeeze_()
        elif op == "squeeze_dim":
            a.squeeze_(0)
        elif op == "swapdims_":
            a.swapdims_(0, 2)
        elif op == "t_twice":
            a.squeeze_(0).t_().t_()
        else:
            a.squeeze_(0).unsqueeze_(-1).transpose_(0, 2)
        a.mul_(3)
        return a + 1, a.view(-1) if a.is_contiguous() else a.diagonal(), a
    assert_like_eager(fn, _non_leaf(1, 3, 2))
    assert_like_eager(fn, _plain(1, 3, 2))


def test_a_view_taken_before_the_metadata_change_keeps_its_geometry():
    def fn(a):
        v = a.view(-1)
        a.t_()
        a[1].add_(10)
        return v, a
    assert_like_eager(fn, _plain(2, 3))
    assert_like_eager(fn, _non_leaf(2, 3, requires_grad=False))


def test_a_view_taken_before_the_metadata_change_of_a_written_input_requiring_grad_is_refused():
    """Autograd rebuilds the view's history by replaying `view(-1)` on the transposed fake
    (eager uses as_strided on real tensors): a clear error."""
    def fn(a):
        v = a.view(-1)
        a.t_()
        a[1].add_(10)
        return v, a
    with pytest.raises(aotgrad.errors.UnsupportedError, match="a view then returned after an in-place metadata op"):
        aotgrad.aot_function(fn, aotgrad.nop)(*_non_leaf(2, 3)()[0])


def test_as_strided_shrink_keeps_writes_outside_the_new_view():
    def fn(a):
        row = a[1]
        a.as_strided_((2, 2), (1, 3), 1)
        row.mul_(2)       # eager: row 1 of the old view, partly outside a's new view
        return a * 1
    assert_like_eager(fn, _plain(2, 3))
    assert_like_eager(fn, _non_leaf(2, 3, requires_grad=False))


@pytest.mark.parametrize("input_or_intermediate", ["input", "intermediate"])
def test_a_view_used_after_its_base_requiring_grad_changed_metadata_is_refused(input_or_intermediate):
    """On fake tensors autograd would rebuild `row`'s history by replaying `select` on the
    changed base: wrong gradients (found with this test: [[0, 4, 4], [1, 6, 5]] where eager
    gives [[0, 2, 4], [2, 6, 10]] for the intermediate). A clear error instead."""
    def fn(x):
        b = x if input_or_intermediate == "input" else x * 1
        row = b[1]
        b.t_()
        row.mul_(2)
        return b * 1
    x = torch.arange(6.).reshape(2, 3).requires_grad_()
    with pytest.raises(aotgrad.errors.UnsupportedError, match="a view then used by `aten.mul_.Tensor` after an "
                                                              "in-place metadata op"):
        aotgrad.aot_function(fn, aotgrad.nop)(x * 1)


def test_resize_smaller_then_write():
    def fn(a):
        a.resize_(2, 2)
        a.add_(1)
        return a.sum(), a
    assert_like_eager(fn, _plain(3, 3))


@pytest.mark.parametrize("order", ["detach_then_compute", "write_then_detach", "compute_then_detach"])
def test_detach_in_place(order):
    def fn(a, w):
        if order == "detach_then_compute":
            a.detach_()
            return a * w
        if order == "write_then_detach":
            a.mul_(w)
            a.detach_()
            return a + 1
        out = a * 2 + w   # (`a * w` would save `a`: eager's backward then refuses it, detached in place)
        a.detach_()
        return out, a.sum()

    def make():
        leaf, w = torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)
        return [leaf * 1, w], [leaf, w]
    assert_like_eager(fn, make)


def test_detach_then_write_with_a_value_that_requires_grad():
    def fn(a, w):
        a.detach_()
        a.mul_(w)
        return a + 1

    def make():
        leaf, w = torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)
        return [leaf * 1, w], [leaf, w]
    assert_like_eager(fn, make)


def test_a_leaf_input_detached_in_place_then_written():
    """`a.detach_()` makes the leaf stop requiring grad; the write then gives it a history
    (the runtime detaches the caller's leaf before writing into it)."""
    def fn(a, b):
        a.detach_()
        a[0:1] = b
        return (a * 2,)

    def make():
        a, b = torch.randn(2, requires_grad=True), torch.randn((), requires_grad=True)
        return [a, b], [a, b]
    assert_like_eager(fn, make)


def test_requires_grad_false_on_a_leaf_input():
    def fn(a):
        out = a * 2
        a.requires_grad_(False)
        return out, a * 3

    def make():
        a = torch.randn(3, requires_grad=True)
        return [a], [a]
    assert_like_eager(fn, make)


def test_metadata_change_of_a_duplicated_input():
    def fn(a, b):
        a.t_()
        b.unsqueeze_(0)
        return a + 1, b

    def make():
        leaf = torch.randn(2, 3, requires_grad=True)
        x = leaf * 1
        return [x, x], [leaf]
    assert_like_eager(fn, make)


def test_metadata_change_of_a_view_input():
    def fn(a):
        a.t_()
        a.add_(1)
        return a * 2

    def make():
        base = torch.randn(4, 3)
        return [base[1:3]], []
    assert_like_eager(fn, make)


def test_metadata_change_under_torch_compile():
    def fn(a, b):
        a.t_()
        a.mul_(2)
        b.unsqueeze_(0)
        return a + b.sum()

    torch._dynamo.reset()
    assert_like_eager(fn, _two_non_leaves, torch.compile(fn, backend="aotgrad"))


def _two_non_leaves():
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    return [x * 1, y * 1], [x, y]


def test_metadata_change_under_dynamic_shapes_replays_each_calls_sizes():
    def fn(a):
        a.transpose_(0, 1)
        a.mul_(2)
        return a.reshape(-1) + 1

    compiled = aotgrad.aot_function(fn, aotgrad.nop, dynamic=True)
    for n in (3, 5, 7):
        assert_like_eager(fn, _non_leaf(n, 4), compiled)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_metadata_change_of_an_input_aliasing_another_unwritten_input(requires_grad):
    """Two views of one tensor, one transposed in place: no data is written, so no synthetic
    base; the other view keeps its geometry (the transpose's version bump is no write)."""
    def fn(a, b):
        a.t_()
        return a + b, b

    def make():
        leaf = torch.arange(1.0, 5.0).requires_grad_(requires_grad)
        x = leaf * 1
        return [x.view(2, 2), x.view(2, 2)], [leaf]
    assert_like_eager(fn, make)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_metadata_change_of_an_input_aliasing_a_written_input(requires_grad):
    """A synthetic base (one input written, another view of its memory transposed): the base
    is written back once, then the transposed input gets its new geometry."""
    def fn(a, b):
        a.mul_(2)
        b.t_()
        return a.mul(b), b

    def make():
        base = torch.arange(1.0, 5.0).view(2, 2).requires_grad_(requires_grad)
        x = base.add(1)
        return [x[0:2], x[0:2]], [base]
    assert_like_eager(fn, make)


def test_metadata_change_of_inputs_aliasing_written_inputs_out_of_order():
    def fn(a, b, c, d):
        b.add_(1)
        d.unsqueeze_(0)
        return a + c + d, b

    def make():
        base = torch.randn(2, 2, requires_grad=True)
        x, y = base.add(1), torch.randn(2, 2, requires_grad=True)
        return [y.add(1), x.view(-1), y.mul(2), x.view(2, 2)], [base, y]
    assert_like_eager(fn, make)


def test_requires_grad_change_of_an_input_aliasing_a_written_input_is_refused():
    def fn(a, b):
        a.mul_(2)
        b.requires_grad_()
        return a + b
    x = torch.ones(2, 2).add(1)
    with pytest.raises(aotgrad.errors.UnsupportedError, match="input 1,? (which )?shares memory with input"):
        aotgrad.aot_function(fn, aotgrad.nop)(x[0:2], x[0:2])


@pytest.mark.parametrize("requires_grad", [False, True])
def test_metadata_and_data_mutations_on_several_inputs_with_views_returned(requires_grad):
    def fn(a, b, c, d):
        b.mul_(3)
        c.t_()
        d.transpose_(1, 0)
        return a.view(4), b.view(2, 2), c.view(2, 2), d.diagonal(), a + b

    def make():
        leaves = [torch.arange(4.0).view(2, 2).requires_grad_(requires_grad) for _ in range(4)]
        return [leaf.add(1) for leaf in leaves], leaves
    assert_like_eager(fn, make)


def test_outputs_of_every_alias_kind_after_a_metadata_change():
    def fn(a):
        a.transpose_(1, 0)
        tmp = a.mul(2)
        return tmp.squeeze(), tmp.transpose(1, 0), a.unsqueeze(0)
    assert_like_eager(fn, _non_leaf(3, 2, 4))
    assert_like_eager(fn, _non_leaf(3, 2, 4, requires_grad=False))


def test_a_metadata_op_on_a_view_of_an_input_bumps_the_inputs_version_as_in_eager():
    # fuzz: eager's transpose_ of a view bumps the version counter it shares with the input
    def fn(a):
        v0 = a.reshape(-1)
        v0.transpose_(0, -1)
        return (a,)
    x, y = torch.randn(()), torch.randn(())
    fn(x)
    aotgrad.aot_function(fn, aotgrad.nop)(y)
    assert y._version == x._version == 1


def test_an_input_saved_for_backward_survives_the_replay_of_its_metadata_ops():
    # fuzz: the backward saved the input the runtime then transposed in place (a version bump
    # autograd refused at backward); it saves a copy now, as for inputs written in place
    def fn(a, b):
        v0 = a @ a
        b.t_()
        return b @ v0, torch.maximum(b, b.exp())

    def make():
        a, leaf = torch.randn(2, 2), torch.randn(2, 3, requires_grad=True)
        return [a, leaf * 1], [a, leaf]
    assert_like_eager(fn, make)


@pytest.mark.parametrize("grad_mode", [True, False])
def test_requires_grad_on_an_input_that_did_not_require_grad(grad_mode):
    """Outputs computed before `requires_grad_()` do not require grad, those after do, and
    their gradients reach the caller's tensor (made to require grad before the call)."""
    def fn(a, b):
        before = a * 2
        a.requires_grad_()
        return before, a.mul(3), b.mul(4), (a * b).sum()

    def make():
        a, b = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
        return [a, b], [a, b]
    with torch.set_grad_enabled(grad_mode):
        assert_like_eager(fn, make)


def test_requires_grad_on_an_input_then_a_write_into_it():
    def fn(a, w):
        a.requires_grad_()
        out = a.exp()
        return out, a.sum() * w

    def make():
        a, w = torch.randn(2, 3), torch.randn((), requires_grad=True)
        return [a, w], [a, w]
    assert_like_eager(fn, make)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_resize_larger_then_write_the_new_elements(requires_grad):
    """Eager grows the caller's storage (the new elements uninitialised until written)."""
    def fn(a, w):
        a.resize_(3, 4)
        a.view(-1)[6:].fill_(7.0)   # (eager leaves the new elements uninitialised)
        a.mul_(2)
        return a.sum(0) * w

    def make():
        w = torch.randn((), requires_grad=requires_grad)
        return [torch.arange(6.0).view(2, 3), w], [w]
    assert_like_eager(fn, make)


def test_written_aliased_inputs_a_transposed_one_and_outputs_aliasing_each_other():
    def fn(a, b, c):
        c.mul_(2)
        b.t_()
        total = a + c
        flat = total.view(-1)
        return flat, b.t(), flat.unsqueeze(0)

    def make():
        base1, base2 = torch.ones(2, 2, requires_grad=True), torch.ones(2, 2, requires_grad=True)
        x, y = base1.add(1), base2.add(1)
        return [x.view(-1), y, x.view(-1)], [base1, base2]
    assert_like_eager(fn, make)


def test_a_view_of_an_input_made_to_require_grad_and_returned():
    def fn(a, b):
        v = a.view(-1)
        v.requires_grad_(True)
        return v, b * 2

    def make():
        b = torch.randn(3, 3, requires_grad=True)
        return [torch.randn(3, 3), b], [b]
    assert_like_eager(fn, make)


def _programs():
    def transpose_then_add(a, b):
        a.transpose_(1, 0)
        return a + b

    def transpose_write_add(a, b):
        a.transpose_(1, 0)
        a.mul_(2)
        return a + b

    def duplicated(a, b):
        a.t_()
        b.unsqueeze_(0)
        return a + b

    def made_to_require_grad(a, b):
        a.requires_grad_(True)
        return a.mul(3), b.mul(4)

    def make_two():
        x, y = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
        return [x.add(1), y.add(1)], [x, y]

    def make_dup():
        x = torch.randn(3, 3, requires_grad=True)
        y = x.add(1)
        return [y, y], [x]

    def make_plain_and_graded():
        b = torch.randn(3, 3, requires_grad=True)
        return [torch.randn(3, 3), b], [b]
    return {"transpose_then_add": (transpose_then_add, make_two),
            "transpose_write_add": (transpose_write_add, make_two),
            "duplicated": (duplicated, make_dup),
            "made_to_require_grad": (made_to_require_grad, make_plain_and_graded)}


@pytest.mark.parametrize("backend", ["aotgrad", "aotgrad_inductor", "aotgrad_dynamic"])
@pytest.mark.parametrize("program", sorted(_programs()))
def test_metadata_mutations_under_torch_compile(backend, program):
    fn, make = _programs()[program]
    torch._dynamo.reset()
    dynamic = backend.endswith("_dynamic")
    compiled = torch.compile(fn, backend=backend.removesuffix("_dynamic"), dynamic=dynamic or None)
    assert_like_eager(fn, make, compiled)


def test_requires_grad_on_an_input_another_input_views_is_refused():
    # fuzz: eager's `a = l0[1:]` requires grad once `b = l0` does; the trace holds them apart
    def fn(a, b):
        b.requires_grad_()
        return (a.narrow(0, 0, 0),)
    l0 = torch.randn(2)
    with pytest.raises(aotgrad.errors.UnsupportedError, match="calls `requires_grad_\\(\\)` on input 1, which shares"):
        aotgrad.aot_function(fn, aotgrad.nop)(l0[1:], l0)
