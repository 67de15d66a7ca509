"""Fuzz regression (fixed): `a.contiguous()` of a strided non-leaf input that requires grad comes
back sharing memory with `a`; eager's is a copy (so mutating the output afterwards
changes the caller's input under aotgrad only).

Stage: joint (`_prepare_primals`). A non-leaf input that requires grad is traced as a
hidden `.clone()` of a fresh leaf; the clone of a non-dense tensor is contiguous, so
every layout-dependent choice the program makes is made for the wrong layout:
`contiguous()` and `reshape()` alias instead of copying, `view()` succeeds where eager
would need a copy. Other symptoms: "Output 0 of Split is a view and is being modified
inplace" (`a.chunk(1, 1)[0].contiguous().sin_()`), "view size is not compatible" and
"a view of a leaf Variable that requires grad is being used in an in-place operation"
(`a.contiguous().mul_(2)`). Trace the input with its real strides and offset (e.g.
`torch.empty_strided` of the storage + `as_strided`, not `.clone()`).
Fixed by d6618a6 (non-leaf inputs are traced with their own layout).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.contiguous()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2, 3), requires_grad=True)
    a = l0[:, ::2]
    return [a], [l0]


def test_contiguous_of_strided_non_leaf_input_is_a_copy():
    check_program(f, make_inputs)
