"""The partitioners' cost model: what saving a value costs, what recomputing an op costs.

In: a node of a joint graph (its `meta["val"]` fake value; symbolic sizes count at their
hints). Out: `value_bytes(node)` (device bytes held if the forward saves it) and
`recompute_cost(node)` (work to run it again in the backward, in bytes moved), plus
`never_recompute(node)`. One table, by kind of op (`_FLOPS`, `_WRITES_ONLY`, `_GATHERS`):

| node                                              | value_bytes        | recompute_cost                            |
| ------------------------------------------------- | ------------------ | ----------------------------------------- |
| parameter, input the backward reads anyway [0]    | 0: caller holds it | never recomputed (an input)               |
| get_attr                                          | 0: module holds it | never recomputed                          |
| other primal [0]                                  | bytes              | never recomputed (an input)               |
| view, alias, getitem of a view op                 | 0: base holds it   | 0 (replayed on the base)                  |
| getitem of a multi-output op                      | bytes              | 0 (its op is what runs)                   |
| size (SymInt, SymFloat, SymBool)                  | 0: a Python int    | never recomputed [1]                      |
| random (Tag.nondeterministic_seeded), side effect | bytes              | never recomputed [2]                      |
| data-dependent size (nonzero, unique, ...)        | bytes              | never recomputed                          |
| mm bmm addmm baddbmm matmul mv addmv dot          | bytes              | max(2 numel(out) K / F, moved)            |
| convolution, _convolution [3]                     | bytes              | max(2 numel(out) Cin/g kh kw / F, moved)  |
| attention [4]                                     | bytes              | max(2 rows(q) S (E + Ev) / F, moved)      |
| empty, zeros, ones, full, arange, iota, *_like    | bytes              | bytes written                             |
| embedding, index, gather, index_select            | bytes              | 2 x bytes written (rows read, written)    |
| any other op (pointwise, reductions, copies, ...) | bytes              | moved = bytes read + bytes written        |

F = FLOPS_PER_BYTE; K = contraction length; bytes = the value's bytes (graphs.tensor_bytes).
[0] `free_to_keep`: a parameter (a leaf that requires grad: the caller holds it for its
    .grad, and eager refuses to write into it in place while it is recorded) or an input an
    op outside the forward reads (a weight for its grad's matmul, x for sin's cos(x)), which
    eager's autograd saves too. Keeping another input alive for the backward costs memory
    eager does not spend, and if the caller writes into it (say through an output that is
    that input) before the backward, autograd's version check fails where eager, which saved
    what it computed from it, does not.
[1] the backward binds its symbols from saved sizes (graphs.with_bare_symbols).
[2] a second run would draw other numbers or repeat the effect. The attention kernels and
    native_dropout are tagged random for their dropout: with dropout 0 they may run again.
[3] transposed: numel(input) instead of numel(out).
[4] _scaled_dot_product_flash_attention(_for_cpu), _scaled_dot_product_efficient_attention,
    _scaled_dot_product_cudnn_attention, _scaled_dot_product_attention_math,
    scaled_dot_product_attention (rows(q) = numel(q)/E, S keys at dim -2), and
    _flash_attention_forward, _efficient_attention_forward (keys at dim 1). The math
    decomposition (bmm, softmax, bmm) is costed op by op by the rows above.

Costs are in bytes so that they compare with saved bytes: a compute-bound op's time is its
FLOPs over the machine's FLOP rate, a memory-bound op's its bytes over the bandwidth, and
FLOPS_PER_BYTE (rate / bandwidth) turns FLOPs into the bytes that take as long to move.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from aotgrad.partition.graphs import size_hint, tensor_bytes

aten = torch.ops.aten

# FLOPs a device does in the time it moves one byte (its ridge point): an H100 does
# ~990 TFLOP/s of bf16 matmul against 3.35 TB/s; a CPU in float32 is nearer 10.
FLOPS_PER_BYTE = 100

_SIZE_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


# -- FLOPs of compute-bound ops -----------------------------------------------------------

def _numel(val) -> int:
    return math.prod(size_hint(d) for d in val.shape)


def _val(arg):
    return arg.meta.get("val") if isinstance(arg, fx.Node) else arg


def _matmul_flops(operand: int):
    """2 * numel(out) * K, K the contraction length: the last dim of args[operand]."""
    def flops(node: fx.Node) -> int:
        a = _val(node.args[operand])
        return 2 * _numel(node.meta["val"]) * size_hint(a.shape[-1])
    return flops


def _convolution_flops(node: fx.Node) -> int:
    """2 * (outputs, or inputs if transposed) * weight numel per output channel."""
    x, weight = _val(node.args[0]), _val(node.args[1])
    transposed = len(node.args) > 6 and bool(node.args[6])
    per_channel = _numel(weight) // max(size_hint(weight.shape[0]), 1)
    return 2 * _numel(x if transposed else node.meta["val"]) * per_channel


def _attention_flops(key_dim: int):
    """Q @ K^T and P @ V: 2 * rows(q) * S * (E + Ev); the keys' length S sits at `key_dim`
    ([B, H, S, E] for the sdpa ops, [B, S, H, E] for the _forward kernels)."""
    def flops(node: fx.Node) -> int:
        q, k, v = (_val(a) for a in node.args[:3])
        e, ev = size_hint(q.shape[-1]), size_hint(v.shape[-1])
        rows = _numel(q) // max(e, 1)
        return 2 * rows * size_hint(k.shape[key_dim]) * (e + ev)
    return flops


_FLOPS = {
    aten.mm: _matmul_flops(0), aten.bmm: _matmul_flops(0), aten.matmul: _matmul_flops(0),
    aten.mv: _matmul_flops(0), aten.dot: _matmul_flops(0),
    aten.addmm: _matmul_flops(1), aten.baddbmm: _matmul_flops(1), aten.addmv: _matmul_flops(1),
    aten.convolution: _convolution_flops, aten._convolution: _convolution_flops,
    aten.scaled_dot_product_attention: _attention_flops(-2),
    aten._scaled_dot_product_attention_math: _attention_flops(-2),
    aten._scaled_dot_product_flash_attention: _attention_flops(-2),
    aten._scaled_dot_product_flash_attention_for_cpu: _attention_flops(-2),
    aten._scaled_dot_product_efficient_attention: _attention_flops(-2),
    aten._scaled_dot_product_cudnn_attention: _attention_flops(-2),
    aten._flash_attention_forward: _attention_flops(1),
    aten._efficient_attention_forward: _attention_flops(1),
}

# Ops tagged random only for their dropout: with this argument 0 they are deterministic.
_RANDOM_ONLY_IF_NONZERO = {
    aten.native_dropout: "p", aten.scaled_dot_product_attention: "dropout_p",
    aten._scaled_dot_product_attention_math: "dropout_p",
    aten._scaled_dot_product_flash_attention: "dropout_p",
    aten._scaled_dot_product_flash_attention_for_cpu: "dropout_p",
    aten._scaled_dot_product_efficient_attention: "dropout_p",
    aten._scaled_dot_product_cudnn_attention: "dropout_p",
    aten._flash_attention_forward: "dropout_p", aten._efficient_attention_forward: "dropout_p",
}

# Ops that write their output without reading their inputs' data.
_WRITES_ONLY = {
    aten.empty_like, aten.zeros_like, aten.ones_like, aten.full_like, aten.empty, aten.zeros,
    aten.ones, aten.full, aten.scalar_tensor, aten.arange, aten.new_empty, aten.new_zeros,
    aten.new_ones, aten.new_full, aten.empty_strided, aten.new_empty_strided,
}
# Ops that read only the rows they write (reading the whole table would overcharge them).
_GATHERS = {aten.embedding, aten.index, aten.gather, aten.index_select}
# Gathers the default cut saves rather than runs twice, as PyTorch's partitioner does. An
# embedding's output feeds several readers (the first norm, each residual add): not saved,
# Inductor repeats the lookup inside each of them, and its CPU kernels split differently
# (bert, distilbert: one more backward kernel; phi, opt, t5: one or two more forward kernels,
# each about a second of a cold compile). Saving it costs one activation.
_SAVED_GATHERS = {aten.embedding}


# -- the model --------------------------------------------------------------------------

def is_view(node: fx.Node) -> bool:
    """Does this value share its storage with its first argument (views, `_unsafe_view`,
    `alias`, and a getitem of a view op such as `split`)?"""
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        return isinstance(node.args[0], fx.Node) and is_view(node.args[0])
    return getattr(target, "is_view", False) or target in (aten._unsafe_view.default, aten.alias.default)


def storage_root(node: fx.Node) -> fx.Node:
    """The node owning a value's storage: the base of a chain of views."""
    while is_view(node) and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def is_size(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), _SIZE_TYPES)


def value_bytes(node: fx.Node) -> int:
    """Device bytes the forward holds until the backward if it saves `node`.

    Module attributes are held by the module, a view by its base, a size is a Python int:
    all free. An input costs its bytes here; a partitioner counts those `free_to_keep` as 0.
    A multi-output op's tuple holds nothing itself (its getitems do). A data-dependent size
    counts as graphs.UNKNOWN_NUMEL.
    """
    val = node.meta.get("val")
    if node.op == "get_attr" or is_view(node) or is_size(node) or not isinstance(val, torch.Tensor):
        return 0
    return tensor_bytes(val)


def free_to_keep(primal: fx.Node, forward_nodes: set) -> bool:
    """Is keeping this input for the backward free: a parameter (a leaf that requires grad),
    or an input that an op the forward outputs do not need (a backward op) reads anyway?

        mm(x, w) -> grads t(x) @ g, g @ t(w): x and w are read anyway
        where(x > 0, x, x) with x = l * 1 -> grad where(gt, g, 0): x is not (gt is saved)
    """
    val = primal.meta.get("val")
    if isinstance(val, torch.Tensor) and val.requires_grad and val.is_leaf:
        return True
    return any(user.op != "output" and user not in forward_nodes for user in primal.users)


def never_recompute(node: fx.Node) -> bool:
    """Nodes that run exactly once, in the forward: inputs, sizes, random ops (a second
    run would draw other numbers), ops with side effects (the effect would repeat) and ops
    whose output size depends on data (nonzero: a second run would bind a new size)."""
    if node.op != "call_function":
        return True
    if is_size(node) or _binds_new_size(node):
        return True
    if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
        return not _dropout_is_zero(node)
    return node.target is not operator.getitem and node.is_impure()


def _binds_new_size(node: fx.Node) -> bool:
    """Does the value have a data-dependent size its inputs do not have?"""
    made = free_unbacked_symbols(node.meta.get("val"))
    return bool(made) and bool(made - free_unbacked_symbols([a.meta.get("val") for a in node.all_input_nodes]))


def _dropout_is_zero(node: fx.Node) -> bool:
    """Attention kernels and native_dropout are tagged random for their dropout, which a
    dropout probability of 0 turns off."""
    name = _RANDOM_ONLY_IF_NONZERO.get(getattr(node.target, "overloadpacket", None))
    if name is None:
        return False
    schema = node.target._schema
    position = next(i for i, a in enumerate(schema.arguments) if a.name == name)
    if name in node.kwargs:
        value = node.kwargs[name]
    elif position < len(node.args):
        value = node.args[position]
    else:
        value = schema.arguments[position].default_value
    return isinstance(value, (int, float)) and value == 0


def recompute_cost(node: fx.Node) -> int:
    """Bytes-equivalent work to run `node` again (see the table); 0 for views and getitems.

    before: mm(a: f32[64, 32], b: f32[32, 16])   after: max(2*64*16*32 / 100, 4*(2048+512+1024)) = 14336
    """
    assert not never_recompute(node), f"{node.format_node()} is never recomputed"
    if is_view(node) or node.target is operator.getitem:
        return 0
    packet = getattr(node.target, "overloadpacket", None)
    written = _bytes_of(node.meta.get("val"))
    if writes_only(node):
        return written
    if packet in _GATHERS:
        return 2 * written
    moved = written + sum(_bytes_of(_val(a)) for a in pytree.tree_leaves((node.args, node.kwargs)))
    if packet in _FLOPS:
        return max(-(-_FLOPS[packet](node) // FLOPS_PER_BYTE), moved)
    return moved


def _bytes_of(val) -> int:
    return sum(tensor_bytes(v) for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor))


def is_compute_bound(node: fx.Node) -> bool:
    """Matmuls, convolutions and attention (the ops priced by FLOPs)."""
    return node.op == "call_function" and getattr(node.target, "overloadpacket", None) in _FLOPS


def kept_from_rerun(node: fx.Node) -> bool:
    """Ops the default (budget 1.0) cut never runs twice; a memory budget below 1.0 may.
    Recomputing is only nearly free for what a fusing compiler folds into the loop that reads
    it: pointwise ops, views, constructors and gathers, and reductions that keep at least a
    quarter of what they read. Kept from a second run, as PyTorch's partitioner keeps them:
    compute-bound ops; reductions to under a quarter (a norm's statistics: small to save, a
    pass over the input and a kernel of their own to recompute); embedding lookups
    (_SAVED_GATHERS); and every other op (scans such as cumsum, sorts, cat, padding, the norms'
    composite kernels).

        var_mean(x: f32[8, 64, 64]) -> kept: its outputs are 2 x f32[8, 64, 1]
        sum(x: f32[8, 64], dim=0, keepdim) -> kept;  relu(x), x.view(...), x[idx] -> may run again
    """
    if node.op != "call_function" or is_view(node) or node.target is operator.getitem:
        return False
    if getattr(node.target, "overloadpacket", None) in _SAVED_GATHERS:
        return True
    if _is_loop(node):
        return False
    if torch.Tag.reduction in getattr(node.target, "tags", ()):
        read = sum(_bytes_of(_val(a)) for a in node.all_input_nodes)
        return 4 * _bytes_of(node.meta.get("val")) < read
    return True


def fuses_inputs(node: fx.Node) -> bool:
    """Does a fusing compiler fold the ops making this node's inputs into its own loop?
    Pointwise ops, constructors, gathers, reductions, views and getitems do (and `cat`, which
    writes each input into place); matmuls, convolutions, attention, scans and the other
    library kernels read their inputs from memory."""
    if node.op != "call_function":
        return False
    if is_view(node) or node.target is operator.getitem or _is_loop(node):
        return True
    return torch.Tag.reduction in getattr(node.target, "tags", ()) or node.target is aten.cat.default


def writes_only(node: fx.Node) -> bool:
    """Constructors (empty, zeros, full, arange, ...): they write without reading."""
    return getattr(node.target, "overloadpacket", None) in _WRITES_ONLY or node.target is torch.ops.prims.iota.default


def _is_loop(node: fx.Node) -> bool:
    """Pointwise ops, constructors and gathers: one loop over the output, fused freely."""
    packet = getattr(node.target, "overloadpacket", None)
    return (torch.Tag.pointwise in getattr(node.target, "tags", ()) or writes_only(node) or packet in _GATHERS
            or packet is aten._to_copy)
