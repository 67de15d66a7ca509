"""Fuzz regression (fixed): `a[torch.tensor([0])] = 2` crashes the compiled graph with
"UnboundLocalError: cannot access local variable 'lift_fresh_copy'" (or, in other
programs, "KeyError: lift_fresh_copy").

Stage: trace / functionalize. `torch.tensor([0])` inside the function is recorded as a
constant plus `aten.lift_fresh_copy`; the graph then uses the `lift_fresh_copy` node
(as index_put's index) without defining it first, so a pass drops or reorders it
(generated code: `index_put(primals_1, [lift_fresh_copy], lift_fresh_copy_1)` after only
`lift_fresh_copy_1 = ...`). PyTorch's AOTAutograd compiles this program.
Fixed by ab5cf41.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    a[torch.tensor([0])] = 2
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((1,))
    a = l0
    return [a], [l0]


def test_index_assignment_with_tensor_constant_index():
    check_program(f, make_inputs)
