"""OpInfo tests: a representative subset of PyTorch's op_db through aotgrad.testing.aot_autograd_check.

In: OpInfo ids (op.name, plus ".variant" when the OpInfo has one), CPU, float32, the first
SAMPLES sample inputs of each. Out: pass when aotgrad's outputs and gradients (of sum(|out|))
equal eager's, compared as PyTorch's own OpInfo AOTAutograd test does: assert_close with
equal_nan=True; ops with supports_autograd=False forward only.

Ops are chosen across families (pointwise, reductions, views, indexing, matmul, conv/pool,
norms, losses, softmax, cat/split, masked, cumulative, linalg, fft, factories). Failures are
not dropped (benchmarks/opinfo_sweep.py runs each op through aotgrad and through PyTorch's
AOTAutograd side by side):
  * DATA_DEPENDENT: PyTorch's AOTAutograd fails too (the output or its shape depends on tensor
    values); the test asserts aotgrad raises a RuntimeError, never a wrong value.
  * XFAIL: PyTorch's AOTAutograd passes and aotgrad does not; strict xfail with the error.
The full sweep over all of op_db is in docs/opinfo_sweep.md.
"""
from __future__ import annotations

import functools
import re

import pytest
import torch

from aotgrad.testing import aot_autograd_check
from tests import torch_features

pytestmark = pytest.mark.filterwarnings("ignore")

SAMPLES = 2

OPS = [
    # pointwise unary
    "abs", "acos", "asin", "atan", "asinh", "ceil", "cos", "cosh", "exp", "exp2", "expm1", "floor",
    "frac", "log", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sgn",
    "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "erf", "erfinv", "lgamma", "digamma",
    "nan_to_num", "logit", "deg2rad", "special.i0e", "positive", "isnan", "isfinite", "signbit",
    # pointwise binary / ternary
    "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "true_divide", "atan2", "pow",
    "float_power", "fmod", "remainder", "maximum", "minimum", "fmax", "hypot", "xlogy", "copysign",
    "lerp", "addcmul", "addcdiv", "clamp", "clamp_min", "logaddexp", "rsub", "__rpow__", "__rsub__",
    "eq", "ne", "lt", "ge", "isclose", "logical_and", "heaviside",
    # reductions
    "sum", "mean", "prod", "amax", "amin", "max.reduction_with_dim", "max.reduction_no_dim",
    "min.reduction_with_dim", "std", "var", "var_mean", "std_mean", "logsumexp", "nansum", "nanmean",
    "argmax", "argmin", "all", "any", "count_nonzero", "median", "mode", "kthvalue", "topk", "sort",
    "argsort", "aminmax", "norm.fro", "norm.inf",
    # views / reshapes
    "view", "reshape", "reshape_as", "view_as", "permute", "transpose", "t", "T", "mT", "squeeze",
    "unsqueeze", "flatten", "unflatten", "expand", "expand_as", "broadcast_to", "select", "slice",
    "diagonal", "as_strided", "movedim", "unfold", "contiguous", "clone", "flip", "roll", "rot90",
    "repeat", "tile", "ravel", "chunk", "split", "split_with_sizes", "unbind", "atleast_2d", "diag",
    "diag_embed", "tril", "triu", "trace", "narrow", "tensor_split",
    # indexing / scatter / gather
    "gather", "scatter", "scatter_add", "scatter_reduce.sum", "scatter_reduce.amax", "index_select",
    "index_add", "index_copy", "index_fill", "index_put", "__getitem__", "take", "take_along_dim",
    "put", "masked_fill", "masked_scatter", "masked_select", "nonzero", "item", "unique",
    "diagonal_scatter", "select_scatter", "slice_scatter", "_unsafe_masked_index",
    # matmul family
    "mm", "bmm", "matmul", "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "outer", "einsum",
    "tensordot", "kron", "inner", "linalg.multi_dot", "nn.functional.linear", "nn.functional.bilinear",
    # conv / pool / resampling
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv_transpose2d",
    "nn.functional.avg_pool2d", "nn.functional.max_pool1d", "nn.functional.max_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.adaptive_max_pool2d", "nn.functional.unfold",
    "nn.functional.pad.constant", "nn.functional.pad.reflect", "nn.functional.interpolate.bilinear",
    "nn.functional.interpolate.nearest", "nn.functional.pixel_shuffle", "nn.functional.grid_sample",
    # norms
    "native_layer_norm", "nn.functional.layer_norm", "nn.functional.group_norm",
    "nn.functional.batch_norm", "nn.functional.instance_norm", "nn.functional.rms_norm",
    "nn.functional.local_response_norm", "nn.functional.normalize",
    # losses
    "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
    "nn.functional.l1_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    "nn.functional.binary_cross_entropy", "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.kl_div", "nn.functional.margin_ranking_loss", "nn.functional.cosine_embedding_loss",
    "nn.functional.triplet_margin_loss", "nn.functional.poisson_nll_loss",
    "nn.functional.soft_margin_loss", "nn.functional.gaussian_nll_loss",
    # activations
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.elu",
    "nn.functional.leaky_relu", "nn.functional.hardtanh", "nn.functional.softplus",
    "nn.functional.mish", "nn.functional.hardswish", "nn.functional.glu", "nn.functional.prelu",
    "nn.functional.logsigmoid", "nn.functional.rrelu", "nn.functional.dropout",
    # softmax family / attention / embedding
    "softmax", "log_softmax", "nn.functional.softmin", "masked.softmax", "_softmax_backward_data",
    "nn.functional.scaled_dot_product_attention", "nn.functional.embedding",
    # cat / stack / split
    "cat", "stack", "hstack", "vstack", "dstack", "column_stack", "block_diag",
    "meshgrid.list_of_tensors",
    # where / masked
    "where", "masked.sum", "masked.mean", "masked.amax",
    # cumulative
    "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "diff", "cumulative_trapezoid",
    # linalg
    "linalg.det", "linalg.inv", "linalg.solve", "linalg.cholesky", "linalg.qr", "linalg.slogdet",
    "linalg.vector_norm", "linalg.norm", "linalg.matrix_norm", "linalg.svd", "linalg.eigh",
    "linalg.pinv", "linalg.cross", "linalg.solve_triangular", "triangular_solve", "cholesky_solve",
    "linalg.lu_factor", "logdet", "linalg.matrix_power", "cdist", "dist",
    # fft
    "fft.fft", "fft.rfft", "fft.irfft", "fft.ifft",
    # complex views
    "view_as_complex",
    # factories / conversions / in-place / misc
    "zeros_like", "ones_like", "full_like", "new_zeros", "randn_like", "arange", "linspace", "to",
    "double", "fill", "zero_", "resize_", "bucketize", "searchsorted", "histc", "stft",
]

# PyTorch's AOTAutograd fails these too: the result (or its shape) depends on tensor values.
# aotgrad must raise a RuntimeError (a TraceError naming the op), never return a wrong value.
# Some ops fail only on some samples, so these run up to DATA_DEPENDENT_SAMPLES samples.
NEEDS_VALUES = "needs real tensor values"
DATA_DEPENDENT = {
    "item": NEEDS_VALUES,                 # aten._local_scalar_dense
    "nonzero": NEEDS_VALUES,
    "masked_select": NEEDS_VALUES,
    "unique": NEEDS_VALUES,               # aten._unique2
    "narrow": NEEDS_VALUES,               # a tensor `start` is read with .item()
    "index_put": NEEDS_VALUES,            # bool-mask index: nonzero in the backward
    "index_fill": NEEDS_VALUES,           # aten._unique in the backward
    "nn.functional.gaussian_nll_loss": NEEDS_VALUES,  # a data-dependent check on var
    "tensor_split": NEEDS_VALUES,         # tensor indices read in C++ ("reads the values of a tensor")
}
DATA_DEPENDENT_SAMPLES = 3

# PyTorch's AOTAutograd passes these; aotgrad does not (found by benchmarks/opinfo_sweep.py).
XFAIL = {
}
# Samples needed to reach the failing one (the first samples pass).
XFAIL_SAMPLES = {"linalg.norm": 3, "nn.functional.normalize": 3}


def assert_equals(actual, expected, msg=None):
    """assert_close(equal_nan=True); on failure the check's message, then assert_close's."""
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    except AssertionError as e:
        raise AssertionError(f"{msg}\n{e}" if msg else str(e)) from None


@functools.lru_cache(maxsize=None)
def _op_db():
    from torch.testing._internal.common_methods_invocations import op_db
    return {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}


def _uses_autograd(op) -> bool:
    return bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes("cpu")


def _samples(op, n: int):
    grad = _uses_autograd(op)
    torch.manual_seed(0)
    for i, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=grad)):
        if i >= n:
            return
        yield sample


def _check(op, sample) -> None:
    aot_autograd_check(op.op, [sample.input, *sample.args], sample.kwargs, dynamic=False,
                       check_gradients=_uses_autograd(op), assert_equals_fn=assert_equals)


def _check_pytorch_passes(op, n: int) -> None:
    """PyTorch's AOTAutograd (the reference) on the same samples; raises as it fails."""
    from torch.testing._internal.optests import aot_autograd_check as pytorch_check

    for sample in _samples(op, n):
        try:
            pytorch_check(op.op, [sample.input, *sample.args], sample.kwargs, dynamic=False,
                          check_gradients=_uses_autograd(op), assert_equals_fn=assert_equals)
        except RuntimeError as e:
            raise AssertionError(f"{op.name}: PyTorch's AOTAutograd rejects a sample ({e}) that aotgrad "
                                 "compiled: expected aotgrad to reject it too") from e


def _xfail_raises(reason: str) -> type:
    """The exception the reason names: a different failure is a real failure, not the xfail."""
    kind = reason.split(":")[1].strip()
    return {"AssertionError": AssertionError, "UnsupportedError": RuntimeError, "IndexError": IndexError}[kind]


def _params():
    for name in OPS:
        marks = []
        if name in XFAIL:
            marks.append(pytest.mark.xfail(strict=True, reason=XFAIL[name], raises=_xfail_raises(XFAIL[name])))
        yield pytest.param(name, id=name, marks=marks)


def test_op_list_is_representative_and_known():
    assert len(OPS) >= 150
    assert len(set(OPS)) == len(OPS), "duplicate op ids"
    unknown = [name for name in OPS if name not in _op_db()]
    assert not unknown, f"not in op_db: {unknown}"
    assert not (set(DATA_DEPENDENT) | set(XFAIL)) - set(OPS)
    assert not set(DATA_DEPENDENT) & set(XFAIL)
    for name in OPS:
        assert torch.float32 in _op_db()[name].supported_dtypes("cpu"), name


@pytest.mark.parametrize("name", list(_params()))
def test_opinfo(name):
    op = _op_db()[name]
    if name in DATA_DEPENDENT:
        raised = []
        for sample in _samples(op, DATA_DEPENDENT_SAMPLES):
            try:
                _check(op, sample)  # a sample without data-dependence may pass; AssertionError fails
            except RuntimeError as e:
                assert re.search(DATA_DEPENDENT[name], str(e)), f"unclear error: {e}"
                raised.append(e)
        if not raised:
            # Whether an op needs values can change between torch releases (2.11's index_fill
            # backward has no aten._unique): then PyTorch's AOTAutograd must pass them too
            _check_pytorch_passes(op, DATA_DEPENDENT_SAMPLES)
        return
    ran = 0
    for sample in _samples(op, XFAIL_SAMPLES.get(name, SAMPLES)):
        _check(op, sample)
        ran += 1
    assert ran, f"{name}: no sample inputs"


# -- dynamic=True: symbolic sizes (issue 4) ----------------------------------------------
# A subset across families, including ops whose C++ composite kernels want int sizes (run
# through PyTorch's Python kernels) and data-dependent ones (unbacked symbols read at run
# time), which PyTorch's AOTAutograd passes in its dynamic mode. The full sweep is
# `python benchmarks/opinfo_sweep.py --dynamic` (docs/opinfo_sweep_dynamic.md).
DYNAMIC_OPS = [
    "add", "mul", "div.no_rounding_mode", "pow", "where", "clamp", "addcmul", "lerp", "sigmoid", "exp",
    "sum", "mean", "amax", "var", "logsumexp", "max.reduction_with_dim", "cumsum", "sort", "topk",
    "view", "reshape", "permute", "transpose", "expand", "select", "slice", "as_strided", "unfold",
    "chunk", "split", "flatten", "squeeze", "unsqueeze", "diag", "diagonal", "trace", "narrow",
    "gather", "scatter_add", "index_select", "index_put", "masked_fill", "nonzero", "masked_select", "item",
    "mm", "bmm", "matmul", "addmm", "baddbmm", "einsum", "nn.functional.linear",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.pad.constant", "nn.functional.interpolate.bilinear",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.group_norm",
    "nn.functional.cross_entropy", "nn.functional.mse_loss", "softmax", "log_softmax",
    "nn.functional.scaled_dot_product_attention", "nn.functional.embedding", "nn.functional.gelu",
    "nn.functional.softshrink", "cat", "stack", "fft.rfft", "linalg.cholesky", "linalg.solve", "unsafe_split",
    "linalg.householder_product",
]


def test_dynamic_op_list_is_known():
    assert len(set(DYNAMIC_OPS)) == len(DYNAMIC_OPS)
    assert not [name for name in DYNAMIC_OPS if name not in _op_db()]


def _dynamic_params():
    for name in DYNAMIC_OPS:
        marks = []
        if name == "trace" and not torch_features.trace_backward_takes_symbolic_sizes():
            marks.append(pytest.mark.skip(reason=torch_features.TRACE_BACKWARD_REASON))
        yield pytest.param(name, id=name, marks=marks)


@pytest.mark.parametrize("name", list(_dynamic_params()))
def test_opinfo_dynamic(name):
    op = _op_db()[name]
    ran = 0
    for sample in _samples(op, SAMPLES):
        aot_autograd_check(op.op, [sample.input, *sample.args], sample.kwargs, dynamic=True,
                           check_gradients=_uses_autograd(op), assert_equals_fn=assert_equals)
        ran += 1
    assert ran, f"{name}: no sample inputs"



# -- the min-cut partitioner at its most aggressive (issue 5) ---------------------------
# Every other test here runs min-cut at budget 1.0. These run it bounded to the fewest bytes
# any partition of the op's graph can save (the far end of the trade-off hull), so every
# deterministic op the backward reads is recomputed there instead of saved.
BUDGET_OPS = [
    "sin", "exp", "sigmoid", "tanh", "pow", "div.no_rounding_mode", "addcmul", "lerp", "clamp", "where",
    "sum", "mean", "logsumexp", "std", "amax", "softmax", "log_softmax", "nn.functional.layer_norm",
    "mm", "addmm", "matmul", "bmm", "einsum", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.dropout", "nn.functional.cross_entropy",
    "cumsum", "gather", "index_select", "cat", "expand", "transpose", "unfold",
]


def _fewest_bytes_min_cut(joint_gm, joint_inputs, *, num_fwd_outputs):
    from aotgrad import config
    from aotgrad.partition import min_cut_rematerialization_partition, tradeoff_hull

    hull = tradeoff_hull(joint_gm, num_fwd_outputs)
    before = config.activation_memory_budget_bytes
    config.activation_memory_budget_bytes = min(b for b, _ in hull) if hull else None
    try:
        return min_cut_rematerialization_partition(joint_gm, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                                   memory_budget=1.0)
    finally:
        config.activation_memory_budget_bytes = before


@pytest.mark.parametrize("name", BUDGET_OPS)
def test_opinfo_min_cut_at_fewest_bytes(name):
    op = _op_db()[name]
    ran = 0
    for sample in _samples(op, SAMPLES):
        aot_autograd_check(op.op, [sample.input, *sample.args], sample.kwargs, check_gradients=_uses_autograd(op),
                           assert_equals_fn=assert_equals, partition_fn=_fewest_bytes_min_cut)
        ran += 1
    assert ran, f"{name}: no sample inputs"
