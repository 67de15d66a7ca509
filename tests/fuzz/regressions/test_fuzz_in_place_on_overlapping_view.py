"""Fuzz regression (fixed): an in-place op on a tensor whose elements overlap in memory (here an
input `l0.unfold(0, 2, 1)`): eager applies `add_(0.5)` once per alias, so the shared
element gains 1.0; aotgrad's functional graph adds 0.5 once and writes it back. Silent.

Stage: functionalize. Mutating a tensor with internal overlap has no functional
equivalent; eager checks overlap only when it is cheap to detect (stride 0), so unfold
and as_strided views get through. PyTorch's functionalization bans it with a clear
error ("functionalization encountered a tensor being mutated that has internal
overlap"); aotgrad should raise UnsupportedError the same way, for inputs and for views
of intermediates (`v0 = a.unfold(0, 2, 1); v0.add_(0.5)`).
Fixed by ab5cf41: writes to self-overlapping tensors raise a clear error (accepted by the oracle).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    a.add_(0.5)
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,))
    a = l0.unfold(0, 2, 1)
    return [a], [l0]


def test_in_place_on_overlapping_input_raises_clearly():
    check_program(f, make_inputs)
