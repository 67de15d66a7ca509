"""Fuzz regression (finding 36): a write through `expand_as` of a detached alias of a
non-contiguous input that requires grad: `v0 = a.detach(); v1 = v0.expand_as(a); v1.zero_();
return (v0,)` with `a = l0.t()` (l0 requires grad). Eager writes the zeros into l0's memory
(the detached alias does not require grad, so autograd allows the write); aotgrad raises
PyTorch's raw "!self.requires_grad() || self.is_contiguous() INTERNAL ASSERT FAILED ...
as_strided_scatter is currently only supported for contiguous inputs" while compiling.
PyTorch's AOTAutograd raises "a view of a leaf Variable that requires grad is being used in an
in-place operation" instead.

Found (seed 10) as `v0 = a.view(torch.float32); v1 = v0.expand_as(a); v1.zero_(); v2 =
v0.chunk(3, -1)[0]; return (v2,)` with `a = l0[:, ::2]`: a same-dtype `view(dtype)` is a
non-differentiable alias like `detach()`. A contiguous input, or `unsqueeze` instead of
`expand_as`, compiles and is right.

Stage: functionalize: the write through `expand` goes back to the input by `as_strided_scatter`
on the input's stand-in, which requires grad and is not contiguous, and PyTorch's
`as_strided_scatter` refuses that (its own backward only handles contiguous inputs); a
transposed intermediate computed with grad hit it too. Fixed: `_scatter_as_strided`
(functionalize/rewrite.py) scatters into a `detach()` of the root where it requires grad: the
joint graph's backward is traced already, so nothing differentiates the scatter. Now as eager:
the zeros land in l0's memory. Tests: tests/functionalize/test_rewrite.py.
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.detach()
    v1 = v0.expand_as(a)
    v1.zero_()
    return (v0,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((2, 3), requires_grad=True)
    a = l0.t()
    return [a], [l0]


def test_write_through_expand_of_detached_strided_input():
    check_program(f, make_inputs)
