"""A saved tensor modified in place after the forward fails the backward only if the given
grads need it, as in eager: the engine runs (and version-checks) only the backward nodes a
gradient reaches (runtime/backward.py, `saved_tensors_read`)."""
import pytest
import torch

import aotgrad

VERSION_ERROR = "modified by an inplace operation"


def _input_then_modified(f, grad_output: int):
    """f on a non-leaf input, the input modified in place, then backward through one output."""
    leaf = torch.randn(4, requires_grad=True)
    x = leaf * 1
    outs = f(x)
    x.mul_(2)
    outs[grad_output].sum().backward()
    return leaf.grad


def _saves_input(x):
    return x.sin(), x * 3  # sin's backward reads x; mul by a constant reads nothing


@pytest.mark.parametrize("partition", ["default", "min_cut"])
def test_a_modified_saved_input_is_fine_when_the_given_grads_do_not_read_it(partition):
    compiled = _compile(_saves_input, partition)
    torch.testing.assert_close(_input_then_modified(compiled, 1), _input_then_modified(_saves_input, 1))


def test_a_modified_saved_input_still_fails_when_the_grads_read_it():
    compiled = _compile(_saves_input)  # (the min-cut partition saves cos(x), not x)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _input_then_modified(_saves_input, 0)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _input_then_modified(compiled, 0)


def _saves_output(x):
    y = x.exp()  # exp's backward reads its own output
    return y, x * 3


def _output_then_modified(f, grad_output: int):
    leaf = torch.randn(4, requires_grad=True)
    y, z = f(leaf)
    with torch.no_grad():
        y.add_(1)
    (y, z)[grad_output].sum().backward()
    return leaf.grad


def test_a_modified_saved_output_is_fine_when_the_given_grads_do_not_read_it():
    compiled = _compile(_saves_output)
    torch.testing.assert_close(_output_then_modified(compiled, 1), _output_then_modified(_saves_output, 1))


def test_a_modified_saved_output_still_fails_when_the_grads_read_it():
    compiled = _compile(_saves_output)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _output_then_modified(_saves_output, 0)
    with pytest.raises(RuntimeError, match=VERSION_ERROR):
        _output_then_modified(compiled, 0)


def test_a_second_backward_without_retain_graph_still_fails_as_in_eager():
    compiled = _compile(_saves_input)
    for f in (_saves_input, compiled):
        leaf = torch.randn(4, requires_grad=True)
        x = leaf * 1
        a, b = f(x)
        b.sum().backward(retain_graph=False)
        x.mul_(2)
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            (a.sum() + b.sum()).backward()


def test_retain_graph_keeps_the_saved_tensors_for_a_second_backward():
    compiled = _compile(_saves_input)
    grads = []
    for f in (_saves_input, compiled):
        leaf = torch.randn(4, requires_grad=True, generator=torch.Generator().manual_seed(0))
        x = leaf * 1
        a, b = f(x)
        x.mul_(2)
        b.sum().backward(retain_graph=True)
        b.sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


def _compile(f, partition: str = "default"):
    partition_fn = aotgrad.default_partition if partition == "default" else aotgrad.min_cut_rematerialization_partition
    return aotgrad.aot_function(f, aotgrad.nop, partition_fn=partition_fn)


def _returns_a_written_intermediate(a):
    v0 = a * 2
    v0.t().add_(1)  # v0's new value comes out of the graph as a view: t(add(t(v0), 1))
    return v0, v0[0], v0 * v0


def test_writes_through_an_output_that_the_graph_made_as_a_view_work_as_in_eager():
    compiled = _compile(_returns_a_written_intermediate)
    grads = []
    for f in (_returns_a_written_intermediate, compiled):
        a = torch.randn(3, 3, requires_grad=True, generator=torch.Generator().manual_seed(0))
        v0, row, _ = f(a)
        row.mul_(2)  # with grad enabled, through a view of the output
        (v0.sum() + row.sum()).backward()
        grads.append((v0.detach(), a.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_a_write_to_such_an_output_still_trips_the_saved_values_version_check():
    compiled = _compile(_returns_a_written_intermediate)
    for f in (_returns_a_written_intermediate, compiled):
        a = torch.randn(3, 3, requires_grad=True)
        v0, _, square = f(a)
        with torch.no_grad():
            v0.add_(1)  # square's backward reads v0
        with pytest.raises(RuntimeError, match=VERSION_ERROR):
            square.sum().backward()
