"""Bad input gets a clear error: what happened, why, what to do, and the user's line."""
import pytest
import torch
from torch import fx

import aotgrad
from aotgrad.errors import (
    TraceError,
    UnsupportedError,
    reject_sparse_inputs,
    reject_sparse_outputs,
)


def uses_item(x):
    return x * x.sum().item()


def test_item_inside_traced_function_names_the_op_the_cause_and_the_line():
    with pytest.raises(TraceError) as info:
        aotgrad.aot_function(uses_item, aotgrad.nop)(torch.randn(4))
    message = str(info.value)
    assert "`Tensor.item()`" in message and "fake tensors" in message
    assert "To continue" in message and "test_errors.py" in message and "x.sum().item()" in message


def test_nonzero_is_rejected_with_the_workaround():
    with pytest.raises(TraceError, match="nonzero.*To continue"):
        aotgrad.aot_function(lambda x: x.nonzero(), aotgrad.nop)(torch.randn(4))


def test_metadata_mutation_of_an_intermediate_matches_eager():
    def fn(x):
        y = x * 2
        y.t_()
        return y + 1
    from tests.oracle import assert_same_as_eager
    assert_same_as_eager(fn, [torch.randn(3, 2, requires_grad=True)])


def test_mutating_an_input_that_overlaps_another_input_uses_a_synthetic_base():
    base = torch.randn(4)
    expected = base.clone()
    expected[:3].add_(1)
    out = aotgrad.aot_function(lambda a, b: (a.add_(1), b * 2)[1], aotgrad.nop)(base[:3], base[1:])
    torch.testing.assert_close(base, expected)
    torch.testing.assert_close(out, expected[1:] * 2)


def test_mutating_disjoint_views_of_one_tensor_matches_eager():
    base = torch.randn(4)
    expected = base.clone()
    expected[:2] += expected[2:]
    aotgrad.aot_function(lambda a, b: a.add_(b), aotgrad.nop)(base[:2], base[2:])
    torch.testing.assert_close(base, expected)


def test_mutating_a_captured_global_is_rejected():
    captured = torch.zeros(3)

    def fn(x):
        captured.add_(x)
        return x * 2
    with pytest.raises(UnsupportedError, match="did not receive as an input"):
        aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3))


def grows_a_viewed_tensor(x):
    y = x.clone()
    head = y[:2]
    y.resize_(8)
    return head + 1


def test_resize_growing_a_tensor_that_a_later_view_reads_is_rejected_at_its_line():
    with pytest.raises(UnsupportedError) as info:
        aotgrad.aot_function(grows_a_viewed_tensor, aotgrad.nop)(torch.randn(4))
    message = str(info.value)
    assert "`aten.resize_.default`" in message and "To continue" in message
    assert "test_errors.py" in message and "y.resize_(8)" in message


def splits_at(x, indices):
    return torch.tensor_split(x, indices)


def test_tensor_split_with_tensor_indices_needs_real_values():
    with pytest.raises(TraceError) as info:
        aotgrad.aot_function(splits_at, aotgrad.nop)(torch.randn(5), torch.tensor([1, 3]))
    message = str(info.value)
    assert "reads the values of a tensor argument" in message and "needs real tensor values" in message
    assert "`torch.tensor_split`" in message and "To continue" in message
    assert "test_errors.py" in message and "torch.tensor_split(x, indices)" in message


def narrows_at(x, start):
    return torch.narrow(x, 1, start, 2)


CAPTURED_START = torch.tensor(1)


def test_the_value_of_a_zero_dim_input_is_never_baked_into_the_trace():
    # torch 2.14's fake of a real 0-d integer tensor remembers its value (aotgrad/compat.py,
    # fake_from_real): the trace must still not read it, or every later start would be served
    # the traced one; on every release this needs real values, as `.item()` does
    with pytest.raises(TraceError, match="needs real tensor values"):
        aotgrad.aot_function(narrows_at, aotgrad.nop)(torch.randn(3, 5), torch.tensor(2))
    with pytest.raises(TraceError, match="needs real tensor values"):  # a captured tensor: the same
        aotgrad.aot_function(lambda x: narrows_at(x, CAPTURED_START), aotgrad.nop)(torch.randn(3, 5))


def assigns_data(x, y):
    x.data = y * 2
    return x + 1


def test_assigning_data_under_torch_compile_is_refused_as_a_storage_replacement():
    # Dynamo records `x.data = y` as `set_` up to torch 2.13 and as `shallow_copy_data_` on 2.14
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"replaces a tensor's storage.*`x.data = y`"):
        torch.compile(assigns_data, backend="aotgrad")(torch.randn(3), torch.randn(3))
    torch._dynamo.reset()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
def test_sparse_input_is_named_with_the_workaround():
    with pytest.raises(UnsupportedError) as info:
        reject_sparse_inputs([torch.randn(2), torch.eye(3).to_sparse_csr()], "step")
    message = str(info.value)
    assert message.startswith("aotgrad cannot compile `step`: input 1 is a sparse tensor (torch.sparse_csr")
    assert "only dense (strided) tensors" in message and "To continue" in message and "to_dense()" in message


def test_sparse_output_names_the_op_that_made_it():
    node = fx.Graph().call_function(torch.ops.aten._to_sparse.default, ())
    node.meta["stack_trace"] = '  File "train.py", line 3, in step\n    y = x.to_sparse()\n'
    with pytest.raises(UnsupportedError) as info:
        reject_sparse_outputs([torch.eye(2).to_sparse()], lambda t: node, "step")
    message = str(info.value)
    assert "output 0 is a sparse tensor (torch.sparse_coo) made by `aten._to_sparse.default`" in message
    assert "To continue" in message and "y = x.to_sparse()" in message


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support")
def test_compiling_with_a_sparse_input_is_rejected_clearly():
    with pytest.raises(UnsupportedError, match="input 0 is a sparse tensor"):
        aotgrad.aot_function(lambda s, y: torch.sparse.mm(s, y), aotgrad.nop)(
            torch.eye(3).to_sparse_csr(), torch.randn(3, 2))


def test_returning_a_sparse_tensor_is_rejected_clearly():
    with pytest.raises(UnsupportedError, match="output 0 is a sparse tensor"):
        aotgrad.aot_function(lambda x: x.to_sparse(), aotgrad.nop)(torch.randn(3, 3))


def test_mutating_overlapping_views_of_one_base_matches_eager():
    def fn(a, b):
        a.mul_(2)
        return b + 1
    base = torch.arange(4.0)
    expected_base = base.clone()
    expected = fn(expected_base[:3], expected_base[1:])
    out = aotgrad.aot_function(fn, aotgrad.nop)(base[:3], base[1:])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(base, expected_base)


def test_writing_into_an_expanded_input_is_rejected():
    def fn(a):
        a[0] = 1.5
        return a * 2

    with pytest.raises(UnsupportedError, match=r"input of shape \(2, 3\) and strides \(0, 1\) whose elements overlap") \
            as raised:
        aotgrad.aot_function(fn, aotgrad.nop)(torch.randn(3).expand(2, 3))
    assert "a[0] = 1.5" in str(raised.value), "names the user's line"
