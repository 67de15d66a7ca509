"""Fuzz regression (finding 45): the min-cut partitioner saved a value the caller can write in
place before the backward, where eager's backward does not read it. `v0 = torch.where(b > 0,
b, b); return (v0.flatten(), b, b.view(torch.int32))`: eager saves the mask `b > 0`; min-cut
saved `b` (an input: free to keep) and recomputed the mask in the backward, so after the
oracle's in-place write into the returned `b` the backward raised "one of the variables needed
for gradient computation has been modified by an inplace operation", where eager's backward
runs (and is right). Same with an intermediate whose view is returned (`v0 = c.clone(); v1 =
v0.flatten(); v4 = cat(v0, v1) ** 2; return (v1, c, v4)`: min-cut saved v0, eager saves the
cat).

Found by the session-6 campaign (89bd19a, 3 programs). Stage: partition/min_cut.py. Fixed:
values that share memory with an input or an output and that eager's backward does not read
(default_partition's saved set) cannot be saved (`_unsafe_to_save`); the cut saves something
else, which is always possible (the default partition's set is a cut).
"""
import torch

from tests.fuzz.oracle import check_program


def where_program(a, b):
    v0 = torch.where(b > 0, b, b)
    v1 = b.view(torch.int32)
    v2 = v0.flatten()
    return (v2, b, v1,)


def where_inputs():
    torch.manual_seed(0)
    l0 = torch.randn((), dtype=torch.float64)
    l1 = torch.randn((), requires_grad=True)
    a = l1
    b = a
    return [a, b], [l0, l1]


def cat_program(a, b, c):
    v0 = c.clone()
    v1 = v0.flatten()
    v2 = torch.cat([v0.reshape(-1), v1.reshape(-1)])
    v3 = a.view(-1)  # noqa: F841
    v4 = v2 * v2
    return (v1, c, v4,)


def cat_inputs():
    torch.manual_seed(0)
    l0 = torch.tensor(0.0, requires_grad=True)
    a = l0 * 1
    b = l0
    c = l0 * 1
    return [a, b, c], [l0]


def test_min_cut_does_not_save_an_input_eager_does_not_save():
    check_program(where_program, where_inputs)


def test_min_cut_does_not_save_the_base_of_a_returned_view():
    check_program(cat_program, cat_inputs)
