"""The oracle's rules for memory sharing, NaN and partial backward, and the grammar's leaves of
special values, each on a hand-written case."""
import math

import pytest
import torch

from tests.fuzz.oracle import _close, check_program, shares_memory
from tests.fuzz.program import Program
from tests.fuzz.pytorch_oracle import check_pytorch
from tests.fuzz.shrink import candidates

pytestmark = pytest.mark.filterwarnings("ignore")


def test_tensors_without_elements_share_memory_with_nothing():
    x = torch.randn(3)
    assert shares_memory(x[0], x[2])          # one storage: the alias relation, not the ranges
    assert not shares_memory(x[3:], x)        # empty: nothing to read or write through it
    assert not shares_memory(x[3:], x[3:])
    assert not shares_memory(x, x.clone())


def test_nan_equals_nan_at_the_same_position_only():
    nan, inf = math.nan, math.inf
    assert _close(torch.tensor([nan, 1.0, inf]), torch.tensor([nan, 1.0, inf]))
    assert not _close(torch.tensor([nan, 1.0]), torch.tensor([1.0, 1.0]))
    assert not _close(torch.tensor([nan, 1.0]), torch.tensor([1.0, nan]))
    assert not _close(torch.tensor([inf]), torch.tensor([-inf]))


def _two_independent_outputs(a, b):
    return (a.sin(), b.sin())


def _two_leaves():
    torch.manual_seed(0)
    l0 = torch.randn(2, requires_grad=True)
    l1 = torch.randn(2, requires_grad=True)
    return [l0, l1], [l0, l1]


def test_partial_backward_passes_on_aotgrad():
    check_program(_two_independent_outputs, _two_leaves, ("default",))


def test_partial_backward_flags_zeros_where_eager_leaves_grad_none():
    # PyTorch's AOTAutograd fills the left-out output's gradient with zeros, so the leaf only
    # that output reaches gets a .grad of zeros; eager's stays None.
    (verdict,) = check_pytorch(_two_independent_outputs, _two_leaves, ("pytorch_default",))
    assert (verdict.kind, verdict.what) == ("silent", "grad_presence"), verdict
    assert "only) is a tensor, eager's is None" in verdict.message


SPECIAL = """import torch


def f(a):
    v0 = a.amax(0)
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.tensor([[0.0, torch.inf], [torch.nan, 0.0]], requires_grad=True)
    a = l0
    return [a], [l0]
"""


def test_leaf_of_special_values_prints_runs_and_shrinks():
    program = Program.from_source(SPECIAL)
    assert program.to_source() == SPECIAL
    _, make_inputs = program.compile()
    (a,), _ = make_inputs()
    assert a.isnan().sum() == 1 and a.isinf().sum() == 1
    leaves = {q.leaves[0] for q in candidates(program)}
    assert "l0 = torch.randn((2, 2), requires_grad=True)" in leaves
    assert "l0 = torch.tensor([[0.0, torch.inf], [1.0, 0.0]], requires_grad=True)" in leaves
    assert "l0 = torch.tensor([[0.0, torch.inf]], requires_grad=True)" in leaves


def test_an_in_place_op_reading_part_of_what_it_writes_is_rejected():
    """`v.mul_(v.chunk(3, -1)[0])`: the kernel reads elements it may have written already, so
    eager's values depend on its order; such programs are not test cases. Disjoint views
    (`v[0].add_(v[1])`) and the very same view (`v.add_(v)`) are fine."""
    import pytest
    from tests.fuzz.oracle import EagerRejected, run_eager

    def make_inputs():
        torch.manual_seed(0)
        leaf = torch.randn(2, 3, requires_grad=True)
        return [leaf * 1], [leaf]

    def partial_overlap(a):
        v = a.clone()
        v.mul_(v.chunk(3, -1)[0])
        return (v,)

    def disjoint(a):
        v = a.clone()
        v[0].add_(v[1])
        return (v * 2,)

    def same_view(a):
        v = a.clone()
        v.add_(v)
        return (v,)

    with pytest.raises(EagerRejected, match="reads part of the memory it writes"):
        run_eager(partial_overlap, make_inputs)
    run_eager(disjoint, make_inputs)
    run_eager(same_view, make_inputs)
