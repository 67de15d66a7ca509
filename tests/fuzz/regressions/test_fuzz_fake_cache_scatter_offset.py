"""Fuzz regression: two writes through an `expand` view of an input with a storage offset
(`a = l0[1:]`): the first compile in a process is right, every later compile of the same
program writes the wrong elements. Silent, and it depends on what ran before.

Stage: functionalize, with PyTorch's FakeTensor dispatch cache (shared by all
FakeTensorModes in a process). The second write is scattered with
`as_strided_scatter(as_strided_scatter, add, [2], [1], offset)`, the offset read from
the first as_strided_scatter's fake output: 1 on a cold cache, 0 once the op is cached
(a cache hit rebuilds the output at storage offset 0). With
`torch._dynamo.config.fake_tensor_cache_enabled = False` every compile is right. Take
scatter offsets from the input's layout, not from storage offsets of fresh fake outputs.
(check_program compiles three times, so the second backend sees a warm cache.)

Fixed: functionalize/rewrite.py fake_run: as_strided_scatter's fake value is computed without
the fake-tensor cache (its key ignores the input's storage offset).
"""
import torch

from tests.fuzz.oracle import check_program


def f(a):
    v0 = a.expand_as(a)
    v0.mul_(2)
    v0.add_(3)
    return (a,)


def make_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((3,))
    a = l0[1:]
    return [a], [l0]


def test_two_writes_through_expand_of_offset_input_with_warm_fake_cache():
    check_program(f, make_inputs)
