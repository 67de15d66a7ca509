"""`.data` aliases saved for backward or returned, then written by the caller after the call.

Eager's `v = a.data` shares `a`'s memory but has a version counter of its own: a backward that
saved `v` reads whatever the caller later writes into `a` (unchecked), and a write into a
returned `v` trips no check of what the backward saved from its base. A `detach()` alias shares
the counter: there eager's backward raises. Each program runs through the fuzz oracle
(aot_function with both partitioners, torch.compile), which writes into every output after
the call and runs the backward again, comparing with eager; `_write_input_then_backward`
does the same for an input the caller writes without getting it back.
"""
import pytest
import torch

import aotgrad
from tests.fuzz.oracle import check_program


def _leaf_and_view(*shape):
    def make_inputs():
        torch.manual_seed(0)
        leaf = torch.randn(shape, requires_grad=True)
        return [leaf * 1], [leaf]
    return make_inputs


def _two(*shape):
    def make_inputs():
        torch.manual_seed(0)
        l0, l1 = torch.randn(shape, requires_grad=True), torch.randn(shape, requires_grad=True)
        return [l0 * 1, l1], [l0, l1]
    return make_inputs


def data_of_input_saved(a, w):
    v0 = a.data
    return (a, v0 * w)


def data_of_input_saved_then_input_written(a, w):
    v0 = a.data
    y = v0 * w
    a.add_(1)
    return (a, y)


def data_of_input_written_then_saved(a, w):
    v0 = a.data
    a.mul_(2)
    return (a, v0 * w)


def data_of_written_input_saved_by_itself(a, b):
    v0 = a.data
    a.index_fill_(0, torch.tensor([0]), -1.5)
    return (a, v0 * a)


def data_of_intermediate_returned_and_saved(a, w):
    v0 = a * w
    v1 = v0.data
    return (v1 * w, v1)


def data_of_intermediate_returned_base_saved(a, w):
    v0 = a * w
    v1 = v0.data
    return (v0.cos(), v1)


def view_of_data_returned(a, w):
    v0 = a * w
    v1 = v0.data[1:]
    return (v0.sin(), v1)


def view_of_data_of_input_written_then_saved(a, w):
    v0 = a.data[1:]
    a.mul_(2)
    return (a, v0 * w[1:])


def view_of_data_of_input_saved_then_written(a, w):
    v0 = a.data[1:]
    y = v0 * w[1:]
    a.add_(1)
    return (a, y)


def detach_of_intermediate_returned_base_saved(a, w):  # a shared counter: eager's backward raises
    v0 = a * w
    return (v0.cos(), v0.detach())


PROGRAMS = [
    (data_of_input_saved, _two(3)),
    (data_of_input_saved_then_input_written, _two(3)),
    (data_of_input_written_then_saved, _two(3)),
    (data_of_written_input_saved_by_itself, _two(2)),
    (data_of_intermediate_returned_and_saved, _two(3)),
    (data_of_intermediate_returned_base_saved, _two(3)),
    (view_of_data_returned, _two(3)),
    (view_of_data_of_input_written_then_saved, _two(3)),
    (view_of_data_of_input_saved_then_written, _two(3)),
]


@pytest.mark.parametrize("f, make_inputs", PROGRAMS, ids=[f.__name__ for f, _ in PROGRAMS])
def test_data_alias_matches_eager_after_the_caller_writes(f, make_inputs):
    report = check_program(f, make_inputs)
    assert not report.clear_errors, report.clear_errors


def test_detach_alias_written_by_the_caller_trips_the_backward_as_in_eager():
    def run(fn):
        a, w = _two(3)()[0]
        y, alias = fn(a, w)
        with torch.no_grad():
            alias.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    run(detach_of_intermediate_returned_base_saved)
    run(aotgrad.aot_function(detach_of_intermediate_returned_base_saved, aotgrad.nop))


def _assert_grads_after_the_caller_writes(f, make_inputs, partition: str) -> None:
    """`f(a, w)` eager and compiled with `partition`; the caller writes into `a` after the
    call, then runs the backward: `w`'s grads must agree."""
    def grads(fn):
        a, w = make_inputs()[0]
        (y,) = fn(a, w)
        with torch.no_grad():
            a.mul_(10)
        y.sum().backward()
        return w.grad

    options = {} if partition == "default" else {"partition_fn": aotgrad.min_cut_rematerialization_partition}
    compiled = aotgrad.aot_function(f, aotgrad.nop, **options)
    torch.testing.assert_close(grads(compiled), grads(f))


@pytest.mark.parametrize("partition", ["default", "min_cut"])
def test_input_written_by_the_caller_is_read_by_the_backward_through_data(partition):
    """The caller keeps its input and writes it after the call: eager's backward reads the
    `.data` alias it saved, so the gradient of `w` is the written values, and no check fails."""
    def f(a, w):
        v0 = a.data
        return (v0 * w,)

    _assert_grads_after_the_caller_writes(f, _two(3), partition)


@pytest.mark.parametrize("partition", ["default", "min_cut"])
def test_input_written_by_the_caller_is_read_by_the_backward_through_a_view_of_data(partition):
    """As above, the saved value a view of `.data` of an input the function writes: eager's
    backward reads the caller's later writes through the view (the same view of the input's
    own memory is saved)."""
    def f(a, w):
        v0 = a.data.t()[1]
        a.mul_(2)
        return (v0 * w[1],)

    _assert_grads_after_the_caller_writes(f, _two(3, 3), partition)
