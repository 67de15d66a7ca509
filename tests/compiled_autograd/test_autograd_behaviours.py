"""The large external check: a broad set of autograd behaviours, each run eagerly and under
`aotgrad.compiled_autograd.enable(compiler_fn)` with the test's compiler (tests/compiled_autograd/
helpers.py: every case under identity and Dynamo's eager backend, compared exactly; the cases in
REPRESENTATIVE, one or a few per feature, also under aotgrad, aotgrad_inductor and inductor,
compared with a tolerance; `-m compilers`: every case under every compiler).

Each case is a small function returning a list of what a user can observe: values, grads,
None-ness, `is` flags, hook orders, strides, exceptions (type and message) caught inside it.
`run_case` runs it eagerly twice (it must be deterministic), then compiled twice (capture, then a
cache hit, mostly through replay.py's fast path), and records whether
the compiled run captured its backward or fell back to eager. Falling back is legitimate only
where the case is tagged `eager=`: create_graph (double backward) and the argument errors the
eager engine reports itself. KNOWN_DIFFERENT lists real differences, each with its reason.
"""
from __future__ import annotations

import math
import re
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Function
from torch.autograd.function import once_differentiable

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.compiled_autograd import replay
from tests.compiled_autograd import helpers

# --------------------------------------------------------------------------- registry

CASES: dict[str, Callable[[], list]] = {}
EAGER_BY_DESIGN: dict[str, str] = {}  # case -> why its backward may run on the eager engine
ENGINE_GRAPH_TASK = "register_multi_grad_hook reads the eager engine's graph task: runs eagerly by design"
CHECKPOINT = "torch.utils.checkpoint recomputes inside the eager engine's graph task: runs eagerly by design"
CAPTURE_FAILS = "the backward cannot run (eager raises): its capture fails, the eager engine raises its own error"
ANOMALY = "anomaly detection checks every node in the eager engine: runs eagerly by design"

# Real differences between eager and compiled autograd, name -> the observed difference.
KNOWN_DIFFERENT: dict[str, str] = {}
# Differences in value only where Inductor compiles the aten ops (aotgrad_inductor, inductor).
KNOWN_DIFFERENT_UNDER_INDUCTOR: dict[str, str] = {
    "dtype_conversions_in_the_graph": "Inductor keeps the float32 value where eager rounds it through bfloat16 "
                                      "(`a.to(torch.bfloat16).float()`: torch._inductor.config.emulate_precision_casts "
                                      "is off by default; with it on, equal)",
}


def case(fn=None, *, eager: str | None = None):
    """Register `case_xxx` as "xxx". `eager=` says why the case may fall back to eager."""
    def register(f):
        name = f.__name__.removeprefix("case_")
        assert name not in CASES, name
        CASES[name] = f
        if eager is not None:
            EAGER_BY_DESIGN[name] = eager
        return f
    return register(fn) if fn is not None else register


CREATE_GRAPH = "create_graph=True: the eager engine runs differentiable backwards"
ARGUMENT_ERROR = "the eager engine raises its own argument error"


def leaf(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def error_of(fn) -> list | None:
    """The exception `fn()` raises, as [type name, message without addresses], or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is part of what is compared
        return [type(e).__name__, re.sub(r"0x[0-9a-fA-F]+", "0x?", str(e))]
    return None


def weighted_sum(out):
    """A scalar whose gradient w.r.t. `out` is random (not all ones)."""
    return (out * torch.randn(out.shape, dtype=out.dtype)).sum()


# --------------------------------------------------------------------------- ops, table-made

def _op_case(name: str, fn: Callable, *shapes, dtype=torch.float32):
    def run():
        xs = [leaf(*s, dtype=dtype) for s in shapes]
        outs = fn(*xs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        outs = [o for o in outs if o.requires_grad]
        sum(weighted_sum(o) for o in outs).backward()
        return [o.detach() for o in outs] + [x.grad for x in xs]
    run.__name__ = f"case_op_{name}"
    case(run)


def _POS(x):  # a domain for log, sqrt, pow
    return x.abs() + 0.5

for _name, _fn, _shapes in [
    # pointwise
    ("sin", torch.sin, [(3, 4)]),
    ("exp_tanh", lambda x: x.exp().tanh(), [(3, 4)]),
    ("log_sqrt", lambda x: _POS(x).log() + _POS(x).sqrt(), [(3, 4)]),
    ("sigmoid_relu", lambda x: torch.sigmoid(x) * F.relu(x), [(3, 4)]),
    ("gelu_silu", lambda x: F.gelu(x) + F.silu(x), [(3, 4)]),
    ("pow_reciprocal", lambda x: x.pow(3) + (x.abs() + 2).reciprocal(), [(3, 4)]),
    ("pow_tensor_exponent", lambda x, y: _POS(x).pow(y), [(3, 4), (3, 4)]),
    ("clamp_where", lambda x: torch.where(x > 0, x.clamp(max=0.5), 2 * x), [(3, 4)]),
    ("erf_atan2", lambda x, y: torch.erf(x) + torch.atan2(x, y), [(3, 4), (3, 4)]),
    ("div_sub", lambda x, y: x / (y.abs() + 1) - y, [(3, 4), (3, 4)]),
    ("maximum_minimum", lambda x, y: torch.maximum(x, y) + torch.minimum(x, y) * 2, [(3, 4), (3, 4)]),
    ("lerp_addcmul", lambda x, y, z: torch.lerp(x, y, 0.3) + torch.addcmul(x, y, z, value=0.5),
     [(3, 4), (3, 4), (3, 4)]),
    ("abs_sign_floor", lambda x: x.abs() + x.sign() * x + x.floor(), [(3, 4)]),
    # reductions
    ("sum_dim_keepdim", lambda x: x.sum(dim=1, keepdim=True), [(3, 4)]),
    ("mean_prod", lambda x: x.mean(0) * x.prod(1).sum(), [(3, 4)]),
    ("amax_amin", lambda x: x.amax(1) + x.amin(0).sum(), [(3, 4)]),
    ("norm_var_std", lambda x: x.norm() + x.var(1).sum() + x.std(0).sum(), [(3, 4)]),
    ("logsumexp", lambda x: torch.logsumexp(x, dim=1), [(3, 4)]),
    ("cumsum_cumprod", lambda x: x.cumsum(1) + x.cumprod(0), [(3, 4)]),
    # matmul
    ("mm", torch.mm, [(3, 4), (4, 5)]),
    ("bmm", torch.bmm, [(2, 3, 4), (2, 4, 3)]),
    ("matmul_broadcast", torch.matmul, [(2, 3, 4), (4, 5)]),
    ("matmul_vector", torch.matmul, [(3, 4), (4,)]),
    ("einsum", lambda x, y: torch.einsum("bij,jk->bik", x, y), [(2, 3, 4), (4, 2)]),
    ("addmm_linear", lambda b, x, w: torch.addmm(b, x, w.t()) + F.linear(x, w, b), [(5,), (3, 4), (5, 4)]),
    ("outer_dot", lambda x, y: torch.outer(x, y) * torch.dot(x, x), [(3,), (4,)]),
    # conv and pooling
    ("conv1d", lambda x, w: F.conv1d(x, w, padding=1), [(1, 2, 6), (3, 2, 3)]),
    ("conv2d_bias_stride", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3), (3,)]),
    ("conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w, stride=2), [(1, 2, 3, 3), (2, 3, 2, 2)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), [(1, 2, 4, 4)]),
    ("avg_pool_adaptive", lambda x: F.avg_pool2d(x, 2) + F.adaptive_avg_pool2d(x, 2), [(1, 2, 4, 4)]),
    # norms
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), [(3, 4), (4,), (4,)]),
    ("batch_norm_training", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [(5, 3), (3,), (3,)]),
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [(2, 4, 3), (4,), (4,)]),
    ("normalize", lambda x: F.normalize(x, dim=1), [(3, 4)]),
    # softmax
    ("softmax", lambda x: F.softmax(x, dim=1), [(3, 4)]),
    ("log_softmax_dim0", lambda x: F.log_softmax(x, dim=0), [(3, 4)]),
    # losses
    ("mse_l1_smooth_l1", lambda x, y: F.mse_loss(x, y) + F.l1_loss(x, y) + F.smooth_l1_loss(x, y),
     [(3, 4), (3, 4)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, torch.tensor([0, 2, 4])), [(3, 5)]),
    ("nll_loss_weighted", lambda x: F.nll_loss(F.log_softmax(x, 1), torch.tensor([1, 0, 3]),
                                               weight=torch.tensor([1., 2., 3., 4.])), [(3, 4)]),
    ("bce_with_logits", lambda x: F.binary_cross_entropy_with_logits(x, torch.rand(3, 4)), [(3, 4)]),
    ("kl_div", lambda x: F.kl_div(F.log_softmax(x, 1), F.softmax(torch.randn(3, 4), 1), reduction="batchmean"),
     [(3, 4)]),
    # shape ops
    ("cat_stack", lambda x, y: torch.cat([x, y]) + torch.stack([x, y]).sum(0).repeat(2, 1), [(3, 4), (3, 4)]),
    ("pad_flip_roll", lambda x: F.pad(x, (1, 2)).flip(0).roll(1, 1), [(3, 4)]),
    ("gather_scatter_add", lambda x, y: x.gather(1, torch.tensor([[0, 0], [1, 3], [2, 2]]))
     .scatter_add(1, torch.tensor([[1, 1], [0, 1], [0, 0]]), y), [(3, 4), (3, 2)]),
    ("index_select_index_add", lambda x, y: x.index_select(0, torch.tensor([2, 0, 2]))
     .index_add(1, torch.tensor([0, 0]), y), [(3, 4), (3, 2)]),
    ("masked_select_cdist", lambda x, y: x.masked_select(x > 0).sum() + torch.cdist(x, y), [(3, 4), (2, 4)]),
    ("linalg_inv_det", lambda x: torch.linalg.inv(x + 3 * torch.eye(3)).sum() * torch.det(x + 3 * torch.eye(3)),
     [(3, 3)]),
    ("float64_ops", lambda x: (x.sin() @ x.t()).softmax(1), [(3, 4)]),
]:
    _op_case(_name, _fn, *_shapes, dtype=torch.float64 if _name.startswith("float64") else torch.float32)


# --------------------------------------------------------------------------- broadcasting, dtypes

@case
def case_broadcast_row_column():
    x, y = leaf(3, 1), leaf(1, 4)
    weighted_sum(x * y + x).backward()
    return [x.grad, y.grad]


@case
def case_broadcast_zero_dim_leaf():
    s, x = torch.randn((), requires_grad=True), leaf(3, 4)
    weighted_sum(s * x + s).backward()
    return [s.grad, x.grad]


@case
def case_broadcast_batch_against_vector():
    x, v = leaf(2, 3, 4), leaf(4)
    weighted_sum(x * v).backward()
    return [x.grad, v.grad]


@case
def case_sum_to_through_expand():
    x = leaf(1, 4)
    weighted_sum(x.expand(3, 4) * 2).backward()
    return [x.grad, x.grad.shape]


@case
def case_promotion_float32_with_float64_leaves():
    a, b = leaf(3), leaf(3, dtype=torch.float64)
    out = a * b
    weighted_sum(out).backward()
    return [out.dtype, a.grad, b.grad]


@case
def case_promotion_float32_leaf_with_float64_constant():
    a = leaf(2, 3)
    c = torch.randn(3, dtype=torch.float64)
    weighted_sum(a * c).backward()
    return [a.grad]


@case
def case_promotion_int_tensor_with_float_leaf():
    a = leaf(4)
    i = torch.arange(4)
    weighted_sum(a * i + i).backward()
    return [a.grad]


@case
def case_dtype_conversions_in_the_graph():
    a = leaf(3, 2)
    out = a.double().sin().float() * a.to(torch.bfloat16).float()
    weighted_sum(out).backward()
    return [a.grad]


@case
def case_complex_intermediate():
    a = leaf(4)
    z = torch.complex(a, a * 2) * torch.tensor(1 + 2j)
    torch.view_as_real(z).sum().backward()
    return [a.grad]


@case
def case_mixed_dtype_paths_meet():
    x = leaf(3)
    out = x.double() * 3 + x.sin()
    weighted_sum(out).backward()
    return [out.dtype, x.grad]


# --------------------------------------------------------------------------- views, in-place

@case
def case_view_slice_with_step():
    x = leaf(4, 6)
    weighted_sum(x[1:, ::2]).backward()
    return [x.grad]


@case
def case_view_select_and_transpose():
    x = leaf(3, 4)
    weighted_sum(x[1] * x.t()[:, 2] + x.t()[3].sum()).backward()
    return [x.grad]


@case
def case_view_reshape_unsqueeze_squeeze():
    x = leaf(2, 6)
    weighted_sum(x.view(3, 4).unsqueeze(0).squeeze(0).reshape(12)).backward()
    return [x.grad]


@case
def case_view_expand_of_unsqueezed():
    x = leaf(3)
    weighted_sum(x.unsqueeze(1).expand(3, 4)).backward()
    return [x.grad]


@case
def case_view_as_strided():
    x = leaf(9)
    weighted_sum(x.as_strided((3, 3), (1, 2), 1)).backward()
    return [x.grad]


@case
def case_view_diagonal_offset():
    x = leaf(4, 4)
    weighted_sum(x.diagonal() + x.diagonal(1).sum()).backward()
    return [x.grad]


@case
def case_view_unfold_and_narrow():
    x = leaf(8)
    weighted_sum(x.unfold(0, 3, 2) + x.narrow(0, 2, 3)).backward()
    return [x.grad]


@case
def case_inplace_on_view_of_leaf_clone():
    x = leaf(3, 4)
    y = x.clone()
    y[0].mul_(2)
    weighted_sum(y).backward()
    return [x.grad, y.grad_fn.name()]


@case
def case_inplace_on_chained_views():
    x = leaf(3, 4)
    y = x.clone()
    v = y.t()[1:]
    v.mul_(v.detach() + 1).add_(1)
    weighted_sum(y).backward()
    return [x.grad, y.detach()]


@case
def case_copy_leaf_into_a_view():
    x, b = leaf(4), leaf(3, 4)
    y = torch.zeros(3, 4)
    y[1] = x
    y[2].copy_(x * 2)
    weighted_sum(y * b).backward()
    return [x.grad, b.grad]


@case
def case_view_read_after_base_modified():
    x = leaf(3, 4)
    y = x.clone()
    v = y[0]
    y.mul_(3)
    weighted_sum(v).backward()
    return [x.grad, v.grad_fn.name()]


@case
def case_inplace_chain_on_intermediate():
    x = leaf(3)
    y = x * 1
    y.add_(1).mul_(2).exp_()
    weighted_sum(y).backward()
    return [x.grad]


@case
def case_masked_fill_and_index_put_on_clone():
    x, v = leaf(3, 4), leaf(2)
    y = x.clone()
    y.masked_fill_(x.detach() > 0.5, 0.0)
    y.index_put_((torch.tensor([0, 2]), torch.tensor([1, 3])), v, accumulate=True)
    weighted_sum(y).backward()
    return [x.grad, v.grad]


@case
def case_diagonal_zeroed_in_place():
    x = leaf(3, 3)
    y = x.clone()
    y.diagonal().zero_()
    weighted_sum(y).backward()
    return [x.grad]


@case
def case_strided_view_of_flattened_clone_in_place():
    x, w = leaf(3, 4), leaf(6)
    y = x.clone()
    y.view(-1)[::2].mul_(w)
    weighted_sum(y).backward()
    return [x.grad, w.grad]


@case
def case_inplace_view_ops_t_and_unsqueeze():
    x = leaf(3, 4)
    y = x.clone()
    y.t_()
    y.unsqueeze_(0)
    weighted_sum(y).backward()
    return [x.grad, list(y.shape)]


@case
def case_view_of_view_with_two_inplace_writers():
    x, a, b = leaf(4, 4), leaf(4), leaf(2)
    y = x * 2
    y[:, 1].copy_(a)
    y[1:3, 1].add_(b)
    weighted_sum(y).backward()
    return [x.grad, a.grad, b.grad]


@case
def case_inplace_on_leaf_view_error():
    x = leaf(3)
    return [error_of(lambda: x[0].mul_(2))]


@case
def case_saved_tensor_modified_in_place_error():
    x = leaf(3)
    y = x * 1
    z = y.sin()
    y.add_(1)
    return [error_of(lambda: z.sum().backward()), x.grad]


# --------------------------------------------------------------------------- multiple outputs

@case
def case_split_parts_weighted():
    x = leaf(6, 2)
    a, b, c = x.split(2)
    (a.sum() * 1 + b.sum() * 2 + (c * c).sum()).backward()
    return [x.grad]


@case
def case_chunk_only_one_used():
    x = leaf(4, 3)
    _, b = x.chunk(2)
    weighted_sum(b).backward()
    return [x.grad]


@case
def case_unbind_some_unused():
    x = leaf(3, 4)
    a, _, c = x.unbind(0)
    weighted_sum(a * c).backward()
    return [x.grad]


@case
def case_max_with_indices():
    x = leaf(3, 5)
    values, indices = x.max(dim=1)
    weighted_sum(values).backward()
    return [values.detach(), indices, indices.requires_grad, x.grad]


@case
def case_topk():
    x = leaf(7)
    values, indices = x.topk(3)
    weighted_sum(values).backward()
    return [indices, x.grad]


@case
def case_sort_descending():
    x = leaf(2, 5)
    values, indices = x.sort(dim=1, descending=True)
    weighted_sum(values[:, :3]).backward()
    return [indices, x.grad]


@case
def case_min_indices_used_to_gather():
    x, y = leaf(3, 4), leaf(3, 4)
    _, idx = x.min(dim=1, keepdim=True)
    weighted_sum(y.gather(1, idx) + x.min(dim=0).values.sum()).backward()
    return [x.grad, y.grad]


@case
def case_median_and_kthvalue():
    x = leaf(3, 5)
    weighted_sum(x.median(dim=1).values + x.kthvalue(2, dim=1).values).backward()
    return [x.grad]


@case
def case_std_mean_two_outputs():
    x = leaf(4, 3)
    std, mean = torch.std_mean(x, dim=0)
    weighted_sum(std * 2 + mean).backward()
    return [x.grad]


@case
def case_linalg_qr_eigh():
    x = leaf(4, 3)
    q, r = torch.linalg.qr(x)
    s = x.t() @ x
    w, _ = torch.linalg.eigh(s + s.t())
    weighted_sum(q).backward(retain_graph=True)
    first = x.grad.clone()
    (r.diagonal().sum() + w.sum()).backward()
    return [first, x.grad]


# --------------------------------------------------------------------------- non-differentiable, int/bool

@case
def case_argmax_used_to_index():
    x = leaf(3, 4)
    i = x.argmax(dim=1)
    weighted_sum(x[torch.arange(3), i]).backward()
    return [i, i.requires_grad, x.grad]


@case
def case_bool_mask_multiplies():
    x = leaf(3, 4)
    mask = x > 0
    weighted_sum(x * mask).backward()
    return [mask.requires_grad, x.grad]


@case
def case_nonzero_indexes():
    x = leaf(3, 4)
    nz = (x.detach() > 0).nonzero()
    weighted_sum(x[nz[:, 0], nz[:, 1]]).backward()
    return [x.grad]


@case
def case_round_and_floor_have_zero_grad():
    x = leaf(5)
    (x.round() + x.floor() + x.ceil() + x.trunc()).sum().backward()
    return [x.grad]


@case
def case_where_with_bool_condition_tensor():
    x, y = leaf(3, 4), leaf(3, 4)
    cond = torch.rand(3, 4) > 0.5
    weighted_sum(torch.where(cond, x, y * 3)).backward()
    return [x.grad, y.grad]


@case
def case_embedding_repeated_indices():
    w = leaf(5, 3)
    idx = torch.tensor([[0, 2, 0], [4, 2, 2]])
    weighted_sum(F.embedding(idx, w)).backward()
    return [w.grad]


@case
def case_one_hot_times_leaf():
    w = leaf(4, 3)
    oh = F.one_hot(torch.tensor([1, 3, 3]), 4).float()
    weighted_sum(oh @ w).backward()
    return [w.grad]


@case
def case_int_result_in_the_middle():
    x = leaf(4)
    count = (x > 0).sum()
    weighted_sum(x * count + count).backward()
    return [count, x.grad]


# --------------------------------------------------------------------------- paths meeting

@case
def case_diamond():
    x = leaf(4)
    a, b = x * 2, x.sin()
    weighted_sum(a * b).backward()
    return [x.grad]


@case
def case_one_tensor_used_many_times():
    x = leaf(3)
    out = x + x * x + x.exp() * x - x / 3 + x.sum()
    weighted_sum(out).backward()
    return [x.grad]


@case
def case_deep_chain_of_diamonds():
    x = leaf(3)
    h = x
    for _ in range(6):
        h = h.sin() * h.cos() + h
    weighted_sum(h).backward()
    return [x.grad]


@case
def case_same_leaf_both_operands():
    x = leaf(3, 3)
    weighted_sum(x @ x + x * x).backward()
    return [x.grad]


@case
def case_intermediate_used_by_three_consumers():
    x = leaf(3)
    h = x.exp()
    weighted_sum(h.sin() + h * 2 + h.sum()).backward()
    return [x.grad]


# --------------------------------------------------------------------------- roots, gradients

@case
def case_non_scalar_root_with_gradient():
    x = leaf(3, 4)
    y = x.sin()
    y.backward(torch.randn(3, 4))
    return [x.grad]


@case
def case_gradient_is_transposed():
    x = leaf(3, 4)
    g = torch.randn(4, 3).t()
    (x * 2).backward(g)
    return [x.grad, x.grad.stride()]


@case
def case_gradient_is_expanded():
    x = leaf(3, 4)
    g = torch.randn(4).expand(3, 4)
    (x.exp()).backward(g)
    return [x.grad, x.grad.is_contiguous()]


@case
def case_scalar_root_with_explicit_gradient():
    x = leaf(3)
    (x * x).sum().backward(torch.tensor(2.5))
    return [x.grad]


@case
def case_root_is_a_leaf():
    x = leaf(3)
    g = torch.randn(3)
    x.backward(g)
    return [x.grad, x.grad is g]


@case
def case_root_is_a_view_of_a_leaf():
    x = leaf(3, 4)
    x[1].backward(torch.randn(4))
    return [x.grad]


@case
def case_gradient_of_other_dtype_error():
    x = leaf(3)
    return [error_of(lambda: x.sin().backward(torch.ones(3, dtype=torch.float64))), x.grad]


@case
def case_gradient_of_wrong_shape_error():
    x = leaf(3)
    return [error_of(lambda: x.sin().backward(torch.ones(4))), x.grad]


@case
def case_two_roots_with_gradients():
    x, y = leaf(3), leaf(3)
    a, b = x * y, x.exp()
    torch.autograd.backward([a, b], [torch.randn(3), torch.randn(3)])
    return [x.grad, y.grad]


@case
def case_roots_sharing_a_subgraph():
    x = leaf(3)
    h = x.sin()
    torch.autograd.backward([h * 2, h.sum(), h.exp()], [torch.randn(3), None, torch.randn(3)])
    return [x.grad]


@case
def case_roots_one_of_them_a_leaf():
    x, y = leaf(3), leaf(3)
    torch.autograd.backward([x, y * x], [torch.ones(3), torch.randn(3)])
    return [x.grad, y.grad]


@case
def case_gradient_edge_as_input():
    x = leaf(3)
    h = x * 2
    out = h.sin().sum()
    edge = torch.autograd.graph.get_gradient_edge(h)
    (g,) = torch.autograd.grad(out, edge)
    return [g, x.grad]


@case
def case_gradient_edge_as_output():
    x = leaf(3)
    h = x.exp()
    edge = torch.autograd.graph.get_gradient_edge(h)
    (g,) = torch.autograd.grad(edge, x, grad_outputs=torch.randn(3))
    return [g]


# --------------------------------------------------------------------------- inputs=

@case
def case_backward_inputs_one_of_two_leaves():
    x, y = leaf(3), leaf(3)
    weighted_sum(x * y).backward(inputs=[x])
    return [x.grad, y.grad is None]


@case
def case_backward_inputs_non_leaf():
    x = leaf(3)
    h = x.sin()
    weighted_sum(h * 2).backward(inputs=[h])
    return [h.grad, x.grad is None, h.retains_grad]


@case
def case_backward_inputs_leaf_and_downstream_non_leaf():
    x = leaf(3)
    h = x * 3
    weighted_sum(h.exp()).backward(inputs=[x, h])
    return [x.grad, h.grad]


@case
def case_backward_inputs_accumulates_existing_grad():
    x, y = leaf(3), leaf(3)
    x.grad = torch.ones(3)
    g = x.grad
    weighted_sum(x * y).backward(inputs=[x])
    return [x.grad, x.grad is g, y.grad]


@case
def case_backward_inputs_unreachable_leaf():
    x, y = leaf(3), leaf(3)
    z = y * 2
    weighted_sum(x.exp()).backward(inputs=[x, y])
    return [x.grad, y.grad, z.requires_grad]


# --------------------------------------------------------------------------- autograd.grad

@case
def case_grad_basic_leaves_dot_grad_untouched():
    x = leaf(3)
    (g,) = torch.autograd.grad(weighted_sum(x.sin()), x)
    return [g, x.grad is None]


@case
def case_grad_allow_unused():
    x, y = leaf(3), leaf(3)
    gx, gy = torch.autograd.grad(weighted_sum(x * 2), [x, y], allow_unused=True)
    return [gx, gy is None]


@case
def case_grad_unused_error():
    x, y = leaf(3), leaf(3)
    return [error_of(lambda: torch.autograd.grad(weighted_sum(x * 2), [x, y]))]


@case
def case_grad_materialize_grads():
    x, y = leaf(3), leaf(2)
    gx, gy = torch.autograd.grad(weighted_sum(x.exp()), [x, y], materialize_grads=True)
    return [gx, gy]


@case
def case_grad_non_leaf_input():
    x = leaf(3)
    h = x.exp()
    (g,) = torch.autograd.grad(weighted_sum(h * h), h)
    return [g, h.grad is None]


@case
def case_grad_input_reached_by_several_paths():
    x = leaf(3)
    h = x * 2
    out = h.sin() + h.exp() + (h * x)
    (g,) = torch.autograd.grad(weighted_sum(out), h)
    return [g]


@case
def case_grad_output_is_the_leaf():
    x = leaf(3)
    g = torch.randn(3)
    (r,) = torch.autograd.grad(x, x, grad_outputs=g)
    return [r, r is g]


@case
def case_grad_output_is_the_input_non_leaf():
    x = leaf(3)
    h = x * 2
    (r,) = torch.autograd.grad(h, h, grad_outputs=torch.ones(3))
    return [r]


@case
def case_grad_two_outputs_grad_outputs():
    x = leaf(3)
    a, b = x.sin(), x.cos() * 2
    (g,) = torch.autograd.grad([a, b], x, grad_outputs=[torch.randn(3), torch.randn(3)])
    return [g]


@case
def case_grad_leaf_and_downstream_non_leaf():
    x = leaf(3)
    h = x.sin()
    gx, gh = torch.autograd.grad(weighted_sum(h * x), [x, h])
    return [gx, gh]


@case
def case_grad_leaf_hook_applies_to_result():
    x = leaf(3)
    seen = []
    x.register_hook(lambda g: seen.append(g.clone()) or g * 10)
    (g,) = torch.autograd.grad(weighted_sum(x.exp()), x)
    return [g, seen, x.grad is None]


@case
def case_grad_does_not_run_post_accumulate_hooks():
    x = leaf(3)
    calls = []
    x.register_post_accumulate_grad_hook(lambda p: calls.append("post"))
    torch.autograd.grad(weighted_sum(x.exp()), x)
    x.exp().sum().backward()
    return [calls, x.grad]


@case
def case_grad_then_backward_on_retained_graph():
    x = leaf(3)
    out = weighted_sum(x.sin() * x)
    (g,) = torch.autograd.grad(out, x, retain_graph=True)
    out.backward()
    return [g, x.grad]


# --------------------------------------------------------------------------- retain_graph

@case
def case_retain_graph_second_backward_accumulates():
    x = leaf(3)
    out = weighted_sum(x.exp() * x)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()
    return [first, x.grad]


@case
def case_second_backward_without_retain_graph_error():
    x = leaf(3)
    out = (x.exp() * x).sum()
    out.backward()
    return [error_of(out.backward), x.grad]


@case
def case_retain_then_not_then_error():
    x = leaf(3)
    out = x.sin().sum()
    out.backward(retain_graph=True)
    out.backward()
    return [error_of(out.backward), x.grad]


@case
def case_saved_tensor_accessed_after_backward_error():
    x = leaf(3)
    y = x.exp()
    z = y * x
    z.sum().backward()
    return [error_of(lambda: z.grad_fn._saved_self), x.grad]


@case
def case_saved_tensor_accessed_after_retained_backward():
    x = leaf(3)
    z = x.exp() * x
    z.sum().backward(retain_graph=True)
    return [z.grad_fn._saved_other, z.grad_fn._saved_self.detach()]


@case
def case_graph_without_saved_tensors_backward_twice():
    x = leaf(3)
    out = (x + 1).sum()
    out.backward()
    out.backward()
    return [x.grad]


@case
def case_grad_twice_with_retain_graph():
    x = leaf(3)
    out = weighted_sum(x.tanh())
    (a,) = torch.autograd.grad(out, x, retain_graph=True)
    (b,) = torch.autograd.grad(out, x)
    return [a, b, error_of(lambda: torch.autograd.grad(out, x))]


# --------------------------------------------------------------------------- .grad accumulation

@case
def case_grad_accumulates_in_place_keeps_identity():
    x = leaf(3)
    x.sin().sum().backward()
    g = x.grad
    x.cos().sum().backward()
    return [x.grad, x.grad is g]


@case
def case_first_grad_is_stolen_second_added():
    x = leaf(3)
    gradient = torch.randn(3)
    (x * 1).backward(gradient)
    stolen = x.grad is gradient
    (x * 1).backward(gradient)
    return [stolen, x.grad, gradient]


@case
def case_grad_of_transposed_leaf_keeps_strides():
    p = torch.randn(4, 3).t().detach().requires_grad_()
    weighted_sum(p * 2).backward()
    return [p.grad, p.grad.stride()]


@case
def case_grad_of_expanded_leaf():
    p = torch.randn(3, 1).expand(3, 4).detach().requires_grad_()
    weighted_sum(p.exp()).backward()
    return [p.grad, p.grad.stride()]


@case
def case_preset_non_contiguous_grad_accumulated_into():
    p = leaf(3, 4)
    p.grad = torch.zeros(4, 3).t()
    g = p.grad
    weighted_sum(p * p).backward()
    return [p.grad, p.grad is g, p.grad.stride()]


@case
def case_zero_grad_without_none_then_backward():
    m = nn.Linear(3, 2)
    weighted_sum(m(torch.randn(4, 3))).backward()
    g = m.weight.grad
    m.zero_grad(set_to_none=False)
    weighted_sum(m(torch.randn(4, 3))).backward()
    return [m.weight.grad, m.bias.grad, m.weight.grad is g]


@case
def case_grad_set_to_none_between_backwards():
    x = leaf(3)
    x.exp().sum().backward()
    x.grad = None
    x.sin().sum().backward()
    return [x.grad]


@case
def case_training_steps_with_sgd():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = F.mse_loss(m(torch.randn(3, 4)), torch.randn(3, 2))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses + [p.detach().clone() for p in m.parameters()]


@case
def case_grad_on_leaf_that_is_a_parameter_view():
    w = nn.Parameter(torch.randn(3, 4))
    weighted_sum(w[:, 1:] @ torch.randn(3, 2)).backward()
    return [w.grad, type(w.grad).__name__]


# --------------------------------------------------------------------------- retain_grad

@case
def case_retain_grad_on_non_leaf():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    weighted_sum(h.sin()).backward()
    return [h.grad, h.retains_grad, x.grad]


@case
def case_retain_grad_second_backward_is_out_of_place():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    out = weighted_sum(h.exp())
    out.backward(retain_graph=True)
    first = h.grad
    first_copy = first.clone()
    out.backward()
    return [first_copy, first, h.grad, h.grad is first]


@case
def case_retain_grad_after_inplace():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    h.mul_(3)
    weighted_sum(h.sin()).backward()
    return [h.grad, x.grad]


@case
def case_retain_grad_on_root_is_the_gradient_copy():
    x = leaf(3)
    h = x.exp()
    h.retain_grad()
    g = torch.randn(3)
    h.backward(g)
    return [h.grad, h.grad is g]


@case
def case_retain_grad_on_view():
    x = leaf(3, 4)
    v = (x * 2)[1]
    v.retain_grad()
    weighted_sum(v.exp()).backward()
    return [v.grad, x.grad]


@case
def case_retain_grad_on_leaf_is_a_no_op():
    x = leaf(3)
    x.retain_grad()
    x.exp().sum().backward()
    return [x.retains_grad, x.grad]


@case
def case_retain_grad_sees_hook_registered_after():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 10)
    weighted_sum(h).backward()
    return [h.grad, x.grad]


@case
def case_retain_grad_unused_non_leaf_stays_none():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    unused = x * 3
    unused.retain_grad()
    weighted_sum(h).backward()
    return [h.grad, unused.grad is None]


# --------------------------------------------------------------------------- tensor hooks

@case
def case_leaf_hook_returning_none_records():
    x = leaf(3)
    seen = []
    x.register_hook(lambda g: seen.append(g.clone()))
    weighted_sum(x.exp()).backward()
    return [seen, x.grad]


@case
def case_leaf_hook_modifies_accumulated():
    x = leaf(3)
    x.register_hook(lambda g: g * 3 + 1)
    weighted_sum(x.exp()).backward()
    return [x.grad]


@case
def case_several_hooks_chain_in_order():
    x = leaf(3)
    order = []
    x.register_hook(lambda g: order.append(("a", g.sum().item())) or g * 2)
    x.register_hook(lambda g: order.append(("b", g.sum().item())) or g + 1)
    x.register_hook(lambda g: order.append(("c", g.sum().item())))
    weighted_sum(x.exp()).backward()
    return [order, x.grad]


@case
def case_non_leaf_hook_changes_upstream():
    x = leaf(3)
    h = x.sin()
    h.register_hook(lambda g: g.flip(0))
    weighted_sum(h * 2).backward()
    return [x.grad]


@case
def case_hook_removed_before_backward():
    x = leaf(3)
    h = x * 2
    handle = h.register_hook(lambda g: g * 100)
    x.register_hook(lambda g: g - 1)
    handle.remove()
    weighted_sum(h).backward()
    return [x.grad]


@case
def case_hook_removed_by_earlier_hook_on_same_tensor():
    x = leaf(3)
    h = x * 2
    handles = []
    h.register_hook(lambda g: handles[0].remove())
    handles.append(h.register_hook(lambda g: g * 100))
    out = weighted_sum(h)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()
    return [first, x.grad]


@case
def case_downstream_hook_removes_upstream_hook():
    x = leaf(3)
    a = x * 2
    b = a.exp()
    handles = []
    b.register_hook(lambda g: handles[0].remove())
    handles.append(a.register_hook(lambda g: g * 100))
    weighted_sum(b).backward()
    return [x.grad]


@case
def case_hook_on_tensor_with_two_consumers_fires_once():
    x = leaf(3)
    h = x.exp()
    calls = []
    h.register_hook(lambda g: calls.append(g.clone()))
    weighted_sum(h.sin() + h * 3).backward()
    return [calls, x.grad]


@case
def case_hook_on_root_sees_the_gradient():
    x = leaf(3)
    y = x * 2
    seen = []
    y.register_hook(lambda g: seen.append(g.clone()) or g * 0.5)
    y.backward(torch.randn(3))
    return [seen, x.grad]


@case
def case_hook_order_across_tensors():
    x = leaf(3)
    order = []
    a = x.sin()
    b = x.cos()
    c = a * b
    for name, t in [("x", x), ("a", a), ("b", b), ("c", c)]:
        t.register_hook(lambda g, name=name: order.append(name))
    weighted_sum(c).backward()
    return [order, x.grad]


@case
def case_hook_counters_over_two_backwards():
    x = leaf(3)
    h = x * 2
    count = [0, 0]

    def on_h(g):
        count[0] += 1
        return g * count[0]

    def on_x(g):
        count[1] += 1

    h.register_hook(on_h)
    x.register_hook(on_x)
    out = weighted_sum(h.exp())
    out.backward(retain_graph=True)
    out.backward()
    return [count, x.grad]


@case
def case_hook_registered_on_tensor_that_then_dies():
    x = leaf(3)

    def make():
        h = x * 3
        h.register_hook(lambda g: g * 10)
        return h.sum()

    make().backward()
    return [x.grad]


@case
def case_hook_returning_other_dtype_error():
    x = leaf(3)
    h = x * 2
    h.register_hook(lambda g: g.double())
    return [error_of(lambda: h.sum().backward()), x.grad]


@case
def case_hook_raising_propagates():
    x = leaf(3)
    h = x * 2

    def boom(g):
        raise ValueError("hook failed on purpose")

    h.register_hook(boom)
    return [error_of(lambda: h.sum().backward()), x.grad]


# --------------------------------------------------------------------------- node hooks

@case
def case_node_prehook_modifies_grad_outputs():
    x = leaf(3)
    y = x.exp()
    y.grad_fn.register_prehook(lambda gout: (gout[0] * 2,))
    weighted_sum(y).backward()
    return [x.grad]


@case
def case_node_post_hook_observes():
    x, w = leaf(3), leaf(3)
    y = x * w
    seen = []
    y.grad_fn.register_hook(lambda gin, gout: seen.append([list(gin), list(gout)]))
    weighted_sum(y).backward()
    return [seen, x.grad, w.grad]


@case
def case_node_post_hook_replaces_grad_inputs():
    x, w = leaf(3), leaf(3)
    y = x * w
    y.grad_fn.register_hook(lambda gin, gout: (gin[0] * 0, gin[1] + 1))
    weighted_sum(y).backward()
    return [x.grad, w.grad]


@case
def case_chained_node_prehooks():
    x = leaf(3)
    y = x.sin()
    order = []
    y.grad_fn.register_prehook(lambda gout: order.append("1") or (gout[0] + 1,))
    y.grad_fn.register_prehook(lambda gout: order.append("2"))
    y.grad_fn.register_prehook(lambda gout: order.append("3") or (gout[0] * 3,))
    weighted_sum(y).backward()
    return [order, x.grad]


@case
def case_node_prehook_and_post_hook_order_with_tensor_hook():
    x = leaf(3)
    y = x.exp()
    order = []
    y.grad_fn.register_hook(lambda gin, gout: order.append("post"))
    y.grad_fn.register_prehook(lambda gout: order.append("pre"))
    y.register_hook(lambda g: order.append("tensor"))
    weighted_sum(y).backward()
    return [order, x.grad]


@case
def case_accumulate_grad_node_prehook():
    x = leaf(3)
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    seen = []
    acc.register_prehook(lambda gout: seen.append(gout[0].clone()) or (gout[0] + 5,))
    weighted_sum(y).backward()
    return [acc.name(), seen, x.grad]


@case
def case_accumulate_grad_node_post_hook():
    x = leaf(3)
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    seen = []
    acc.register_hook(lambda gin, gout: seen.append([gin, [g.clone() for g in gout], x.grad.clone()]))
    weighted_sum(y).backward()
    return [seen, x.grad]


@case
def case_node_hook_removed():
    x = leaf(3)
    y = x.exp()
    handle = y.grad_fn.register_prehook(lambda gout: (gout[0] * 100,))
    handle.remove()
    weighted_sum(y).backward()
    return [x.grad]


@case
def case_post_accumulate_grad_hook_sees_grad():
    x = leaf(3)
    seen = []
    x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
    weighted_sum(x.exp()).backward()
    x.sin().sum().backward()
    return [seen, x.grad]


@case
def case_post_accumulate_grad_hook_runs_an_optimizer_step():
    torch.manual_seed(2)
    m = nn.Linear(3, 2)
    opts = {p: torch.optim.SGD([p], lr=0.5) for p in m.parameters()}

    def step(p):
        opts[p].step()
        opts[p].zero_grad()

    for p in m.parameters():
        p.register_post_accumulate_grad_hook(step)
    for _ in range(2):
        weighted_sum(m(torch.randn(4, 3))).backward()
    return [m.weight.detach().clone(), m.bias.detach().clone(), m.weight.grad]


@case
def case_post_accumulate_grad_hook_after_tensor_hook():
    x = leaf(3)
    order = []
    x.register_post_accumulate_grad_hook(lambda p: order.append(("post", p.grad.clone())))
    x.register_hook(lambda g: order.append(("pre", g.clone())) or g * 2)
    weighted_sum(x.exp()).backward()
    return [order]


@case
def case_module_full_backward_hook():
    torch.manual_seed(3)
    m = nn.Linear(3, 2)
    seen = []
    m.register_full_backward_hook(lambda mod, gin, gout: seen.append([gin[0].clone(), gout[0].clone()]))
    x = leaf(4, 3)
    weighted_sum(m(x)).backward()
    return [seen, x.grad, m.weight.grad]


@case
def case_module_full_backward_hook_replaces_grad_input():
    torch.manual_seed(3)
    m = nn.Linear(3, 2)
    m.register_full_backward_hook(lambda mod, gin, gout: (gin[0] * -1,))
    x = leaf(4, 3)
    weighted_sum(m(x).tanh()).backward()
    return [x.grad, m.weight.grad]


@case
def case_module_full_backward_pre_hook():
    torch.manual_seed(3)
    m = nn.Linear(3, 2)
    order = []
    m.register_full_backward_pre_hook(lambda mod, gout: order.append("pre") or (gout[0] * 2,))
    m.register_full_backward_hook(lambda mod, gin, gout: order.append("post"))
    x = leaf(4, 3)
    weighted_sum(m(x)).backward()
    return [order, x.grad, m.weight.grad, m.bias.grad]


@case
def case_module_hooks_order_in_sequential():
    torch.manual_seed(3)
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    order = []
    for i, layer in enumerate(seq):
        layer.register_full_backward_hook(lambda mod, gin, gout, i=i: order.append(i))
    weighted_sum(seq(leaf(2, 3))).backward()
    return [order, seq[0].weight.grad]


@case(eager=ENGINE_GRAPH_TASK)
def case_multi_grad_hook_all():
    a, b = leaf(3), leaf(3)
    seen = []
    torch.autograd.graph.register_multi_grad_hook(
        (a, b), lambda grads: seen.append([g is None for g in grads] + [grads[0].clone()]))
    weighted_sum(a * b).backward()
    return [seen, a.grad, b.grad]


@case(eager=ENGINE_GRAPH_TASK)
def case_multi_grad_hook_all_with_one_unused():
    a, b, c = leaf(3), leaf(3), leaf(3)
    seen = []
    torch.autograd.graph.register_multi_grad_hook((a, b), lambda grads: seen.append([g is None for g in grads]))
    weighted_sum(a * c).backward()
    return [seen, a.grad]


@case(eager=ENGINE_GRAPH_TASK)
def case_multi_grad_hook_any():
    a, b = leaf(3), leaf(3)
    h = a * 2
    seen = []
    torch.autograd.graph.register_multi_grad_hook((h, b), lambda g: seen.append(g.clone()), mode="any")
    weighted_sum(h * b).backward()
    return [seen, a.grad]


@case
def case_hooks_with_retain_graph_run_each_time():
    x = leaf(3)
    y = x.exp()
    calls = []
    y.grad_fn.register_prehook(lambda gout: calls.append("pre"))
    y.register_hook(lambda g: calls.append("tensor"))
    x.register_post_accumulate_grad_hook(lambda p: calls.append("post_acc"))
    out = weighted_sum(y)
    out.backward(retain_graph=True)
    out.backward()
    return [calls, x.grad]


@case
def case_hook_calls_autograd_grad_on_another_graph():
    x, z = leaf(3), leaf(3)
    other = (z.exp() * z).sum()
    inner = []

    def hook(g):
        (gz,) = torch.autograd.grad(other, z)
        inner.append(gz)
        return g + gz

    h = x * 2
    h.register_hook(hook)
    weighted_sum(h).backward()
    return [inner, x.grad, z.grad is None]


# --------------------------------------------------------------------------- queue_callback

def _queue(callback):
    torch.autograd.Variable._execution_engine.queue_callback(callback)


@case
def case_queue_callback_runs_after_all_hooks():
    x = leaf(3)
    order = []
    h = x * 2
    h.register_hook(lambda g: order.append("h") or _queue(lambda: order.append(("cb", x.grad.clone()))))
    x.register_hook(lambda g: order.append("x"))
    weighted_sum(h.exp()).backward()
    return [order]


@case
def case_callback_queues_another_callback():
    x = leaf(3)
    order = []

    def first():
        order.append("first")
        _queue(lambda: order.append("second"))

    x.register_hook(lambda g: _queue(first))
    x.register_hook(lambda g: _queue(lambda: order.append("third")))
    weighted_sum(x.exp()).backward()
    return [order]


@case
def case_queue_callback_outside_backward_error():
    return [error_of(lambda: _queue(lambda: None))]


@case
def case_queue_callback_from_node_hook_reads_grads():
    x, y = leaf(3), leaf(3)
    out = x * y
    seen = []
    out.grad_fn.register_hook(lambda gin, gout: _queue(lambda: seen.append([x.grad.clone(), y.grad.clone()])))
    weighted_sum(out).backward()
    return [seen]


# --------------------------------------------------------------------------- custom Functions

class MulSaved(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


class SquareSavedTwice(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x, x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * a + g * b


class ExpSavesOutput(Function):
    @staticmethod
    def forward(ctx, x):
        out = x.exp()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class SavesInputAndOutput(Function):
    @staticmethod
    def forward(ctx, x):
        out = x.tanh()
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        return g * (1 - out * out) + 0 * x


class ScaleWithCtxAttributes(Function):
    @staticmethod
    def forward(ctx, x, scale: float, mode: str):
        ctx.scale, ctx.mode, ctx.shape = scale, mode, x.shape
        return x * scale

    @staticmethod
    def backward(ctx, g):
        factor = ctx.scale if ctx.mode == "linear" else 0.0
        return g * factor + torch.zeros(ctx.shape), None, None


class ReturnsNonTensor(Function):
    @staticmethod
    def forward(ctx, x, n: int):
        return x * n, n + 1, "label"

    @staticmethod
    def backward(ctx, g, g_int, g_str):
        return g * 2, None


class ThreeOutputs(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos(), x * 2

    @staticmethod
    def backward(ctx, ga, gb, gc):
        (x,) = ctx.saved_tensors
        return ga * x.cos() - gb * x.sin() + gc * 2


class MaxNonDifferentiableIndex(Function):
    @staticmethod
    def forward(ctx, x):
        values, idx = x.max(dim=1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        ctx.shape = x.shape
        return values, idx

    @staticmethod
    def backward(ctx, g, g_idx):
        (idx,) = ctx.saved_tensors
        out = torch.zeros(ctx.shape)
        out.scatter_(1, idx.unsqueeze(1), g.unsqueeze(1))
        return out


class DoubleInPlace(Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 2


class SeesNoneGrads(Function):
    seen: ClassVar[list] = []

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, ga, gb):
        SeesNoneGrads.seen.append([ga is None, gb is None])
        total = torch.zeros(())
        if ga is not None:
            total = total + ga * 2
        if gb is not None:
            total = total + gb * 3
        return total


class MaterializedGrads(Function):
    seen: ClassVar[list] = []

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, ga, gb):
        MaterializedGrads.seen.append([ga is None, gb is None, gb.clone()])
        return ga * 2 + gb * 3


class OnceDifferentiableSquare(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class BroadcastableGrad(Function):
    @staticmethod
    def forward(ctx, x):
        return x.expand(3, 4).clone()

    @staticmethod
    def backward(ctx, g):
        return g  # shape (3, 4) for an input of shape (3, 1): the engine sums it down


class WrongShapeGrad(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return torch.ones(5)


class WrongNumberOfGrads(Function):
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        return (g,)


class WrongDtypeGrad(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (g * 2).double()


class ViewOutput(Function):
    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, g):
        return g.view(3, 4) * 5


class Outer(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ExpSavesOutput.apply(x) + 1  # inner Function under no_grad: not recorded

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x.exp() * 10


class BackwardUsesAutograd(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_()
            (dx,) = torch.autograd.grad(xd.sin(), xd, g)
        return dx


class BackwardNoneForOneInput(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y, None


class RecordsNeedsInputGrad(Function):
    seen: ClassVar[list] = []

    @staticmethod
    def forward(ctx, x, y, z):
        ctx.save_for_backward(x, y, z)
        return x + y * z

    @staticmethod
    def backward(ctx, g):
        RecordsNeedsInputGrad.seen.append(list(ctx.needs_input_grad))
        _, y, z = ctx.saved_tensors
        return g, (g * z if ctx.needs_input_grad[1] else None), (g * y if ctx.needs_input_grad[2] else None)


class ReturnsInput(Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 7


class SavesNone(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(None, x)
        return x * 4

    @staticmethod
    def backward(ctx, g):
        none, _ = ctx.saved_tensors
        return g * 4 + (0 if none is None else 1)


class RaisesInBackward(Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("custom backward refused")


class SetupContextMul(Function):
    @staticmethod
    def forward(x, y):
        return x * y

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * y, g * x


@case
def case_function_saved_inputs():
    x, y = leaf(3), leaf(3)
    weighted_sum(MulSaved.apply(x, y)).backward()
    return [x.grad, y.grad]


@case
def case_function_saves_the_same_tensor_twice():
    x = leaf(3)
    weighted_sum(SquareSavedTwice.apply(x)).backward()
    return [x.grad]


@case
def case_function_saves_its_output():
    x = leaf(3)
    out = ExpSavesOutput.apply(x)
    weighted_sum(out).backward()
    return [out.detach(), x.grad]


@case
def case_function_saves_input_and_output():
    x = leaf(3)
    weighted_sum(SavesInputAndOutput.apply(x * 2)).backward()
    return [x.grad]


@case
def case_function_ctx_attributes_and_non_tensor_inputs():
    x = leaf(3)
    a = ScaleWithCtxAttributes.apply(x, 1.5, "linear")
    b = ScaleWithCtxAttributes.apply(x, 2.0, "zero")
    weighted_sum(a + b).backward()
    return [x.grad]


@case
def case_function_non_tensor_outputs():
    x = leaf(3)
    t, n, label = ReturnsNonTensor.apply(x, 4)
    weighted_sum(t).backward()
    return [n, label, x.grad]


@case
def case_function_several_outputs_some_unused():
    x = leaf(3)
    a, _, c = ThreeOutputs.apply(x)
    weighted_sum(a + c).backward()
    return [x.grad]


@case
def case_function_mark_non_differentiable():
    x = leaf(3, 4)
    values, idx = MaxNonDifferentiableIndex.apply(x)
    weighted_sum(values).backward()
    return [idx, idx.requires_grad, x.grad]


@case
def case_function_mark_dirty_in_place():
    x = leaf(3)
    y = x.sin()
    out = DoubleInPlace.apply(y)
    weighted_sum(out.exp()).backward()
    return [out is y, x.grad]


@case
def case_function_set_materialize_grads_false():
    SeesNoneGrads.seen = []
    x = leaf(3)
    a, _ = SeesNoneGrads.apply(x)
    weighted_sum(a).backward()
    return [SeesNoneGrads.seen, x.grad]


@case
def case_function_materializes_missing_grads():
    MaterializedGrads.seen = []
    x = leaf(3)
    a, _ = MaterializedGrads.apply(x)
    weighted_sum(a).backward()
    return [MaterializedGrads.seen, x.grad]


@case
def case_function_once_differentiable():
    x = leaf(3)
    weighted_sum(OnceDifferentiableSquare.apply(x)).backward()
    return [x.grad]


@case
def case_function_broadcastable_grad_summed_by_engine():
    x = leaf(3, 1)
    weighted_sum(BroadcastableGrad.apply(x)).backward()
    return [x.grad]


@case
def case_function_wrong_shape_grad_error():
    x = leaf(3)
    return [error_of(lambda: WrongShapeGrad.apply(x).sum().backward()), x.grad]


@case
def case_function_wrong_number_of_grads_error():
    x, y = leaf(3), leaf(3)
    return [error_of(lambda: WrongNumberOfGrads.apply(x, y).sum().backward()), x.grad]


@case
def case_function_grad_of_other_dtype_is_cast():
    x = leaf(3)
    weighted_sum(WrongDtypeGrad.apply(x)).backward()
    return [x.grad]


@case
def case_function_view_output():
    x = leaf(3, 4)
    out = ViewOutput.apply(x * 1)
    weighted_sum(out).backward()
    return [out._is_view(), x.grad]


@case
def case_function_view_output_modified_in_place_error():
    x = leaf(3, 4)
    out = ViewOutput.apply(x * 1)
    return [error_of(lambda: out.mul_(2))]


@case
def case_function_nested_inside_function():
    x = leaf(3)
    weighted_sum(Outer.apply(x)).backward()
    return [x.grad]


@case
def case_functions_composed():
    x, y = leaf(3), leaf(3)
    h = MulSaved.apply(ExpSavesOutput.apply(x), y)
    weighted_sum(SquareSavedTwice.apply(h)).backward()
    return [x.grad, y.grad]


@case
def case_function_backward_calls_autograd():
    x = leaf(3)
    weighted_sum(BackwardUsesAutograd.apply(x)).backward()
    return [x.grad]


@case
def case_function_backward_returns_none_for_an_input():
    x, y = leaf(3), leaf(3)
    weighted_sum(BackwardNoneForOneInput.apply(x, y)).backward()
    return [x.grad, y.grad is None]


@case
def case_function_needs_input_grad():
    RecordsNeedsInputGrad.seen = []
    x, z = leaf(3), leaf(3)
    y = torch.randn(3)
    weighted_sum(RecordsNeedsInputGrad.apply(x, y, z)).backward()
    return [RecordsNeedsInputGrad.seen, x.grad, z.grad]


@case
def case_function_returns_its_input():
    x = leaf(3)
    h = x * 2
    out = ReturnsInput.apply(h)
    weighted_sum(out).backward()
    return [out is h, x.grad]


@case
def case_function_saves_none():
    x = leaf(3)
    weighted_sum(SavesNone.apply(x)).backward()
    return [x.grad]


@case
def case_function_applied_twice_in_one_graph():
    x = leaf(3)
    weighted_sum(ExpSavesOutput.apply(ExpSavesOutput.apply(x) * 0.1)).backward()
    return [x.grad]


@case
def case_function_raising_in_backward():
    x = leaf(3)
    return [error_of(lambda: RaisesInBackward.apply(x).sum().backward()), x.grad]


@case
def case_function_with_setup_context():
    x, y = leaf(3), leaf(3)
    weighted_sum(SetupContextMul.apply(x, y)).backward()
    return [x.grad, y.grad]


@case
def case_function_with_hooks_on_its_node():
    x = leaf(3)
    out = MulSaved.apply(x, x * 2)
    order = []
    out.grad_fn.register_prehook(lambda gout: order.append("pre") or (gout[0] * 3,))
    out.grad_fn.register_hook(lambda gin, gout: order.append("post"))
    weighted_sum(out).backward()
    return [order, x.grad]


@case
def case_function_second_backward_without_retain_error():
    x = leaf(3)
    out = MulSaved.apply(x, x).sum()
    out.backward()
    return [error_of(out.backward), x.grad]


# --------------------------------------------------------------------------- grad mode, detach, requires_grad

@case
def case_no_grad_region_in_forward():
    x = leaf(3)
    with torch.no_grad():
        c = x * 10
    weighted_sum(x.sin() * c).backward()
    return [c.requires_grad, x.grad]


@case
def case_enable_grad_inside_no_grad():
    x = leaf(3)
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x.exp()
    weighted_sum(a * b).backward()
    return [a.requires_grad, x.grad]


@case
def case_set_grad_enabled_false_constant():
    x = leaf(3)
    with torch.set_grad_enabled(False):
        scale = x.norm()
    weighted_sum(x / scale).backward()
    return [x.grad]


@case
def case_inference_tensor_saved_error():
    x = leaf(3)
    with torch.inference_mode():
        c = torch.randn(3)
    return [error_of(lambda: (x * c).sum().backward()), weighted_sum(x + c).backward(), x.grad]


@case
def case_detach_stops_gradient():
    x = leaf(3)
    h = x.exp()
    weighted_sum(h * h.detach()).backward()
    return [x.grad]


@case(eager=CAPTURE_FAILS)
def case_detach_in_place_on_intermediate():
    x = leaf(3)
    y = x * 2
    z = y.sin()
    y.detach_()
    return [y.requires_grad, y.grad_fn is None, error_of(lambda: weighted_sum(z + y).backward()), x.grad]


@case
def case_data_bypasses_autograd():
    x = leaf(3)
    y = x * 2
    x.data.mul_(3)
    weighted_sum(y * x).backward()
    return [x.grad]


@case
def case_requires_grad_toggled_between_forwards():
    x, y = leaf(3), leaf(3)
    y.requires_grad_(False)
    weighted_sum(x * y).backward()
    first = [x.grad.clone(), y.grad is None]
    y.requires_grad_(True)
    weighted_sum(x * y).backward()
    return first + [x.grad, y.grad]


@case(eager=ARGUMENT_ERROR)
def case_root_does_not_require_grad_error():
    x = torch.randn(3)
    return [error_of(lambda: (x * 2).sum().backward())]


@case(eager=ARGUMENT_ERROR)
def case_grad_input_does_not_require_grad_error():
    x, y = leaf(3), torch.randn(3)
    return [error_of(lambda: torch.autograd.grad((x * y).sum(), y))]


@case
def case_requires_grad_on_intermediate_makes_a_leaf():
    a = torch.randn(3)
    h = a * 2
    h.requires_grad_()
    weighted_sum(h.exp()).backward()
    return [h.is_leaf, h.grad]


@case
def case_requires_grad_false_on_non_leaf_error():
    x = leaf(3)
    h = x * 2
    return [error_of(lambda: h.requires_grad_(False))]


@case(eager=ANOMALY)
def case_detect_anomaly_nan_in_backward():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            error = error_of(lambda: (x.sqrt() * 0).sum().backward())
    return [error, x.grad]


# --------------------------------------------------------------------------- modules and checkpoint

@case
def case_gru_cell():
    torch.manual_seed(4)
    cell = nn.GRUCell(3, 4)
    x = leaf(2, 3)
    h = torch.zeros(2, 4)
    for _ in range(2):
        h = cell(x, h)
    weighted_sum(h).backward()
    return [x.grad, cell.weight_hh.grad]


@case
def case_dropout_with_seed():
    x = leaf(4, 5)
    weighted_sum(F.dropout(x, 0.5, training=True)).backward()
    return [x.grad]


@case
def case_cache_hit_second_iteration_same_result():
    torch.manual_seed(5)
    m = nn.Linear(3, 3)
    grads = []
    for _ in range(3):
        m.zero_grad()
        weighted_sum(m(torch.randn(2, 3)).relu()).backward()
        grads.append(m.weight.grad.clone())
    return grads


@case(eager=CHECKPOINT)
def case_checkpoint_non_reentrant():
    x = leaf(3, 4)
    w = leaf(4, 4)
    out = torch.utils.checkpoint.checkpoint(lambda a: (a @ w).sin() @ w, x, use_reentrant=False)
    weighted_sum(out).backward()
    return [x.grad, w.grad]


@case(eager=CHECKPOINT)
def case_checkpoint_module_with_dropout():
    torch.manual_seed(6)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Tanh())
    x = leaf(3, 4)
    out = torch.utils.checkpoint.checkpoint(m, x, use_reentrant=False)
    weighted_sum(out).backward()
    return [x.grad, m[0].weight.grad]


@case
def case_saved_tensors_hooks_pack_unpack():
    x = leaf(3)
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t * 1):
        out = x.exp() * x
    weighted_sum(out).backward()
    return [packed, x.grad]


# --------------------------------------------------------------------------- double backward (eager by design)

@case(eager=CREATE_GRAPH)
def case_double_backward_grad_of_grad():
    x = leaf(3)
    (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    return [g.detach(), g.requires_grad, gg]


@case(eager=CREATE_GRAPH)
def case_double_backward_via_dot_grad():
    x = leaf(3)
    (x.sin() * x).sum().backward(create_graph=True)
    first = x.grad.detach().clone()
    gfirst = x.grad
    x.grad = None
    gfirst.sum().backward()
    return [first, x.grad]


@case(eager=CREATE_GRAPH)
def case_hessian_vector_product():
    x = leaf(4)
    v = torch.randn(4)
    (g,) = torch.autograd.grad((x.exp() * x).sum(), x, create_graph=True)
    (hv,) = torch.autograd.grad(g, x, grad_outputs=v)
    return [hv]


@case(eager=CREATE_GRAPH)
def case_functional_hessian():
    return [torch.autograd.functional.hessian(lambda x: (x.sin() * x).sum(), torch.randn(3))]


@case
def case_functional_jacobian():
    return [torch.autograd.functional.jacobian(lambda x: x.exp() * x.sum(), torch.randn(3))]


@case(eager=CREATE_GRAPH)
def case_custom_function_double_backward():
    x = leaf(3)
    (g,) = torch.autograd.grad(MulSaved.apply(x, x).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    return [g.detach(), gg]


@case(eager=CREATE_GRAPH)
def case_once_differentiable_double_backward_error():
    x = leaf(3)
    (g,) = torch.autograd.grad(OnceDifferentiableSquare.apply(x).sum(), x, create_graph=True)
    return [error_of(lambda: torch.autograd.grad(g.sum(), x))]


@case(eager=CREATE_GRAPH)
def case_gradient_penalty_step():
    torch.manual_seed(7)
    m = nn.Linear(3, 1)
    x = leaf(4, 3)
    out = m(x).tanh().sum()
    (gx,) = torch.autograd.grad(out, x, create_graph=True)
    (out + gx.pow(2).sum()).backward()
    return [m.weight.grad, x.grad]


# --------------------------------------------------------------------------- the runner

def _same(a, b, exact: bool = True) -> bool:
    """Equal observables: tensors bitwise (NaNs where eager has them), or with `exact=False`
    (compilers that compile the aten ops: Inductor reorders float arithmetic) allclose."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.requires_grad != b.requires_grad:
            return False
        a, b = a.detach(), b.detach()
        if torch.equal(a, b):
            return True
        if not (a.is_floating_point() or a.is_complex()):
            return False
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        if exact:
            return torch.equal(nan_a, nan_b) and torch.equal(a[~nan_a], b[~nan_b])
        return torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y, exact) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _run(fn) -> list:
    torch.manual_seed(0)
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - an uncaught exception is an observable too
        return ["uncaught", type(e).__name__, re.sub(r"0x[0-9a-fA-F]+", "0x?", str(e))]


@dataclass
class Outcome:
    eager: list
    compiled: list
    deterministic: bool
    identical: bool
    captures: int
    fallbacks: int
    fast_hits: int  # backwards of the second compiled run served by replay.py's fast path
    seconds: float


class _CountingMatches:
    """Counts the backwards replay.py's templates served (the fast way of a cache hit)."""

    def __init__(self):
        self.count = 0
        self._original = replay.Templates.find

    def __enter__(self):
        original = self._original

        def counting(*args, **kwargs):
            hit = original(*args, **kwargs)
            self.count += hit is not None
            return hit
        replay.Templates.find = counting
        return self

    def __exit__(self, *exc):
        replay.Templates.find = self._original


def run_case(name: str) -> Outcome:
    """Eager twice (is the case deterministic?), then compiled twice with one cache and the
    test's compiler: the first run captures, the second hits the cache (mostly through
    replay.py); both must equal eager (bitwise where the compiler runs the aten ops as they are)."""
    fn = CASES[name]
    exact = helpers.is_bitwise()
    start = time.perf_counter()
    eager = _run(fn)
    deterministic = _same(eager, _run(fn))
    compiled_autograd.reset()
    with compiled_autograd.enable(helpers.current_compiler()):
        compiled = _run(fn)
        counts = Counter(aotgrad.counters["compiled_autograd"])
        with _CountingMatches() as matches:
            again = _run(fn)
    compiled_autograd.reset()
    identical = _same(eager, compiled, exact) and _same(eager, again, exact)
    return Outcome(eager, compiled if not _same(eager, compiled, exact) else again, deterministic, identical,
                   counts["captures"], counts["eager_fallbacks"], matches.count, time.perf_counter() - start)


_outcomes: dict[tuple[str, str], Outcome] = {}


def outcome(name: str) -> Outcome:
    """The case's outcome under the test's compiler (each run once per session)."""
    key = (name, helpers.compiler_name())
    if key not in _outcomes:
        _outcomes[key] = run_case(name)
    return _outcomes[key]


def _known_different() -> dict[str, str]:
    if helpers.compiler_name() in ("aotgrad_inductor", "inductor"):
        return {**KNOWN_DIFFERENT, **KNOWN_DIFFERENT_UNDER_INDUCTOR}
    return KNOWN_DIFFERENT


def _problems(name: str, result: Outcome) -> list[str]:
    known = _known_different()
    problems = []
    if isinstance(result.eager, list) and result.eager[:1] == ["uncaught"]:
        problems.append(f"the case itself raises in eager: {result.eager[1:]}")
    if not result.deterministic:
        problems.append("two eager runs disagree: the case is not deterministic")
    if not result.identical and name not in known:
        problems.append(f"eager and compiled differ:\neager    {result.eager}\ncompiled {result.compiled}")
    if result.identical and name in known:
        problems.append("listed in KNOWN_DIFFERENT but now identical: remove it from the list")
    if result.fallbacks and name not in EAGER_BY_DESIGN:
        problems.append(f"ran on the eager engine ({result.fallbacks} fallbacks) without a reason to")
    return problems


@pytest.mark.one_compiler
def test_registry_is_large_enough():
    assert len(CASES) >= 160, len(CASES)
    assert set(KNOWN_DIFFERENT) <= set(CASES), set(KNOWN_DIFFERENT) - set(CASES)
    assert set(KNOWN_DIFFERENT_UNDER_INDUCTOR) <= set(CASES), set(KNOWN_DIFFERENT_UNDER_INDUCTOR) - set(CASES)
    assert REPRESENTATIVE <= set(CASES), REPRESENTATIVE - set(CASES)


# One or a few cases per feature; these run under all five compilers by default.
# (with the `all_compilers` tests of the other files: test_callout.py, hooks, callbacks, retain_grad,
# CopySlices, C++ Functions and symbolic sizes in test_engine/test_hooks/test_interplay/test_cache)
REPRESENTATIVE = {
    "broadcast_row_column", "promotion_float32_with_float64_leaves",              # ops, dtypes
    "inplace_on_chained_views",                                                   # CopySlices (run as is)
    "max_with_indices", "diamond", "two_roots_with_gradients",                    # outputs, paths, roots
    "backward_inputs_non_leaf", "grad_allow_unused",                              # inputs=, autograd.grad
    "second_backward_without_retain_graph_error", "retain_graph_second_backward_accumulates",
    "first_grad_is_stolen_second_added", "grad_of_transposed_leaf_keeps_strides",  # AccumulateGrad
    "several_hooks_chain_in_order", "hook_raising_propagates",                    # tensor hooks
    "node_prehook_and_post_hook_order_with_tensor_hook",                          # node hooks
    "queue_callback_runs_after_all_hooks",                                        # callbacks
    "function_non_tensor_outputs", "function_set_materialize_grads_false",
    "function_backward_returns_none_for_an_input", "function_broadcastable_grad_summed_by_engine",
    "function_grad_of_other_dtype_is_cast", "function_raising_in_backward", "function_backward_calls_autograd",
    "dtype_conversions_in_the_graph",                                             # custom Functions, dtypes
    "gru_cell",                                                                   # modules
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.all_compilers) if name in REPRESENTATIVE
                                  else name for name in sorted(CASES)])
def test_behaves_as_eager(name):
    problems = _problems(name, outcome(name))
    assert not problems, "\n".join(problems)


def test_summary(capsys):
    results = {name: outcome(name) for name in CASES}
    seconds = sum(r.seconds for r in results.values())
    identical = [n for n, r in results.items() if r.identical]
    captured = [n for n, r in results.items() if r.captures and not r.fallbacks]
    eager = [n for n, r in results.items() if r.fallbacks and not r.captures]
    mixed = [n for n, r in results.items() if r.fallbacks and r.captures]
    neither = [n for n, r in results.items() if not r.fallbacks and not r.captures]
    fast = [n for n, r in results.items() if r.fast_hits]
    with capsys.disabled():
        print(f"\n{len(identical)} of {len(CASES)} autograd behaviours behave identically under compiled autograd "
              f"with the {helpers.compiler_name()} compiler "
              f"({len(captured)} captured, {len(eager)} ran eagerly, {len(mixed)} both, "
              f"{len(neither)} raised before any capture; {len(fast)} hit the cache the fast way when run again; "
              f"{seconds:.1f} s for eager twice and compiled twice)")
        for name in sorted(set(CASES) - set(identical)):
            print(f"  different: {name}: {_known_different().get(name, 'NOT IN KNOWN_DIFFERENT')}")
        for name in sorted(eager + mixed):
            print(f"  eager engine: {name}: {EAGER_BY_DESIGN.get(name, 'NO REASON GIVEN')}")
    problems = {name: p for name in CASES if (p := _problems(name, results[name]))}
    assert not problems, "\n".join(f"{n}: {'; '.join(p)}" for n, p in problems.items())
