"""The generated call of an entry (front/functions.py `_generated_call`: the key's checks and the
runtime's steps lowered): straight-line code with only what its graph needs, checks the inputs
are the entry's, and behaves as eager."""
import pytest
import torch

import aotgrad
from aotgrad.front.keys import MISS
from tests.oracle import assert_same_as_eager, clone_inputs


def _entry(compiled):
    (entries,) = compiled.flat_cache.values()
    (entry,) = entries
    return entry


def _pure(x, w):
    return (x @ w).relu().sum()


MUTATION_OR_ALIAS_CODE = ("foreach_copy_", "copy_", "epilogue", "untyped_storage", "write back", "as_strided",
                          "detach", "requires_grad_")


def test_a_graph_without_mutations_or_aliases_gets_no_mutation_or_alias_code():
    compiled = aotgrad.aot_function(_pure, aotgrad.nop)
    x, w = torch.randn(4, 3), torch.randn(3, 5, requires_grad=True)
    compiled(x, w)
    entry = _entry(compiled)
    source = entry.call.source
    assert "fast_apply" in source and "return tuple(return_values)" not in source
    for text in MUTATION_OR_ALIAS_CODE:
        assert text not in source, text
    forward = entry.runtime.plan.run_forward.source
    assert "apart" not in forward and "mark_non_differentiable" not in forward
    assert entry.record.wrapper.startswith(source)


def test_a_batchnorm_write_back_is_one_foreach_copy_and_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    eager_model = __import__("copy").deepcopy(model)
    compiled = torch.compile(model, backend="aotgrad")
    for _ in range(3):
        x = torch.randn(8, 3)
        compiled(x).sum().backward()
        eager_model(x).sum().backward()
    for (name, a), b in zip(model.state_dict().items(), eager_model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


class _BatchNormAndInputView(torch.nn.Module):
    """Two BatchNorms; `view=True` also returns a view of the input, which makes the call's
    epilogue the general one (Epilogue.run) instead of the generated straight code."""

    def __init__(self, view: bool):
        super().__init__()
        self.view = view
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4))

    def forward(self, x):
        out = self.net(x).sum()
        return (out, x.view(-1)) if self.view else out


@pytest.mark.parametrize("view", [False, True], ids=["generated", "general"])
def test_batchnorm_statistics_keep_eagers_versions(view):
    """The running mean and variance, which eager writes without a version bump, are written
    in one `_foreach_copy_` into their `.data`; the count, bumped, in another. Three steps:
    values, and how far each buffer's version moved, as eager's."""
    torch.manual_seed(0)
    model = _BatchNormAndInputView(view)
    eager_model = __import__("copy").deepcopy(model)
    start = [(a._version, b._version) for a, b in zip(model.buffers(), eager_model.buffers())]
    compiled = torch.compile(model, backend="aotgrad")
    for _ in range(3):
        x = torch.randn(8, 3)
        (compiled(x)[0] if view else compiled(x)).backward()
        (eager_model(x)[0] if view else eager_model(x)).backward()
    for (name, a), b, (a0, b0) in zip(model.named_buffers(), eager_model.buffers(), start):
        torch.testing.assert_close(a, b, msg=name)
        assert a._version - a0 == b._version - b0, (name, a._version - a0, b._version - b0)


def test_batchnorm_wrapper_source_writes_back_in_one_call():
    model = torch.nn.BatchNorm1d(4)
    compiled = aotgrad.aot_module(model, aotgrad.nop)
    compiled(torch.randn(8, 4))
    (entries,) = compiled.compiled.cache.values()  # module calls are not flat: the general path
    assert entries[0].call is None


def _returns_input_view(x, w):
    return x.view(-1), (x * w).sum()


def test_an_output_viewing_an_input_checks_memory_sharing_and_rebuilds_the_view():
    compiled = aotgrad.aot_function(_returns_input_view, aotgrad.nop)
    args = (torch.randn(2, 3), torch.randn(3, requires_grad=True))
    assert_same_as_eager(_returns_input_view, args, compiled=compiled)
    source = _entry(compiled).call.source
    assert "untyped_storage" in source and "epilogue.run" in source
    x, w = clone_inputs(args)
    out, _ = compiled(x, w)
    assert out._base is x


def _add_(x, y):
    x.add_(y)
    return (x * 2).sum()


def test_a_mutated_input_is_written_back_like_eager():
    args = (torch.randn(3), torch.randn(3, requires_grad=True))
    assert_same_as_eager(_add_, args, compiled=aotgrad.aot_function(_add_, aotgrad.nop))


def test_other_inputs_miss_the_generated_call_and_compile_their_own_entry():
    compiled = aotgrad.aot_function(_pure, aotgrad.nop)
    w = torch.randn(3, 5, requires_grad=True)
    compiled(torch.randn(4, 3), w)
    call = _entry(compiled).call
    assert call((torch.randn(2, 3), w)) is MISS                      # another shape
    assert call((torch.randn(4, 3, dtype=torch.float64), w)) is MISS  # another dtype
    assert call((torch.randn(4, 3).t().contiguous().t(), w)) is MISS  # other strides
    assert call((torch.randn(4, 3), w.detach())) is MISS               # no longer requires grad
    assert call((torch.randn(4, 3), w * 1)) is MISS                    # not a leaf
    assert call((torch.randn(4, 3),)) is MISS                          # fewer arguments
    assert call((torch.nn.Parameter(torch.randn(4, 3)), w)) is MISS    # another tensor type
    with torch.no_grad():
        assert call((torch.randn(4, 3), w)) is MISS                    # grad mode
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x, w), _pure(x, w))
    assert sum(len(v) for v in compiled.flat_cache.values()) == 2


def test_the_same_tensor_twice_takes_the_general_path_and_is_deduplicated():
    def f(a, b):
        return (a * b).sum()
    compiled = aotgrad.aot_function(f, aotgrad.nop)
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    compiled(a, b)
    assert _entry(compiled).call((a, a)) is MISS
    a2 = a.detach().clone().requires_grad_()
    compiled(a2, a2).backward()
    f(a, a).backward()
    torch.testing.assert_close(a2.grad, a.grad)


def test_a_non_tensor_argument_misses_without_an_error():
    compiled = aotgrad.aot_function(_pure, aotgrad.nop)
    w = torch.randn(3, 5, requires_grad=True)
    compiled(torch.randn(4, 3), w)
    assert _entry(compiled).call((3, w)) is MISS


def _two_outputs(x):
    return x.sin(), x.cos()


def test_a_missing_gradient_takes_the_general_backward():
    x = torch.randn(3, requires_grad=True)
    compiled = aotgrad.aot_function(_two_outputs, aotgrad.nop)
    s, _ = compiled(x)
    s.sum().backward()
    torch.testing.assert_close(x.grad, x.detach().cos())


def test_retain_graph_and_a_second_backward_behave_as_eager():
    x = torch.randn(3, requires_grad=True)
    compiled = aotgrad.aot_function(lambda x: (x.sin() * x).sum(), aotgrad.nop)
    out = compiled(x)
    out.backward(retain_graph=True)
    out.backward()
    expected = 2 * (x.detach().cos() * x.detach() + x.detach().sin())
    torch.testing.assert_close(x.grad, expected)
    out = compiled(x)
    out.backward()
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_create_graph_takes_the_general_backward_and_double_backward_raises():
    x = torch.randn(3, requires_grad=True)
    compiled = aotgrad.aot_function(lambda x: (x.sin() * x).sum(), aotgrad.nop)
    (grad,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    torch.testing.assert_close(grad, x.detach().cos() * x.detach() + x.detach().sin())
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


def test_a_tangent_in_another_layout_is_made_the_traced_one():
    x = torch.randn(4, 3, requires_grad=True)
    compiled = aotgrad.aot_function(lambda x: x.sin() * 2, aotgrad.nop)
    out = compiled(x)
    grad = torch.randn(3, 4).t()  # not contiguous
    out.backward(grad)
    torch.testing.assert_close(x.grad, grad * 2 * x.detach().cos())


def test_an_inference_call_runs_the_forward_under_no_grad():
    compiled = aotgrad.aot_function(_pure, aotgrad.nop)
    x, w = torch.randn(4, 3), torch.randn(3, 5)
    out = compiled(x, w)
    assert not out.requires_grad
    torch.testing.assert_close(out, _pure(x, w))
    source = _entry(compiled).call.source
    assert "no_grad" in source and "apply" not in source


def test_the_compiled_graph_calls_each_aten_op_directly():
    compiled = aotgrad.aot_function(_pure, aotgrad.nop)
    compiled(torch.randn(4, 3), torch.randn(3, 5, requires_grad=True))
    import linecache
    code = _entry(compiled).runtime.plan.forward.__wrapped__.__func__.__code__  # (inside without_autocast)
    source = "".join(linecache.getlines(code.co_filename))
    assert "aten_mm_default(" in source and "torch.ops" not in source


def test_under_torch_compile_the_call_checks_only_what_dynamo_does_not_guard():
    from aotgrad.observe import phases

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    compiled = torch.compile(model, backend="aotgrad", dynamic=False)  # (static: sizes in the key)
    x = torch.randn(5, 3)
    with phases.watch() as records:
        out = compiled(x)
    (record,) = records
    call = record.wrapper.split("\n\n")[0]
    assert ".shape ==" not in call and ".dtype is" not in call and "storage_offset" in call and "is_leaf" in call
    torch.testing.assert_close(out, model(x))
    x2 = torch.randn(5, 3)[:, :].unsqueeze(0)[0]  # same sizes and strides
    torch.testing.assert_close(compiled(x2), model(x2))
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)


def _mixed(x, y, w):
    y.mul_(2)
    h = (x @ w).tanh()
    return h, h.t(), x.view(-1), (h * y.sum()).sum()


@pytest.mark.parametrize("fn, shapes", [
    (_pure, [(4, 3), (3, 5)]),
    (_mixed, [(4, 3), (5,), (3, 5)]),
    (_two_outputs, [(6,)]),
    (_returns_input_view, [(2, 3), (3,)]),
])
def test_the_generated_call_and_the_general_path_give_the_same_results(fn, shapes):
    """The generated code comes from the same plan as the general runtime (RuntimePlan,
    Epilogue steps): both paths, on the same inputs, give the same outputs, input writes
    and gradients."""
    torch.manual_seed(0)
    inputs = [torch.randn(s) for s in shapes]
    inputs[-1].requires_grad_()
    compiled = aotgrad.aot_function(fn, aotgrad.nop)
    compiled(*clone_inputs(inputs))
    call = _entry(compiled).call
    assert call is not None

    def run(generated: bool):
        args = clone_inputs(inputs)
        compiled._fast = call if generated else None
        if not generated:
            _entry(compiled).call = None
        try:
            outs = compiled(*args)
        finally:
            _entry(compiled).call = call
        tensors = [o for o in (outs if isinstance(outs, (tuple, list)) else (outs,))]
        sum(o.float().sum() for o in tensors if o.requires_grad).backward()
        return [o.detach() for o in tensors], [a.detach() for a in args], args[-1].grad

    fast, general = run(True), run(False)
    for a, b in zip(fast[0] + fast[1] + [fast[2]], general[0] + general[1] + [general[2]]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
