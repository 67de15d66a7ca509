"""Tensors a captured graph cannot take (sparse COO/CSR, MKLDNN, nested) send the backward to
PyTorch's engine, and undefined gradients flow as eager's do (collect.py `plain_strided`,
capture.py UNDEFINED): results equal to eager, never an error eager does not raise."""
import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler


def _eager_and_compiled(fn):
    torch.manual_seed(0)
    expected = fn()
    compiled_autograd.reset()
    torch.manual_seed(0)
    with compiled_autograd.enable(current_compiler()):
        actual = fn()
        torch.manual_seed(0)
        again = fn()
    return expected, actual, again


def _dense(values):
    return [v.to_dense() if isinstance(v, torch.Tensor) and v.layout is not torch.strided else v for v in values]


@pytest.mark.parametrize("make", ["coo", "csr_root", "sparse_leaf", "embedding", "to_sparse", "mkldnn", "nested"])
def test_non_strided_tensors_run_as_eager(make):
    def fn():
        x = torch.randn(3, 4, requires_grad=True)
        if make == "coo":
            (g,) = torch.autograd.grad(x * 2, x, torch.ones(3, 4).to_sparse())
            return [g.layout, g.to_dense()]
        if make == "csr_root":  # eager refuses a CSR gradient for a dense output; so does aotgrad's run
            try:
                torch.autograd.grad(x * 2, x, torch.ones(3, 4).to_sparse_csr())
            except RuntimeError as e:
                return [str(e).split(" - ")[0]]
            return ["no error"]
        if make == "sparse_leaf":
            s = torch.randn(3, 4).to_sparse().requires_grad_()
            (s * 3).to_dense().sum().backward()
            return [s.grad.layout, s.grad.to_dense()]
        if make == "embedding":
            w = torch.randn(5, 4, requires_grad=True)
            torch.nn.functional.embedding(torch.tensor([0, 2, 2]), w, sparse=True).sum().backward()
            return [w.grad.layout, w.grad.to_dense()]
        if make == "to_sparse":
            (x.to_sparse() * 2).to_dense().sin().sum().backward()
            return [x.grad]
        if make == "mkldnn":
            if not torch.backends.mkldnn.is_available():
                pytest.skip("this torch is built without MKL-DNN")
            m = torch.randn(3, 4, dtype=torch.float32).to_mkldnn().requires_grad_()
            (m.to_dense() * 2).sum().backward()
            return [m.grad.to_dense()]
        nt = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)], requires_grad=True)
        (nt * 2).sin().to_padded_tensor(0.0).sum().backward()
        return [t for t in nt.grad.unbind()]

    expected, actual, again = _eager_and_compiled(fn)
    for got in (actual, again):
        assert len(got) == len(expected)
        for e, a in zip(_dense(expected), _dense(got)):
            assert torch.equal(e, a) if isinstance(e, torch.Tensor) else e == a, (e, a)


def test_gradcheck_undefined_gradient_checks_pass():
    """gradcheck's check_undefined_grad feeds UndefinedGradBackward's undefined results in."""
    x = torch.randn(3, dtype=torch.double, requires_grad=True)
    compiled_autograd.reset()
    with compiled_autograd.enable(current_compiler()):
        assert torch.autograd.gradcheck(lambda x: (x.sin() * 2, x.exp()), (x,), check_undefined_grad=True)
    counts = aotgrad.counters["compiled_autograd"]
    assert counts["captures"] >= 2 and counts["eager_fallbacks"] == 0, dict(counts)


@pytest.mark.all_compilers
def test_undefined_gradient_leaves_grad_none():
    """An undefined gradient reaching AccumulateGrad leaves `.grad` None, as in eager."""
    def fn():
        x = torch.randn(3, requires_grad=True)
        w = torch.randn(3, requires_grad=True)
        a, b = x * 2, w.exp()
        undefined = torch._C._functions.UndefinedGrad()(b)
        torch.autograd.backward([a.sum(), undefined.sum()])
        return [x.grad, w.grad]
    assert check(fn)[1] is None


def test_error_raised_by_a_node_shared_by_several_graphs_is_raised_each_time():
    """A DelayedError node (gradcheck's and PyTorch's tests' way to fail a backward) shared by
    several graphs keeps no state: every backward through it raises its own error, not
    "backward through the graph a second time"."""
    x = torch.rand(2, requires_grad=True)
    y = torch.rand(2, requires_grad=True)
    y_safe = torch._C._functions.DelayedError("Boom!", 1)(y)
    compiled_autograd.reset()
    with compiled_autograd.enable(current_compiler()):
        for _ in range(3):
            out = x.clone().view(-1)
            out += y_safe
            with pytest.raises(RuntimeError, match="Boom!"):
                out.sum().backward()
        out = x.clone().view(-1) + y_safe
        (gx,) = torch.autograd.grad(out.sum(), x)
    assert torch.equal(gx, torch.ones(2))


def test_dense_gradient_into_a_sparse_grad_is_added_out_of_place():
    """AccumulateGrad with a sparse `.grad` and a dense gradient: `.grad = grad + old`, as eager
    (sparse += dense is refused)."""
    def fn():
        w = torch.randn(3, 4, requires_grad=True)
        w.grad = torch.randn(3, 4).to_sparse()
        (w * 2).sum().backward()
        return [w.grad.layout, w.grad]
    check(fn)


def test_saved_variables_warns_as_deprecated():
    class Saving(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_variables
            return g * 2

    def fn():
        x = torch.randn(3, requires_grad=True)
        with pytest.warns(DeprecationWarning, match="'saved_variables' is deprecated"):
            Saving.apply(x).sum().backward()
        return [x.grad]
    check(fn)


def test_undefined_gradient_through_an_in_place_write_into_a_view():
    """CopySlices (an in-place write into a view) given an undefined gradient passes undefined
    gradients on, as in eager (gradcheck's undefined-gradient check of in-place view ops)."""
    def f(a, b):
        base = a.clone()
        base[1:].mul_(b)
        return base, b.sin()
    a = torch.randn(3, dtype=torch.double, requires_grad=True)
    b = torch.randn(2, dtype=torch.double, requires_grad=True)
    compiled_autograd.reset()
    with compiled_autograd.enable(lambda gm: gm):
        assert torch.autograd.gradcheck(f, (a, b), check_undefined_grad=True)
    assert aotgrad.counters["compiled_autograd"]["eager_fallbacks"] == 0


def test_undefined_gradient_through_a_copy_into_a_tensor_without_grad():
    """CopyBackwards (`a.copy_(b)` into an `a` that did not require grad) given an undefined
    gradient passes undefined gradients on, as in eager (gradgradcheck's undefined-gradient
    check of test_inplace_on_view_python in PyTorch's suite)."""
    def fn():
        b = torch.randn(3, dtype=torch.double, requires_grad=True)
        w = torch.randn(3, dtype=torch.double, requires_grad=True)
        results = []
        for _ in range(2):  # the second from the cache
            a = torch.zeros(3, dtype=torch.double)
            a.copy_(b * 2)
            undefined = torch._C._functions.UndefinedGrad()(a * w)
            results += list(torch.autograd.grad([undefined, (w * 3).sum()], [b, w],
                                                [torch.ones(3, dtype=torch.double), None], allow_unused=True))
        return results
    assert check(fn)[0] is None


def test_sparse_gradient_from_a_custom_backward_reaches_the_result_as_in_eager():
    class ToSparse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g.to_sparse()

    def fn():
        x = torch.randn(3, dtype=torch.double, requires_grad=True)
        (g,) = torch.autograd.grad(ToSparse.apply(x).sum(), x)
        return [g.layout, g.to_dense()]
    check(fn)


def test_sparse_gradient_from_a_custom_backward_reaches_grad_as_in_eager():
    """Under a compiled graph the sparse value travels as a dense placeholder (callout.py) that
    the accumulation call and the results read as the sparse tensor again."""
    class ToSparse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return (g * 2).to_sparse()

    def fn():
        x = torch.randn(3, dtype=torch.double, requires_grad=True)
        ToSparse.apply(x).sum().backward()
        first = x.grad.layout
        ToSparse.apply(x).sum().backward()
        return [first, x.grad.layout, x.grad.to_dense()]
    check(fn)
