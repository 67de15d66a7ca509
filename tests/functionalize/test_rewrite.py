"""The functionalize pass: no mutating ops remain, values equal the mutating program's."""
import torch
from torch import fx

import aotgrad
from aotgrad.functionalize import functionalize
from aotgrad.functionalize.rules import written_arguments
from aotgrad.joint import trace_joint
from aotgrad.trace import fake_mode_for, to_fake
from tests.oracle import assert_same_as_eager


def _trace(fn, *args):
    mode = fake_mode_for(args)
    fakes = [to_fake(mode, a) for a in args]
    return trace_joint(lambda *v: [fn(*v)], fakes, fake_mode=mode, trace_backward=False)


def _mutating_nodes(gm: fx.GraphModule):
    return [n for n in gm.graph.nodes if n.op == "call_function" and written_arguments(n.target)]


def test_write_through_select_becomes_select_scatter_and_returns_the_new_input():
    def fn(x):
        x[0].add_(1)
        return x.t()
    traced = _trace(fn, torch.zeros(2, 3))
    assert _mutating_nodes(traced.gm)
    gm, plan = functionalize(traced.gm)
    assert _mutating_nodes(gm) == []
    assert plan.mutated_placeholders == [0] and plan.num_mutations == 1
    assert any(n.target is torch.ops.aten.select_scatter.default for n in gm.graph.nodes)
    x = torch.zeros(2, 3)
    out = gm(x)
    expected = torch.zeros(2, 3)
    expected[0] += 1
    torch.testing.assert_close(out[0], expected)          # the input's new value
    torch.testing.assert_close(x, torch.zeros(2, 3))      # the pass itself leaves inputs alone


def test_write_through_expand_uses_as_strided_scatter():
    def fn(x):
        y = x.expand(3, *x.shape)
        y[1, 1].mul_(5)
        return y * 1
    x = torch.arange(6.0)
    traced = _trace(fn, x)
    gm, _ = functionalize(traced.gm)
    assert _mutating_nodes(gm) == []
    ref = x.clone()
    expected = fn(ref)
    out, new_x = gm(x.clone())
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(new_x, ref)


def test_unused_random_op_is_kept():
    def fn(x):
        torch.rand(3)
        return x + 1
    gm, _ = functionalize(_trace(fn, torch.zeros(3)).gm)
    assert any(n.target is torch.ops.aten.rand.default for n in gm.graph.nodes)


def test_out_variant_becomes_functional():
    def fn(x):
        y = torch.empty(3)
        torch.add(x, 1, out=y)
        return y
    gm, _ = functionalize(_trace(fn, torch.ones(3)).gm)
    assert _mutating_nodes(gm) == []
    torch.testing.assert_close(gm(torch.ones(3))[0], torch.full((3,), 2.0))


# -- in-place ops whose functional twin has another name ---------------------

def test_pow_in_place_in_the_backward_of_vector_norm_matches_eager():
    # linalg_vector_norm's backward calls aten.pow_.Scalar (functional: pow.Tensor_Scalar)
    assert_same_as_eager(lambda x: torch.linalg.vector_norm(x, ord=3), [torch.randn(5, requires_grad=True)])


def test_in_place_op_on_an_input_with_a_renamed_functional_twin_is_written_back():
    def fn(x, y):
        x.pow_(2)
        y.floor_divide_(torch.full_like(y, 2.0))
        return x + y
    assert_same_as_eager(fn, [torch.randn(4), torch.randn(4) * 10])


def test_in_place_op_stores_in_the_targets_dtype():
    def fn(x, y):
        x.add_(y)                 # computes in float64, stores float32, as eager
        z = x * 1
        z.mul_(y)
        return z
    assert_same_as_eager(fn, [torch.randn(4), torch.randn(4, dtype=torch.float64)])


def test_foreach_in_place_op_writes_every_tensor_of_the_list():
    def fn(a, b):
        a, b = a * 1, b * 1
        torch._foreach_add_([a, b], 1.5)
        return a.sum() * b, a
    assert_same_as_eager(fn, [torch.randn(3, requires_grad=True), torch.randn(2)])


def test_foreach_in_place_op_on_inputs_writes_both_placeholders():
    def fn(a, b):
        torch._foreach_add_([a, b], 1.5)
        return a.sum() * b
    gm, plan = functionalize(_trace(fn, torch.randn(3), torch.randn(2)).gm)
    assert _mutating_nodes(gm) == [] and plan.mutated_placeholders == [0, 1]
    a, b = torch.randn(3), torch.randn(2)
    torch.testing.assert_close(gm(a, b)[0], (a + 1.5).sum() * (b + 1.5))


def test_factory_out_variant_makes_a_value_of_outs_dtype():
    def fn(x, buf):
        torch.arange(4, out=buf)
        return x + buf
    assert_same_as_eager(fn, [torch.randn(4), torch.zeros(4, dtype=torch.float64)])


# -- rrelu_with_noise: a mutable op with a random draw ------------------------

def test_rrelu_in_training_matches_eager_and_draws_once_in_the_forward():
    graphs = {}

    def compiler(name):
        def compile_graph(gm, example_inputs):
            graphs[name] = gm
            return gm
        return compile_graph

    def fn(x):
        return torch.nn.functional.rrelu(x, 0.1, 0.5, training=True)
    x = torch.randn(16, requires_grad=True)
    assert_same_as_eager(fn, [x])
    compiled = aotgrad.aot_function(fn, compiler("fw"), compiler("bw"))
    compiled(x.detach().clone().requires_grad_(True)).sum().backward()
    targets = {name: [n.target for n in gm.graph.nodes if n.op == "call_function"] for name, gm in graphs.items()}
    assert targets["fw"].count(torch.ops.aten.rrelu_with_noise_functional.default) == 1
    assert not any(torch.Tag.nondeterministic_seeded in getattr(t, "tags", ()) for t in targets["bw"])


# -- resize_ -----------------------------------------------------------------

def test_resize_to_the_same_size_is_a_no_op():
    def fn(x, other):
        x.resize_as_(other)
        return x + 1
    assert_same_as_eager(fn, [torch.randn(2, 3), torch.randn(2, 3)])


def test_resize_shrinking_a_fresh_tensor_views_its_storage():
    def fn(x):
        y = x.clone()
        y.resize_(2, 2)           # the first 4 elements of y's storage
        y.add_(1)                 # written through the resized view
        return y
    assert_same_as_eager(fn, [torch.randn(2, 3)])


def test_resize_of_a_transposed_tensor_reads_storage_order():
    def fn(x):
        y = x * 2
        z = y.t()
        z.resize_(6)
        return z, y
    assert_same_as_eager(fn, [torch.randn(2, 3)])


def test_resize_growing_a_fresh_tensor_keeps_its_values():
    def fn(x):
        y = x.clone()
        y.resize_(8)
        y[4:].fill_(3)            # eager leaves the new elements uninitialized
        return y
    assert_same_as_eager(fn, [torch.randn(4)])


# -- metadata mutations of intermediates ---------------------------------------

def test_graph_values_record_shapes_from_before_a_later_metadata_mutation():
    # stft transposes and squeezes its intermediate result in place (transpose_, squeeze_);
    # the tracer's fakes are live, so the pass recomputes their pre-mutation shapes.
    def fn(x):
        return torch.stft(x, 8, window=torch.ones(8), return_complex=True)
    traced = _trace(fn, torch.randn(32))
    gm, _ = functionalize(traced.gm)
    real = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n):
            real[n] = super().run_node(n)
            return real[n]
    Recorder(gm).run(torch.randn(32))
    for node, value in real.items():
        if isinstance(value, torch.Tensor):
            assert tuple(node.meta["val"].shape) == tuple(value.shape), node.format_node()
    assert_same_as_eager(fn, [torch.randn(32, requires_grad=True)])


# -- layouts of written intermediates -------------------------------------------

def _layouts(outs) -> list[tuple]:
    return [(tuple(o.shape), o.stride(), o.storage_offset()) for o in outs]


def _transposed_written_by_out_variant(a, b):
    v0 = a.t() * 1                # (3, 4), strides (1, 3)
    torch.add(b, 1, out=v0)       # eager keeps v0's strides; aten.add(b, 1) is contiguous
    return v0, v0[0], v0[1]


def test_out_variant_into_a_transposed_intermediate_keeps_its_layout():
    def fn(a, b):
        return _transposed_written_by_out_variant(a, b)[0]
    gm, _ = functionalize(_trace(fn, torch.randn(4, 3), torch.randn(3, 4)).gm)
    assert any(n.target is torch.ops.aten.copy.default for n in gm.graph.nodes)
    out = gm.graph.output_node().args[0][0]
    assert out.meta["val"].stride() == (1, 3)
    assert gm(torch.randn(4, 3), torch.randn(3, 4))[0].stride() == (1, 3)


def test_views_of_an_intermediate_written_by_an_out_variant_have_eagers_strides_and_offsets():
    a, b = torch.randn(4, 3), torch.randn(3, 4)
    expected = _transposed_written_by_out_variant(a.clone(), b.clone())
    actual = aotgrad.aot_function(_transposed_written_by_out_variant, aotgrad.nop)(a.clone(), b.clone())
    assert _layouts(actual) == _layouts(expected)  # v0[1] at offset 1, not 4
    torch.testing.assert_close(list(actual), list(expected))
    actual[0].mul_(2)
    expected[0].mul_(2)
    torch.testing.assert_close(list(actual), list(expected))


def test_in_place_op_with_a_contiguous_functional_form_keeps_the_targets_layout():
    def fn(a, m1, m2):
        v0 = a.t() * 1
        v0.addmm_(m1, m2)         # aten.addmm makes a contiguous result
        return v0[1:], v0.t()
    args = [torch.randn(4, 3, requires_grad=True), torch.randn(3, 2), torch.randn(2, 4, requires_grad=True)]
    expected = fn(*[t.detach() for t in args])
    actual = aotgrad.aot_function(fn, aotgrad.nop)(*[t.detach() for t in args])
    assert _layouts(actual) == _layouts(expected)
    assert_same_as_eager(fn, args)


def test_written_input_is_left_in_the_functional_layout_for_the_write_back():
    def fn(a, b):
        torch.add(b, 1, out=a)    # the epilogue copies the new value into `a`: no relayout here
        return a.sum()
    gm, plan = functionalize(_trace(fn, torch.randn(4, 3).t(), torch.randn(3, 4)).gm)
    assert plan.mutated_placeholders == [0]
    assert not any(n.target is torch.ops.aten.copy.default for n in gm.graph.nodes)
    assert_same_as_eager(fn, [torch.randn(4, 3).t(), torch.randn(3, 4)])


def test_as_strided_write_after_a_write_that_restrided_a_size_one_dim_matches_eager():
    # the new value of v0 has strides (1, 3) where eager's has (1, 1): the same offsets for every
    # element, so the as_strided write reads and writes where eager's does (was an UnsupportedError)
    def fn(a):
        v0 = a.sum(2)
        v0.t().add_(torch.ones(1, 3))
        v0.as_strided((2,), (1,), 1).mul_(3)
        return v0 * 1
    assert_same_as_eager(fn, [torch.randn(3, 1, 1, requires_grad=True)])


# -- writes through dtype views, as_strided and expand ---------------------------

def _same_as_eager_on_storage(fn, make_inputs):
    """Run fn eagerly and compiled on fresh inputs from `make_inputs() -> (args, leaves)`, where
    args may view their leaves at an offset, transposed or share one (a synthetic base); compare
    the outputs, the leaves' final memory and, after a backward of the outputs that require
    grad, the leaves' grads (NaNs equal: a write of int bits can make float NaNs)."""
    results = []
    for run in (fn, aotgrad.aot_function(fn, aotgrad.nop)):
        args, leaves = make_inputs()
        outs = run(*args)
        differentiable = [o for o in outs if o.requires_grad]
        if differentiable:
            torch.autograd.backward(differentiable, [torch.ones_like(o) for o in differentiable])
        results.append(([o.detach().clone() for o in outs], [leaf.detach().clone() for leaf in leaves],
                        [leaf.grad for leaf in leaves]))
    (outs, leaves, grads), (expected_outs, expected_leaves, expected_grads) = results[1], results[0]
    torch.testing.assert_close(outs, expected_outs, equal_nan=True, msg=lambda m: f"outputs: {m}")
    torch.testing.assert_close(leaves, expected_leaves, equal_nan=True, msg=lambda m: f"inputs after: {m}")
    torch.testing.assert_close(grads, expected_grads, equal_nan=True, msg=lambda m: f"grads: {m}")


def _inputs(shape, view=lambda leaf: leaf, requires_grad=False):
    def make_inputs():
        torch.manual_seed(0)
        leaf = torch.randn(shape, requires_grad=requires_grad)
        return [view(leaf)], [leaf]
    return make_inputs


def test_write_through_dtype_view_of_as_strided_view_reinterprets_the_bits():
    # fuzz finding 35: the int32 sum went back into the float root as a value conversion
    def fn(a):
        v1 = a.as_strided((2,), (1,), 0).view(torch.int32)
        v1.add_(1)
        return (v1,)
    gm, _ = functionalize(_trace(fn, torch.randn(2)).gm)
    scatter = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.as_strided_scatter.default)
    assert [a.meta["val"].dtype for a in scatter.args[:2]] == [torch.int32, torch.int32]
    _same_as_eager_on_storage(fn, _inputs((2,)))


def test_fill_through_dtype_view_of_as_strided_view_writes_int_bits_into_the_returned_base():
    def fn(a):
        a.as_strided((2,), (1,), 1).view(torch.int32).fill_(-1.5)   # int -1: float NaN bits
        return (a,)
    _same_as_eager_on_storage(fn, _inputs((3,)))


def test_index_fill_through_dtype_view_of_an_input_rebuilt_on_a_synthetic_base():
    # a and b share memory and a is mutated: both are rebuilt as base.as_strided(...)
    def fn(a, b):
        v0 = a.view(torch.int32)
        v0.index_fill_(0, torch.tensor([0, 1]), -1.5)
        return v0, b * 1

    def make_inputs():
        leaf = torch.randn(2)
        return [leaf, leaf[0]], [leaf]
    _same_as_eager_on_storage(fn, make_inputs)


def test_write_through_as_strided_view_read_as_smaller_elements_reaches_the_right_bytes():
    def fn(a):
        v1 = a.as_strided((2, 2), (3, 1), 1).view(torch.int16)    # float32 -> int16: (2, 4)
        v1[:, 1:3].add_(7)
        return v1, a
    _same_as_eager_on_storage(fn, _inputs((2, 3), lambda leaf: leaf.view(-1)[0:6].view(2, 3)))
    _same_as_eager_on_storage(fn, _inputs((7,), lambda leaf: leaf[1:].view(2, 3)))


def test_write_through_as_strided_view_read_as_larger_elements_reaches_the_right_bytes():
    def fn(a):
        v1 = a.as_strided((2,), (1,), 2).view(torch.float64)      # float32 -> float64: (1,)
        v1.mul_(-3)
        return v1, a
    _same_as_eager_on_storage(fn, _inputs((6,), lambda leaf: leaf[2:]))


def test_write_through_as_strided_view_of_a_dtype_view_reaches_the_right_bytes():
    def fn(a):
        v1 = a.view(torch.int16).as_strided((3,), (2,), 3)
        v1.add_(5)
        return v1, a
    _same_as_eager_on_storage(fn, _inputs((7,), lambda leaf: leaf[1:]))


def test_as_strided_view_made_after_a_write_moved_the_input_reads_eagers_elements():
    # the new value of `a` starts at offset 0, eager's `a` at 1: as_strided offsets are absolute
    def fn(a):
        a.add_(1)
        v = a.as_strided((2,), (1,), 3)
        v.mul_(2)
        return v, a.view(torch.int16).as_strided((2,), (1,), 5) * 1
    _same_as_eager_on_storage(fn, _inputs((7,), lambda leaf: leaf[1:]))


def test_larger_dtype_view_after_a_write_moved_the_input_gets_eagers_alignment():
    # a[1:5] is at offset 2 in eager, so it may be read as float64; the new value of `a` starts
    # at 0, where a[1:5] would be at the odd offset 1: the root is moved back to eager's offset
    def fn(a):
        a.add_(1)
        v = a[1:5].view(torch.float64)
        v.as_strided((1,), (1,), 2).mul_(2)
        return v * 1, a
    _same_as_eager_on_storage(fn, _inputs((7,), lambda leaf: leaf[1:]))


def test_write_through_expand_of_detached_alias_of_strided_input_requiring_grad():
    # fuzz finding 36: as_strided_scatter refuses a non-contiguous input that requires grad
    def fn(a):
        v0 = a.detach()
        v0.expand_as(a).zero_()
        return (v0,)
    _same_as_eager_on_storage(fn, _inputs((2, 3), lambda leaf: leaf.t(), requires_grad=True))


def test_as_strided_write_into_a_transposed_intermediate_requiring_grad_matches_eager():
    def fn(a):
        v0 = a.t() * 1
        v0.as_strided((2,), (1,), 0).add_(1)
        return v0.sin(), a.detach().as_strided((2,), (3,), 1).view(torch.int32) * 1
    _same_as_eager_on_storage(fn, _inputs((2, 3), requires_grad=True))


def test_write_through_imag_of_a_complex_input_lands_in_its_imaginary_parts():
    # `imag` is view_as_real then select: no inverse, so as_strided_scatter of float32 into complex64 bytes
    def fn(a):
        a.imag.fill_(2)
        return (a,)
    _same_as_eager_on_storage(fn, _inputs((3,), lambda leaf: leaf.to(torch.complex64)))


def test_write_through_view_as_complex_of_a_float_input_lands_in_its_pairs():
    def fn(a):
        v = torch.view_as_complex(a.view(2, 2))
        v.mul_(1j)
        return a, v
    _same_as_eager_on_storage(fn, _inputs((4,)))


def test_a_view_of_a_python_number_is_a_fresh_value():
    """The backward of `x * 2j` conjugates the scalar autograd saved: the trace records
    `_conj(2j)`, a view op whose base is a Python number (a tensor the op makes from it on
    each call), so the pass keeps it as an op with a fresh output."""
    def fn(x):
        return x * 2j
    mode = fake_mode_for([torch.randn(3)])
    traced = trace_joint(lambda x: [fn(x)], [to_fake(mode, torch.randn(3, requires_grad=True))],
                         fake_mode=mode, trace_backward=True)
    conj = [n for n in traced.gm.graph.nodes if n.target is torch.ops.aten._conj.default]
    assert [n.args for n in conj] == [(2j,)]
    gm, plan = functionalize(traced.gm)
    assert [n.args for n in gm.graph.nodes if n.target is torch.ops.aten._conj.default] == [(2j,)]
    assert plan.num_mutations == 0


def test_complex_scalars_times_real_and_complex_tensors_match_eager():
    def fn(x):
        return (x * 2j * (1 - 3j)).conj() + 1j * x
    for x in (torch.randn(3, requires_grad=True), torch.randn((), requires_grad=True),
              torch.randn(3, dtype=torch.complex64, requires_grad=True)):
        assert_same_as_eager(fn, [x])
