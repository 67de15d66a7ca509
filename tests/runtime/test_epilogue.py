"""The epilogue rebuilds outputs that view other outputs; a base the forward laid out with
other strides on size-1 dims is restrided to eager's first (`RestrideBase`), so the views
replayed on it, and the base itself, have eager's strides (runtime/epilogue.py)."""
import torch

import aotgrad
from aotgrad.pipeline import Options, compile_flat
from aotgrad.runtime.epilogue import RestrideBase
from tests.oracle import assert_same_as_eager, clone_inputs


def _layouts(outs) -> list[tuple]:
    return [(tuple(o.shape), o.stride(), o.storage_offset()) for o in outs]


def assert_aliases_like_eager(fn, args, compiled=None) -> None:
    """Outputs as eager's: values, shapes, strides and storage offsets; then each output in
    turn is written in place (under no_grad) and every output must change as eager's do."""
    compiled = compiled or aotgrad.aot_function(fn, aotgrad.nop)
    eager_args, aot_args = clone_inputs(args), clone_inputs(args)
    expected, actual = fn(*eager_args), compiled(*aot_args)
    assert _layouts(actual) == _layouts(expected)
    torch.testing.assert_close(_values(actual), _values(expected))
    for k in range(len(expected)):
        with torch.no_grad():
            expected[k].add_(10.0 * (k + 1))
            actual[k].add_(10.0 * (k + 1))
        torch.testing.assert_close(_values(actual), _values(expected), msg=lambda m: f"after writing output {k}: {m}")


def _values(outs) -> list:
    return [o.detach().clone() for o in outs]


def _transpose_written(a):
    v0 = a.amax(2)
    v1 = v0.unfold(-1, 1, 2)
    v2 = v0.t()
    v2.add_(torch.ones(1, 3))  # v0's new value t(add(t(v0), ones)) has strides (1, 3), eager's (1, 1)
    return v1, v2


def test_views_of_a_base_restrided_on_size_one_dims_have_eagers_strides():
    assert_aliases_like_eager(_transpose_written, [torch.randn(3, 1, 1)])


def test_returned_base_and_its_views_have_eagers_strides_and_gradients():
    def fn(a):
        v0 = a.sum(2)
        v0.t().add_(torch.ones(1, 3))
        return v0, v0.unfold(-1, 1, 2), v0.unsqueeze(0)
    a = torch.randn(3, 1, 1, requires_grad=True)
    assert_aliases_like_eager(fn, [a])
    assert_same_as_eager(fn, [a])


def test_views_are_restrided_under_no_grad_and_in_inference():
    with torch.no_grad():
        assert_aliases_like_eager(_transpose_written, [torch.randn(3, 1, 1)])


def test_symbolic_strides_of_a_restrided_base_are_read_per_call():
    def fn(a):
        v0 = a.sum(0, keepdim=True)                    # (1, n), eager's strides (n, 1)
        v0.t().add_(torch.ones(a.shape[1], 1))         # functional value: strides (1, 1)
        return v0.unsqueeze(0), v0.t()                 # eager's (n, n, 1) and (1, n)
    graphs = []
    compiled = aotgrad.aot_function(fn, lambda gm, ex: graphs.append(gm) or aotgrad.nop(gm, ex), dynamic=True)
    for n in (3, 5, 8):
        assert_aliases_like_eager(fn, [torch.randn(4, n)], compiled)
    assert len(graphs) == 1  # one inference graph for every n


def _epilogue(fn, *args):
    runtime = compile_flat(fn, list(args), Options(fw_compiler=aotgrad.nop))[0]
    return runtime.epilogue


def test_restride_step_is_planned_for_a_base_that_outputs_view():
    assert _epilogue(_transpose_written, torch.randn(3, 1, 1)).restrides == [RestrideBase(0, (1, 1))]
    assert _epilogue(lambda a: (a.sum(2) * 2,), torch.randn(3, 1, 1)).restrides == []  # a fresh output


def test_restride_gives_the_same_memory_and_leaves_other_layouts_alone():
    base = torch.arange(3.0).reshape(1, 3).t()           # (3, 1), strides (1, 3)
    outs = [base]
    RestrideBase(0, (1, 1)).run(outs)
    assert outs[0].stride() == (1, 1) and outs[0].data_ptr() == base.data_ptr()
    transposed = torch.zeros(4, 3).t()                   # strides differ on a dim of size 4: no restride
    outs = [transposed]
    RestrideBase(0, (4, 1)).run(outs)
    assert outs[0] is transposed
