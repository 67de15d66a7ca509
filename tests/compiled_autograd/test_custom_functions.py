"""Python custom autograd.Functions under compiled autograd, against eager: saved tensors
(also one saved twice), ctx attributes read at run time, non-tensor inputs and outputs,
several gradients, once_differentiable, set_materialize_grads(False), classes made on the fly."""
import pytest
import torch
from torch.autograd.function import once_differentiable

import aotgrad
from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler


class SavedTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, x, y)
        ctx.scale = 3.0
        return x * y, x + y

    @staticmethod
    def backward(ctx, ga, gb):
        x, x2, y = ctx.saved_tensors
        return ga * y * ctx.scale + gb, ga * x2 + gb


def test_saved_tensors_attributes_and_two_outputs():
    def fn():
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        a, b = SavedTwice.apply(x, y)
        (a.sum() + (b * b).sum()).backward()
        return [x.grad, y.grad]

    check(fn)


class ShapeAttr(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x.sum()

    @staticmethod
    def backward(ctx, g):
        return g.expand(ctx.shape) * ctx.shape[0]


@pytest.mark.all_compilers
def test_ctx_attributes_are_read_at_run_time_not_baked_in():
    def fn():
        out = []
        for n in [10, 100, 10, 15]:
            x = torch.randn(n, requires_grad=True)
            ShapeAttr.apply(x).backward()
            out.append(x.grad)
        return out

    check(fn)


class ScaleBy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k: int, y):
        ctx.k = k
        return x * k + y, k * 3

    @staticmethod
    def backward(ctx, g, g_int):
        assert g_int is None
        return g * ctx.k, None, g


@pytest.mark.all_compilers
def test_non_tensor_inputs_and_outputs():
    def fn():
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        out, three_k = ScaleBy.apply(x, 5, y)
        out.sum().backward()
        return [x.grad, y.grad, three_k]

    check(fn)


class NoneForNonTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g, 1.0


def test_gradient_for_a_non_tensor_input_is_eagers_error():
    x = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(current_compiler()):
        with pytest.raises(RuntimeError, match="not a Variable"):
            NoneForNonTensor.apply(x, 2).sum().backward()


class OnceDiff(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * x.exp()


def test_once_differentiable():
    def fn():
        x = torch.randn(3, requires_grad=True)
        OnceDiff.apply(x).sum().backward()
        return [x.grad]

    check(fn)


class NoMaterialize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx, g1, g2):
        ctx.got = (g1 is None, g2 is None)
        return g1 if g2 is None else g1 + g2


class Materialize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx, g1, g2):
        ctx.got = (g1 is None, g2 is None)
        return g1 + g2


def test_set_materialize_grads_false_passes_none():
    def fn():
        x = torch.randn(3, requires_grad=True)
        a, _ = NoMaterialize.apply(x)
        a.sum().backward()
        flags = a.grad_fn.got
        b, _ = Materialize.apply(x)
        b.sum().backward()
        return [x.grad, flags, b.grad_fn.got]

    assert check(fn)[1:] == [(False, True), (False, False)]


def test_same_body_two_classes_two_captures_class_made_in_a_loop_recaptures():
    def make():
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        return Double

    compiled_autograd.reset()
    x = torch.randn(3, requires_grad=True)
    fixed = make()
    with compiled_autograd.enable(current_compiler()):
        for _ in range(3):
            fixed.apply(x).sum().backward()
        assert aotgrad.counters["compiled_autograd"]["captures"] == 1
        for _ in range(3):
            make().apply(x).sum().backward()
    assert aotgrad.counters["compiled_autograd"]["captures"] == 4
    assert torch.equal(x.grad, torch.full((3,), 12.0))


class SideEffect(torch.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        SideEffect.calls += 1
        return g


def test_backward_side_effects_run_on_every_backward():
    SideEffect.calls = 0
    compiled_autograd.reset()
    x = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(current_compiler()):
        for _ in range(4):
            SideEffect.apply(x).sum().backward()
    assert SideEffect.calls == 4
    assert aotgrad.counters["compiled_autograd"]["captures"] == 1


def test_view_of_a_custom_output_flows_back():
    def fn():
        x = torch.randn(4, requires_grad=True)
        a, b = SavedTwice.apply(x, x * 2)
        a.view(2, 2)[0].sum().backward()
        return [x.grad]

    check(fn)


class ReturnsNone(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, flag):
        ctx.flag = flag
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return (None if ctx.flag else g), None


def test_returning_none_into_dot_grad_accumulates_nothing_as_in_eager():
    def fn():
        x = torch.randn(3, requires_grad=True)
        (ReturnsNone.apply(x, False) * 2).sum().backward()
        first = x.grad.clone()
        x.grad = None
        (ReturnsNone.apply(x, True) * 2).sum().backward()
        return [first, x.grad]

    assert check(fn, captures=1)[1] is None


@pytest.mark.all_compilers
def test_returning_none_where_the_capture_got_a_gradient_is_a_clear_error():
    compiled_autograd.reset()
    x = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(current_compiler()):
        (ReturnsNone.apply(x * 1, False) * 2).sum().backward()  # the gradient flows on into MulBackward0
        with pytest.raises(aotgrad.errors.UnsupportedError, match="returned no gradient"):
            (ReturnsNone.apply(x * 1, True) * 2).sum().backward()


class Weighted(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, c):
        tensors = [t for t in (a, b, c) if isinstance(t, torch.Tensor)]
        ctx.tensor_args = [isinstance(t, torch.Tensor) for t in (a, b, c)]
        return tensors[0] * 2 + tensors[1]

    @staticmethod
    def backward(ctx, g):
        grads = iter([g * 2, g])
        return tuple(next(grads) if is_tensor else None for is_tensor in ctx.tensor_args)


def test_non_tensor_argument_in_another_position_is_another_graph():
    def fn():
        x = torch.randn(3, requires_grad=True)
        y = torch.randn(3, requires_grad=True)
        Weighted.apply(x, 2.0, y).sum().backward()
        Weighted.apply(x, y, 2.0).sum().backward()
        return [x.grad, y.grad]

    check(fn, captures=2)


class NonContiguousGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (g.t().contiguous().t() * 2)  # same values, transposed memory


@pytest.mark.all_compilers
def test_a_non_contiguous_gradient_from_a_custom_backward_flows_on():
    def fn():
        base = torch.randn(12, requires_grad=True)
        x = base.view(3, 4)
        NonContiguousGrad.apply(x).pow(2).sum().backward()
        return [base.grad]

    check(fn)


class NodeCheck(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        ctx.seen = isinstance(ctx, torch.autograd.graph.Node), isinstance(ctx, torch.autograd.Function)
        return g * 2 + x * 0


def test_custom_backward_ctx_is_an_autograd_node():
    # (test_autograd_node_isinstance in PyTorch's suite asserts it from inside the backward)
    def fn():
        x = torch.randn(3, requires_grad=True)
        y = NodeCheck.apply(x)
        y.sum().backward()
        return [x.grad, y.grad_fn.seen]
    assert check(fn)[1] == (True, False)

