"""aot_function / aot_module against eager: outputs, grads, mutations, aliasing."""
import copy
import threading

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

import aotgrad
from tests.oracle import assert_same_as_eager
from tests.threads import at_once


def test_pointwise_chain_matches_eager():
    assert_same_as_eager(lambda x, w: (x * w).sin().exp(), [torch.randn(4, 3), torch.randn(3, requires_grad=True)])


def test_pytree_inputs_and_outputs():
    def fn(d, scale):
        return {"sum": d["a"] + d["b"] * scale, "list": [d["a"].cos(), scale]}
    assert_same_as_eager(fn, [{"a": torch.randn(3, requires_grad=True), "b": torch.randn(3)}, 2.0]) \
        if False else None
    f = aotgrad.aot_function(fn, aotgrad.nop)
    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    out = f({"a": a, "b": b}, 2.0)
    torch.testing.assert_close(out["sum"], a + b * 2.0)
    assert out["list"][1] == 2.0
    (out["sum"].sum() + out["list"][0].sum()).backward()
    torch.testing.assert_close(a.grad, torch.ones(3) - a.detach().sin())


def test_input_mutation_is_written_back():
    def fn(x, y):
        x.add_(y)
        return x * 2
    assert_same_as_eager(fn, [torch.randn(3), torch.randn(3, requires_grad=True)])


def test_input_mutated_under_no_grad_is_written_back_without_autograd():
    def fn(param, y):
        with torch.no_grad():
            param.add_(y)
        return y * param
    param = torch.nn.Parameter(torch.randn(4))
    assert_same_as_eager(fn, [param, torch.randn(4)])


def test_slice_assignment_mutates_input():
    def fn(x, y):
        x[1:3] = y
        return x.sum(0)
    assert_same_as_eager(fn, [torch.randn(4, 2), torch.randn(2, 2, requires_grad=True)])


def test_mutation_through_view_is_seen_by_other_views():
    def fn(x):
        y = x.clone()
        t = y.t()
        y[0].mul_(10)
        return t + 1
    assert_same_as_eager(fn, [torch.randn(3, 2, requires_grad=True)])


def test_output_is_view_of_input_and_later_mutation_shows_in_input():
    def fn(x):
        return x.t(), x[0]
    f = aotgrad.aot_function(fn, aotgrad.nop)
    x = torch.randn(2, 3)
    t, row = f(x)
    t.mul_(2)
    assert t._base is x and row._base is x
    torch.testing.assert_close(row, x[0])
    assert_same_as_eager(fn, [torch.randn(2, 3, requires_grad=True)])


def test_outputs_aliasing_each_other_stay_aliased():
    def fn(x):
        y = x * 2
        return y, y.view(-1)
    f = aotgrad.aot_function(fn, aotgrad.nop)
    y, flat = f(torch.randn(2, 3))
    y.add_(1)
    torch.testing.assert_close(flat, y.view(-1))
    assert_same_as_eager(fn, [torch.randn(2, 3, requires_grad=True)])


def test_function_returning_input_unchanged_returns_the_same_object():
    f = aotgrad.aot_function(lambda x, y: (x, x * y), aotgrad.nop)
    x = torch.randn(3, requires_grad=True)
    out, _ = f(x, torch.randn(3))
    assert out is x


def test_duplicated_input_gets_one_gradient():
    def fn(a, b):
        return a * b + a
    x = torch.randn(3, requires_grad=True)
    assert_same_as_eager(fn, [x, x])


def test_same_tensor_returned_twice_is_one_object():
    f = aotgrad.aot_function(lambda x: (lambda y: (y, y))(x + 1), aotgrad.nop)
    a, b = f(torch.randn(3))
    assert a is b


def test_grad_mode_change_inside_function_persists():
    def fn(x):
        y = x * x
        torch.set_grad_enabled(False)
        return y.clone(), y
    f = aotgrad.aot_function(fn, aotgrad.nop)
    x = torch.ones(3, requires_grad=True) * 3
    try:
        clone, y = f(x)
        assert torch.is_grad_enabled() is False
    finally:
        torch.set_grad_enabled(True)
    assert clone.grad_fn is None and y.grad_fn is not None
    grads = [g for g in y.grad_fn.apply(None, torch.tensor([-1.0, 2.0, 0.0])) if g is not None]
    torch.testing.assert_close(sum(grads), torch.tensor([-1.0, 2.0, 0.0]) * 2 * 3)


def _enables_grad_inside(x, a, w):
    r = torch.relu(a @ w)              # under the caller's no_grad: no history
    with torch.enable_grad():
        y = x * r + w.sum()            # history back to x and w
    return y, r


@pytest.mark.parametrize("how", ["aot_function", "aotgrad", "aotgrad_inductor"])
def test_called_under_no_grad_and_turning_it_on_inside_keeps_gradients(how):
    compiled = (aotgrad.aot_function(_enables_grad_inside, aotgrad.nop) if how == "aot_function"
                else torch.compile(_enables_grad_inside, backend=how))
    torch._dynamo.reset()
    results = []
    for fn in (_enables_grad_inside, compiled):
        torch.manual_seed(0)
        x, a, w = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
        with torch.no_grad():
            y, r = fn(x, a, w)
        assert torch.is_grad_enabled()
        y.pow(2).sum().backward()
        results.append([y.detach(), r, y.requires_grad, r.requires_grad, x.grad, w.grad])
    eager, got = results
    assert got[2:4] == eager[2:4] == [True, False]
    for e, g in zip(eager[:2] + eager[4:], got[:2] + got[4:]):
        torch.testing.assert_close(g, e)


def test_double_backward_raises_with_clear_message():
    f = aotgrad.aot_function(lambda x: x.sin().exp(), aotgrad.nop)
    x = torch.tensor(1.0, requires_grad=True)
    (gx,) = torch.autograd.grad(f(x), x, create_graph=True)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        torch.autograd.grad(gx, x)


def test_backward_twice_with_retain_graph():
    f = aotgrad.aot_function(lambda x: x.sin().sum(), aotgrad.nop)
    x = torch.randn(3, requires_grad=True)
    y = f(x)
    y.backward(retain_graph=True)
    y.backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())


def test_inference_graph_when_grad_disabled():
    f = aotgrad.aot_function(lambda x: x.sin(), aotgrad.nop)
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        y = f(x)
    assert not y.requires_grad
    torch.testing.assert_close(y, x.detach().sin())


def test_aot_module_batchnorm_updates_running_stats():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    reference.load_state_dict(model.state_dict())
    compiled = aotgrad.aot_module(model, aotgrad.nop)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(2):
        compiled(x).sum().backward()
        reference(x).sum().backward()
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_dropout_uses_one_draw_for_forward_and_backward():
    def fn(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) * 3
    assert_same_as_eager(fn, [torch.randn(64, requires_grad=True)])


def test_torch_compile_backend_trains_like_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    x = torch.randn(4, 8)
    reference = [p.detach().clone() for p in model.parameters()]
    eager_loss = model(x).pow(2).mean()
    eager_loss.backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    loss = torch.compile(model, backend="aotgrad")(x).pow(2).mean()
    loss.backward()
    torch.testing.assert_close(loss, eager_loss)
    for p, g, r in zip(model.parameters(), eager_grads, reference):
        torch.testing.assert_close(p.grad, g)
        torch.testing.assert_close(p, r)


# -- outputs that view inputs or other outputs: rebuilt by replaying the recorded view ops --

def _grad_fn_names(outs):
    """grad_fn types of the outputs that are views (fresh outputs come from the compiled Function)."""
    return [type(o.grad_fn).__name__ for o in outs if o._base is not None]


def _assert_views_like_eager(fn, args):
    assert_same_as_eager(fn, args)
    from tests.oracle import clone_inputs
    expected = fn(*clone_inputs(args))
    actual = aotgrad.aot_function(fn, aotgrad.nop)(*clone_inputs(args))
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert [(o.dtype, o.is_conj(), o.stride(), o._base is not None) for o in actual] == \
        [(o.dtype, o.is_conj(), o.stride(), o._base is not None) for o in expected]
    assert _grad_fn_names(actual) == _grad_fn_names(expected)


def test_view_output_changing_dtype_keeps_eager_dtype():
    _assert_views_like_eager(lambda x: torch.view_as_complex(x), [torch.randn(3, 2, requires_grad=True)])
    _assert_views_like_eager(lambda z: torch.view_as_real(z), [torch.randn(3, dtype=torch.complex64)])


def test_conj_view_output_keeps_conj_bit():
    _assert_views_like_eager(lambda z: z.conj(), [torch.randn(4, dtype=torch.complex64, requires_grad=True)])
    _assert_views_like_eager(lambda x: torch.fft.ifft(x), [torch.randn(6, requires_grad=True)])


def test_split_outputs_of_input_have_eager_grad_fns():
    _assert_views_like_eager(lambda x: x.split(2), [torch.randn(6, 3, requires_grad=True)])
    _assert_views_like_eager(lambda x: tuple(x.unbind(1)), [torch.randn(2, 3, requires_grad=True)])


def test_views_of_an_intermediate_output():
    _assert_views_like_eager(lambda x: ((y := x * 2), y.t(), y[1:].diagonal()), [torch.randn(3, 3, requires_grad=True)])


def test_view_of_intermediate_whose_metadata_changed_in_place():
    def fn(x):
        y = x * 2
        v = y.view(2, 3)
        v.t_()  # the recorded chain (view) no longer describes v: rebuilt with as_strided
        return y, v
    assert_same_as_eager(fn, [torch.randn(6, requires_grad=True)])


def test_view_of_input_taken_after_an_in_place_update():
    def fn(x):
        x.mul_(2)
        return x[::2].unsqueeze(0)
    _assert_views_like_eager(fn, [torch.randn(6, requires_grad=True) * 1])


# -- non-leaf inputs that require grad keep their layout (strides, storage offset) while traced --

NON_LEAF_LAYOUTS = {
    "offset_view": (lambda a: a.view(-1), lambda t: t[1:]),
    "strided_as_strided": (lambda a: (a * 2, a.as_strided((2,), (2,), 1)), lambda t: t[::2]),
    "offset_as_strided": (lambda a: a.as_strided((2,), (1,), 3) * 1, lambda t: t[2:]),
    "mutated_strided": (lambda a: a.mul_(2).sum(), lambda t: t[::3]),
    "mutated_then_viewed": (lambda a: (a.add_(1), a[0])[1], lambda t: t.view(3, 4)[:, 1:]),
    "expanded_read": (lambda a: a.sin(), lambda t: t[:3].expand(2, 3)),
    "transposed": (lambda a: a.t().contiguous().view(-1)[:5], lambda t: t.view(3, 4).t()),
}


@pytest.mark.parametrize("name", list(NON_LEAF_LAYOUTS))
def test_non_leaf_input_with_its_own_layout(name):
    fn, make_input = NON_LEAF_LAYOUTS[name]
    leaf = torch.randn(12)

    def run(f):
        root = leaf.clone().requires_grad_(True)
        x = make_input(root * 1)
        outs = f(x)
        outs = outs if isinstance(outs, tuple) else (outs,)
        sum(o.sum() * (k + 1) for k, o in enumerate(outs)).backward()
        return [o.detach() for o in outs], root.grad, x.detach()

    (exp_outs, exp_grad, exp_x) = run(fn)
    (outs, grad, x) = run(aotgrad.aot_function(fn, aotgrad.nop))
    for actual, expected in zip(outs, exp_outs):
        torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(grad, exp_grad)
    torch.testing.assert_close(x, exp_x)


def test_mutated_input_whose_backward_autograd_cannot_run_fails_only_when_used():
    def fn(a):
        out = a * 2
        a.mul_(a)  # mul_'s backward needs the `a` it overwrote
        return out

    results = []
    for f in (fn, aotgrad.aot_function(fn, aotgrad.nop)):
        leaf = torch.ones(3, requires_grad=True)
        a = leaf * 1
        f(a).sum().backward()  # the output's gradient is fine
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            a.sum().backward()  # a gradient through the mutated input is not, in eager too
        results.append(leaf.grad)
    torch.testing.assert_close(results[1], results[0])


def test_foreach_in_place_on_inputs_is_written_back():
    def fn(a, b):
        torch._foreach_add_([a, b], 1.5)
        return a * b
    assert_same_as_eager(fn, [torch.randn(3), torch.randn(3)])
    assert_same_as_eager(fn, [torch.randn(3, requires_grad=True) * 1, torch.randn(3)])


# -- cases the fuzzer found (tests/fuzz/regressions/ has the shrunk programs) --

def test_write_through_dot_data_reaches_the_input():
    def fn(a):
        a.data.mul_(2)
        return a + 1
    assert_same_as_eager(fn, [torch.randn(3)])
    x = torch.randn(3)
    aotgrad.aot_function(fn, aotgrad.nop)(x)
    assert x._version == 0  # eager's `.data` write does not bump the version either


def test_write_through_expand_of_an_input_with_a_storage_offset():
    def fn(a):
        a.expand(3, 4).mul_(2)
        return a * 1
    base, expected_base = torch.randn(4, 4), None
    expected_base = base.clone()
    fn(expected_base[1:])
    aotgrad.aot_function(fn, aotgrad.nop)(base[1:])
    torch.testing.assert_close(base, expected_base)


def test_copy_of_an_expanded_view_to_itself_is_a_no_op():
    def fn(a):
        v = a.expand(3, 3)
        v.copy_(v)
        return v * 1
    assert_same_as_eager(fn, [torch.randn(1, 3)])


def test_in_place_write_to_a_self_overlapping_view_is_rejected():
    def fn(a):
        a.unfold(0, 2, 1).add_(0.5)
        return a
    with pytest.raises(aotgrad.errors.UnsupportedError, match="overlap in memory"):
        aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3))


def test_leaf_made_inside_the_function_is_returned_as_a_leaf():
    def fn(a):
        return torch.ones_like(a).requires_grad_(), a * 2
    leaf, _ = aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(2, requires_grad=True))
    assert leaf.is_leaf and leaf.requires_grad and leaf.grad_fn is None
    leaf.sum().backward()
    torch.testing.assert_close(leaf.grad, torch.ones(2))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_leaf_made_inside_the_function_gets_the_grads_of_outputs_computed_from_it(requires_grad):
    def fn(a):
        leaf = torch.ones_like(a).requires_grad_()
        return leaf, a * leaf, leaf[1:]

    a = torch.randn(3, requires_grad=requires_grad)
    leaf, product, view = aotgrad.aot_function(fn, aotgrad.nop)(a)
    assert leaf.is_leaf and product.requires_grad and view._base is leaf
    (product.sum() + view.sum()).backward()
    torch.testing.assert_close(leaf.grad, a.detach() + torch.tensor([0.0, 1.0, 1.0]))


def test_output_of_a_leaf_made_inside_requires_grad_when_no_input_does():
    def fn(a):
        return a - torch.ones_like(a).requires_grad_()

    assert_same_as_eager(fn, [torch.randn(3)])
    with torch.no_grad():  # no grad mode, no graph: as in eager
        assert not aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3)).requires_grad


def test_leaf_made_inside_from_an_inputs_memory_and_returned_is_rejected():
    def fn(a):
        leaf = a.detach().requires_grad_()
        return leaf, leaf * 2

    with pytest.raises(aotgrad.errors.UnsupportedError, match="from the memory of another tensor"):
        aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3))


def test_output_sharing_memory_with_its_detached_copy_keeps_its_own_autograd_state():
    # torch.compile graph breaks at requires_grad_(): the first graph returns (x.detach(), x);
    # x must not be rebuilt as a view of the detached output, which the caller then changes
    def fn(a):
        x = a * 2
        return x.detach(), x

    detached, x = aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3))
    detached.requires_grad_()
    assert not x.requires_grad


def test_view_of_an_input_made_a_leaf_inside_is_returned_as_a_leaf():
    def fn(a):
        v = a.view(1, -1)
        v.requires_grad_()
        return v

    assert_same_as_eager(fn, [torch.randn(3)])
    out = aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3))
    assert out.is_leaf and out.requires_grad


def test_input_returned_unchanged_with_a_synthetic_base_is_the_callers_tensor():
    def fn(a, b):
        b.mul_(2)
        return a, b

    base = torch.randn(4)
    a, b = base[:3], base[1:]
    out_a, out_b = aotgrad.aot_function(fn, aotgrad.nop)(a, b)
    assert out_a is a and out_b is b


def test_a_synthetic_base_is_not_reused_for_a_base_of_another_size():
    def fn(a, b):
        a.mul_(2)
        return a + b

    compiled = aotgrad.aot_function(fn, aotgrad.nop)
    for size in (5, 8, 5):  # the same views (a = base[:4], b = base[1:5]) of bases of two sizes
        base = torch.randn(size)
        twin = base.clone()
        torch.testing.assert_close(compiled(base[:4], base[1:5]), fn(twin[:4], twin[1:5]))
        torch.testing.assert_close(base, twin)


def test_backward_does_not_reach_an_input_that_gets_no_gradient():
    def fn(a, b):
        unused = a - b  # noqa: F841  (b gets no gradient)
        return a * 3

    for f in (fn, aotgrad.aot_function(fn, aotgrad.nop)):
        leaf = torch.randn((), requires_grad=True)
        x = leaf * 1
        b = x.sin()
        x.mul_(2)  # b's grad_fn saved the old x: running it would fail
        f(leaf * 1, b).backward()
        torch.testing.assert_close(leaf.grad, torch.tensor(3.0))


# Writes through a detached alias (`t = b.detach()`, `b.data`): t shares b's memory but not its
# autograd history; the compiled graph computes one value for both, and each must keep its own
# gradient (forward.apart). Each program takes a 0-d leaf `a` and a non-leaf (2, 3) input `b`.
def _detached_then_written_after_a_graded_write(a, b):
    t = b.detach()
    b.mul_(3.0)
    t.copy_(a.view(-1))
    return a, t, b


def _detached_written_before_a_graded_write(a, b):
    t = b.detach()
    t.copy_(a.expand(2, 3))
    b.mul_(a)
    return t, b


def _data_alias_multiplied_by_a_graded_value(a, b):
    t = b.data
    b.add_(a)
    t.mul_(a)
    return t * 2, b


def _detached_alias_written_not_returned(a, b):
    t = b.detach()
    b.mul_(2.0)
    t.add_(a)
    return (b * a,)


@pytest.mark.parametrize("fn", [_detached_then_written_after_a_graded_write, _detached_written_before_a_graded_write,
                                _data_alias_multiplied_by_a_graded_value, _detached_alias_written_not_returned],
                         ids=lambda f: f.__name__.strip("_"))
def test_writes_through_a_detached_alias_keep_each_tensors_gradient(fn):
    def run(f):
        torch.manual_seed(0)
        a = torch.tensor(2.0, requires_grad=True)
        b0 = torch.randn(2, 3, requires_grad=True)
        b = b0 * 1
        outs = f(a, b)
        loss = sum((k + 1) * o.sum() for k, o in enumerate(outs) if o.requires_grad)
        loss.backward()
        shares = [o.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for o in outs]
        return [o.detach() for o in outs], [o.requires_grad for o in outs], shares, b.detach(), a.grad, b0.grad

    expected, actual = run(fn), run(aotgrad.aot_function(fn, aotgrad.nop))
    for e, g in zip(expected, actual):
        if isinstance(e, torch.Tensor):
            assert torch.equal(e, g), (e, g)
        elif isinstance(e, list) and e and isinstance(e[0], torch.Tensor):
            assert all(torch.equal(x, y) for x, y in zip(e, g)), (e, g)
        else:
            assert e == g


def _view_of_a_detached_alias_written_with_its_base_returned(a, b):
    c = b * 1
    u = c.detach().view(-1)
    u.mul_(a)  # u takes a history (a view of the alias's CopySlices); c keeps its own
    return c, u


def _view_of_a_detached_input_alias_written(a, b):
    u = b.detach().view(-1)
    u.add_(a)
    return (u,)


@pytest.mark.parametrize("fn", [_view_of_a_detached_alias_written_with_its_base_returned,
                                _view_of_a_detached_input_alias_written], ids=lambda f: f.__name__.strip("_"))
def test_a_view_of_a_detached_alias_keeps_the_history_a_write_gave_it(fn):
    assert_same_as_eager(fn, [torch.tensor(2.0, requires_grad=True), torch.randn(2, 3, requires_grad=True)])


def _written_under_inference_mode(a, b):
    c = b * 1
    with torch.inference_mode():
        c.mul_(2)  # values change, c's history does not
    return (c * a,)


def _detached_in_place_after_a_view_was_taken(a, b):
    c = b * 1
    v = c.view(-1)
    c.detach_()
    return v * a, c


def _detached_alias_and_base_both_written(a, b):
    c = b * 1
    t = c.detach()
    t.mul_(a)
    c.add_(a)
    return c, t


def _data_alias_written_after_its_base(a, b):
    c = b.clone()
    t = c.data
    c.mul_(a)
    t.add_(a)
    return c, t, t.sum()


@pytest.mark.parametrize("fn", [_written_under_inference_mode, _detached_in_place_after_a_view_was_taken,
                                _detached_alias_and_base_both_written, _data_alias_written_after_its_base],
                         ids=lambda f: f.__name__.strip("_"))
def test_aliases_without_history_match_eager(fn):
    assert_same_as_eager(fn, [torch.tensor(2.0, requires_grad=True), torch.randn(2, 3, requires_grad=True)])


def _counting_nop(compiled_graphs: list):
    def compiler(gm, example_inputs):
        compiled_graphs.append(gm)
        return aotgrad.nop(gm, example_inputs)
    return compiler


def test_first_calls_of_an_aot_module_from_eight_threads_at_once_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    params = list(model.parameters())
    xs = [torch.randn(5, 8, requires_grad=True) for _ in range(8)]

    def step(f, x):  # autograd.grad: the threads' parameter gradients stay apart
        out = f(x)
        return out.detach(), torch.autograd.grad((out * out).sum(), [x, *params])

    for _ in range(3):  # a fresh compile each round
        graphs: list = []
        compiled = aotgrad.aot_module(model, _counting_nop(graphs))
        results = at_once(lambda i: step(compiled, xs[i]), 8)
        assert len(graphs) == 2  # one forward and one backward: the other threads waited for them
        for x, (out, grads) in zip(xs, results):  # (eager after the threads: the model is real again)
            expected_out, expected_grads = step(model, x)
            torch.testing.assert_close(out, expected_out)
            torch.testing.assert_close(grads, expected_grads)


class _StartsAThreadWhileTraced(torch.nn.Module):
    """Starts `thread` from inside its first trace (where its weight is a fake tensor)."""

    def __init__(self, thread: threading.Thread):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)
        self.thread = [thread]

    def forward(self, x):
        if self.thread and isinstance(self.linear.weight, FakeTensor):
            self.thread.pop().start()  # its call runs while this trace holds fake parameters
        return self.linear(x).relu()


def test_a_call_from_another_thread_while_an_aot_module_traces_waits_for_the_compile():
    torch.manual_seed(0)
    first, second = torch.randn(2, 4), torch.randn(2, 4)
    results: dict = {}

    def call_second():
        try:
            results["second"] = compiled(second)
        except Exception as e:  # noqa: BLE001 - raised again below
            results["error"] = e

    thread = threading.Thread(target=call_second)
    model = _StartsAThreadWhileTraced(thread)
    graphs: list = []
    compiled = aotgrad.aot_module(model, _counting_nop(graphs))
    out = compiled(first)
    thread.join()
    assert "error" not in results, results["error"]
    torch.testing.assert_close(out, model(first))
    torch.testing.assert_close(results["second"], model(second))
    assert not any(isinstance(p, FakeTensor) for p in model.parameters())
    assert len(graphs) == 1  # one compile (the forward; the backward at its first call)


@pytest.mark.parametrize("dynamic", [False, True])
def test_first_calls_of_an_aot_function_from_eight_threads_compile_once(dynamic):
    def fn(x, w):
        return (x @ w).tanh() * x.sum(dim=1, keepdim=True)

    torch.manual_seed(0)
    w = torch.randn(6, 3, requires_grad=True)
    # dynamic=True: eight batch sizes, all served by the first thread's graph (its guards pass)
    xs = [torch.randn(3 + i if dynamic else 4, 6, requires_grad=True) for i in range(8)]
    graphs: list = []
    compiled = aotgrad.aot_function(fn, _counting_nop(graphs), dynamic=dynamic)

    def step(f, x):
        out = f(x, w)
        return out.detach(), torch.autograd.grad(out.sum(), (x, w))

    results = at_once(lambda i: step(compiled, xs[i]), 8)
    assert len(graphs) == 2
    for x, (out, grads) in zip(xs, results):
        expected_out, expected_grads = step(fn, x)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(grads, expected_grads)


def test_copy_of_an_aot_module_compiles_on_its_own():
    model = torch.nn.Linear(3, 2)
    compiled = aotgrad.aot_module(model, aotgrad.nop)
    twin = copy.deepcopy(compiled)
    x = torch.randn(4, 3)
    for m in (compiled, twin):
        torch.testing.assert_close(m(x), model(x))
    assert twin.compiled.compile_lock is not compiled.compiled.compile_lock
    assert len(twin.compiled.cache) == len(compiled.compiled.cache) == 1


# -- keyword options: each entry point takes its own, and names the closest for any other ----------

def _linear_and_input():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2), torch.randn(4, 3)


def _call_entry_point(entry_point: str, **options):
    model, x = _linear_and_input()
    if entry_point == "aot_function":
        return aotgrad.aot_function(lambda x: model(x).relu(), aotgrad.nop, **options)(x)
    if entry_point == "aot_module":
        return aotgrad.aot_module(model, aotgrad.nop, **options)(x)
    return aotgrad.aot_module_simplified(model, [x], aotgrad.nop, **options)(x)


ENTRY_POINTS = ["aot_function", "aot_module", "aot_module_simplified"]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_a_misspelt_option_is_a_type_error_naming_the_closest_and_the_options(entry_point):
    with pytest.raises(TypeError) as caught:
        _call_entry_point(entry_point, partiton_fn=aotgrad.min_cut_rematerialization_partition)
    assert isinstance(caught.value, aotgrad.errors.UnknownOptionError)
    message = str(caught.value)
    assert message.startswith(f"{entry_point}() got an unexpected keyword argument 'partiton_fn'; "
                              "did you mean 'partition_fn'?")
    options = "inference_compiler, dynamic and inputs_guarded" if entry_point == "aot_module_simplified" \
        else "inference_compiler and dynamic"
    assert f"{entry_point}'s options are partition_fn, decompositions, {options}." in message
    assert message.endswith("To continue: use one of those names.")


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_an_option_of_pytorchs_aot_autograd_is_named_as_such(entry_point):
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'keep_inference_input_mutations'\. "
                                        r"'keep_inference_input_mutations' is an option of PyTorch's AOTAutograd "
                                        r"that aotgrad does not have\..* To continue: drop "):
        _call_entry_point(entry_point, keep_inference_input_mutations=True)


def test_a_misspelt_compiler_argument_names_the_compiler():
    model, x = _linear_and_input()
    with pytest.raises(TypeError, match=r"'bw_compilr'; did you mean 'bw_compiler'\?"):
        aotgrad.aot_module(model, aotgrad.nop, bw_compilr=aotgrad.nop)


def test_inputs_guarded_is_aot_module_simplifieds_only():
    with pytest.raises(TypeError, match=r"^aot_module\(\) got an unexpected keyword argument 'inputs_guarded'"):
        _call_entry_point("aot_module", inputs_guarded=False)
    _call_entry_point("aot_module_simplified", inputs_guarded=False)


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_every_option_is_still_taken(entry_point):
    model, x = _linear_and_input()
    expected = model(x).relu() if entry_point == "aot_function" else model(x)
    out = _call_entry_point(entry_point, partition_fn=aotgrad.min_cut_rematerialization_partition,
                            decompositions={}, inference_compiler=aotgrad.nop, dynamic=False)
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out, expected)


def test_the_options_are_aot_functions_keyword_parameters():
    import inspect

    from aotgrad.api import OPTIONS, SIMPLIFIED_OPTIONS

    parameters = inspect.signature(aotgrad.aot_function).parameters.values()
    assert OPTIONS == tuple(p.name for p in parameters if p.kind is p.KEYWORD_ONLY)
    assert SIMPLIFIED_OPTIONS == (*OPTIONS, "inputs_guarded")
