"""Fuzz regression: when inputs share memory and one of them is mutated, an input
returned as it is comes back as a new view of the synthetic base, not the caller's
tensor: `out is a` fails, and for a leaf that requires grad the output has a grad_fn
(is not a leaf) where eager's has none.

Stage: api (`SyntheticBase`) + epilogue. The overlapping inputs are replaced by their
common base and rebuilt inside the traced function with `as_strided`, so the analysis
sees a view of the base where eager returns the input object (OutputKind.INPUT is
lost). PyTorch's AOTAutograd keeps the identity of such an input when it is the base
itself (`a = l0`, `b = l0[1:]`, `b.mul_(2); return (a,)` returns `a`), and crashes on
this program (an assertion about leaves). Map outputs that are one of the original
inputs back to that input.

Fixed: SyntheticBase (front/synthetic_base.py) records while tracing which outputs are one of the inputs it
rebuilt (`out is view`), and `SyntheticBase.run` hands back the caller's tensor there.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a, b):
    with torch.no_grad():
        b.copy_(b)
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3, 2, 4), requires_grad=True)
    a = l0
    b = a.transpose(0, -1)
    return [a, b], [l0]


def test_input_returned_unchanged_is_the_input_with_synthetic_base():
    check_program(f, make_inputs)
