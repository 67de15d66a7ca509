"""What each input and output of a traced forward is.

In: the fake primal values before and after the forward ran, and the forward's
flat outputs. Out: `InputInfo` per input (mutated data or metadata, seen by
autograd or not, requires grad) and `OutputInfo` per user output (fresh, the
input itself, a view of an input, a view of another output, a constant), plus
the list of tensors the forward graph must return (`forward_outputs`).

These facts come from the fake tensors themselves (object identity, storage
identity, version counters, `grad_fn`), so they need no functionalized graph.
"""
from __future__ import annotations

import dataclasses
import enum
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad.errors import UnsupportedError
from aotgrad.trace.fake import shares_version_counter


@dataclass(frozen=True)
class InputState:
    """A primal's state before the forward ran, to compare with after."""

    version: int
    grad_fn: Any
    size: tuple
    stride: tuple
    storage_offset: int
    requires_grad: bool
    storage_nbytes: Any = 0

    @staticmethod
    def of(t: torch.Tensor) -> "InputState":
        return InputState(t._version, t.grad_fn, tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad,
                          t.untyped_storage().nbytes())


@dataclass(frozen=True)
class InputInfo:
    index: int
    requires_grad: bool
    is_leaf: bool
    mutates_data: bool
    mutates_metadata: bool  # sizes, strides, storage offset or requires_grad changed in place
    mutation_visible_to_autograd: bool  # False for mutations done under no_grad
    # eager bumps the input's version counter (not when written only through `.data`
    # or by BatchNorm's running-stat update)
    bumps_version: bool = True
    # the in-place metadata ops the forward applied to the input (`t_`, `unsqueeze_`,
    # `as_strided_`, `resize_`), in order; the runtime replays them on the caller's tensor
    metadata_steps: tuple = ()
    # how its autograd state changed in place: "detach_before_write" (a detach_, then a write
    # that gave it a history), "detach" (ends detached: `detach_()`, `requires_grad_(False)`),
    # "requires_grad" (`requires_grad_()` on an input that did not require grad), or None
    autograd_change: str | None = None
    # a `resize_` grew its storage: the new value is written back after the metadata replay,
    # in the input's final geometry (its original one misses the new elements)
    grows_storage: bool = False


class OutputKind(enum.Enum):
    FRESH = "fresh"                      # returned by the compiled forward
    INPUT = "input"                      # the input object itself
    ALIAS_OF_INPUT = "alias_of_input"    # a view of an input, rebuilt from the real input
    ALIAS_OF_OUTPUT = "alias_of_output"  # a view of a forward output (or intermediate base)
    SAME_AS_OUTPUT = "same_as_output"    # the same tensor object as an earlier output
    CONSTANT = "constant"                # not a tensor


@dataclass(frozen=True)
class ViewStep:
    """One recorded view op, replayed on a real tensor: op(t, *args, **kwargs)."""

    op: Callable
    args: tuple
    kwargs: tuple = ()  # (name, value) pairs
    grad_enabled: bool = True  # the grad mode it ran in: a view made under no_grad cuts the graph
    inference_mode: bool = False  # made under inference_mode (a view autograd treats apart again)

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if self.inference_mode:
            with torch.inference_mode():
                return self.op(t, *self.args, **dict(self.kwargs))
        if self.grad_enabled or not torch.is_grad_enabled():
            return self.op(t, *self.args, **dict(self.kwargs))
        with torch.no_grad():
            return self.op(t, *self.args, **dict(self.kwargs))

    def __repr__(self) -> str:
        name = "getitem" if self.op is operator.getitem else str(self.op)
        args = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{name}({', '.join(['_', *args])})"


@dataclass(frozen=True)
class OutputInfo:
    kind: OutputKind
    index: int | None = None  # input index, forward-output index or user-output index, by kind
    size: tuple = ()
    stride: tuple = ()
    storage_offset: int = 0  # relative to the base's own storage offset for ALIAS_OF_OUTPUT
    requires_grad: bool = False
    value: Any = None  # CONSTANT only
    # ALIAS_OF_*: the view ops that made the output from its base, replayed at run time so
    # the rebuilt view has eager's dtype, conj/neg bits and grad_fn. None: rebuild with
    # as_strided (same elements, same dtype; only when the chain could not be recovered).
    replay: tuple[ViewStep, ...] | None = None
    # ALIAS_OF_*: eager's output has a version counter of its own (`x.data`): a write
    # through it bumps no version of its base, so the rebuilt alias gets one too
    own_version_counter: bool = False
    # ALIAS_OF_*: eager's output has an autograd history its base does not give it (a write
    # from a tensor requiring grad into `x.data`, or the base detached in place after the
    # view was taken): the forward output that carries it, attached to the rebuilt alias
    history: int | None = None


@dataclass
class ForwardAnalysis:
    inputs: list[InputInfo]
    outputs: list[OutputInfo]
    forward_outputs: list[torch.Tensor] = field(default_factory=list)  # fresh outputs, then bases
    num_fresh_user_outputs: int = 0
    forward_output_strides: list[tuple] = field(default_factory=list)
    # forward outputs made leaves requiring grad inside the function (`nn.Parameter(...)`,
    # `t.requires_grad_()`): returned as leaves, as in eager, not as outputs of the Function
    leaf_outputs: list[int] = field(default_factory=list)
    # dynamic shapes: data-dependent symbols the epilogue needs, each returned by the forward
    # as a 0-d tensor (symbol -> forward output index)
    symbol_outputs: dict = field(default_factory=dict)

    @property
    def mutated_inputs(self) -> list[InputInfo]:
        return [i for i in self.inputs if i.mutates_data]


def overlaps_itself(t: torch.Tensor) -> bool:
    """Do two elements of t share one memory location? (exact for the usual layouts: sorting
    dims by stride, each stride must reach past everything the smaller dims span)."""
    dims = sorted((d for d in range(t.dim()) if t.shape[d] > 1), key=lambda d: abs(t.stride(d)))
    extent = 1
    for d in dims:
        if abs(t.stride(d)) < extent:
            return True
        extent += abs(t.stride(d)) * (t.shape[d] - 1)
    return False


def is_dense_layout(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Do these strides describe a dense, non-overlapping layout (a permutation of contiguous)?
    As eager's `aten.is_non_overlapping_and_dense`: dims of size 0 or 1 are ignored, the others
    must chain from stride 1, each stride the product of the sizes before it.

        shape (2, 3, 4) stride (1, 8, 2): dims 0, 2, 1 have strides 1, 2, 8 -> dense
        shape (2, 3)    stride (3, 2):    no dim has stride 1                 -> not dense

    Symbolic sizes: dense only if known for every size the symbols may take (no guards added).
    Nothing is sorted (Dynamo, which shows SymInts to Python as ints, cannot sort by them):
    each step looks for the dim whose stride is the product so far."""
    if any(isinstance(v, torch.SymInt) for v in (*shape, *stride)):
        known = statically_known_true
    else:
        known = bool  # plain ints, or Dynamo tracing this (it guards on what it compares)
    dims = [d for d in range(len(shape)) if not known(shape[d] < 2)]
    expected = 1
    while dims:
        for d in dims:
            if known(stride[d] == expected):
                break
        else:
            return False
        dims.remove(d)
        expected = expected * shape[d]
    return True


def known_equal(a: Sequence, b: Sequence) -> bool:
    """Equal sizes or strides, without adding guards for symbolic ones (unknown: not equal)."""
    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def _from_custom_function(t: torch.Tensor) -> bool:
    try:
        return isinstance(t.grad_fn, torch.autograd.function.BackwardCFunction)
    except RuntimeError:  # eager's "A view was created in no_grad mode ...": a view, not a Function's output
        return False


def _storage(t: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(t.untyped_storage())


def analyse_inputs(values: Sequence[torch.Tensor], before: Sequence[InputState],
                   is_leaf: Sequence[bool], written_storages: set = frozenset(),
                   unbumped_storages: set = frozenset(), metadata_ops: Any = None) -> list[InputInfo]:
    """`metadata_ops`: tensor -> the in-place metadata ops run on it (the recorder's)."""
    steps_of = [tuple(ViewStep(op, tuple(args), tuple(kwargs.items()), grad_enabled)
                      for op, args, kwargs, grad_enabled in (metadata_ops or {}).get(t, ())) for t in values]
    # each metadata op bumps its storage's version counter; those on inputs are replayed (and
    # bump it again at run time), so only more bumps than those are writes
    replayed: dict[StorageWeakRef, int] = {}
    for t, steps in {id(t): (t, steps) for t, steps in zip(values, steps_of)}.values():
        replayed[_storage(t)] = replayed.get(_storage(t), 0) + len(steps)
    infos = []
    for i, (t, state) in enumerate(zip(values, before)):
        after = InputState.of(t)
        storage = _storage(t)
        steps = steps_of[i]
        bumps_version = after.version - state.version > replayed[storage] or storage in unbumped_storages
        mutates_data = bumps_version or storage in written_storages
        autograd_change = _autograd_change(t, state, is_leaf[i])
        geometry_changed = (after.size, after.stride, after.storage_offset) != (state.size, state.stride,
                                                                              state.storage_offset)
        mutates_metadata = autograd_change is not None or geometry_changed or bool(steps)
        visible = mutates_data and t.requires_grad and t.grad_fn is not state.grad_fn
        grows = bool(steps) and not statically_known_true(after.storage_nbytes == state.storage_nbytes)
        infos.append(InputInfo(i, t.requires_grad, is_leaf[i], mutates_data, mutates_metadata, visible,
                               bumps_version, steps, autograd_change, grows))
    return infos


def _autograd_change(t: torch.Tensor, state: InputState, is_leaf: bool) -> str | None:
    """How an input's autograd state changed in place (see InputInfo.autograd_change).
    (`detach_` does not reach the tracer: it is seen in the histories.)"""
    if t.grad_fn is not None and t.grad_fn is not state.grad_fn:
        # written with a value that requires grad: the write-back gives it that history. A leaf
        # requiring grad can only be written after a `detach_()` (`a.detach_(); a[0] = b`); a
        # non-leaf was detached first if its new history no longer reaches its old one
        if is_leaf and state.requires_grad:
            return "detach_before_write"
        if state.grad_fn is not None and not _reaches(t.grad_fn, state.grad_fn):
            return "detach_before_write"
        return None
    if state.requires_grad and not t.requires_grad:
        return "detach"
    if t.requires_grad and not state.requires_grad:
        return "requires_grad"
    return None


def _reaches(start: Any, target: Any) -> bool:
    """Is autograd node `target` reachable from `start` through next_functions?"""
    stack, seen = [start], set()
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return False


def recorded_views(node: fx.Node, stops: dict[fx.Node, int]) -> tuple[int, tuple[ViewStep, ...]] | None:
    """Walk back from `node` through recorded view ops to one of `stops`.

    Returns (stops[base node], the view steps from base to node), or None when the
    chain passes through anything but a view op with constant arguments.
    """
    steps = []
    while node not in stops:
        if node.op != "call_function" or not (node.target is operator.getitem
                                              or getattr(node.target, "is_view", False)):
            return None
        source, *args = node.args
        constants = pytree.tree_leaves((args, node.kwargs))
        if not isinstance(source, fx.Node) or any(isinstance(a, fx.Node) for a in constants):
            return None
        steps.append(ViewStep(node.target, tuple(args), tuple(node.kwargs.items()),
                              node.meta.get("grad_enabled", True), node.meta.get("inference_mode", False)))
        node = source
    return stops[node], tuple(reversed(steps))


def _is_leaf_view(out: torch.Tensor) -> bool:
    """Does this view require grad without a grad_fn: made a leaf in place (`v.requires_grad_()`
    on a view of a tensor that does not require grad, or on `.data`), or taken under no_grad
    from one that does (where replaying `requires_grad_()` changes nothing)?"""
    if not out.requires_grad:
        return False
    try:
        return out.grad_fn is None
    except RuntimeError:  # a no_grad view whose base changed: eager's error on reading it
        return True


def _has_own_grad_accumulator(t: torch.Tensor) -> bool:
    """Was `requires_grad_()` called on this view? (A view taken under inference_mode of a tensor
    that requires grad reports requires_grad either way; only the call gives it a leaf's
    gradient accumulator, without which a backward from it fails.)"""
    try:
        return isinstance(torch.autograd.graph.get_gradient_edge(t).node, torch._C._functions.AccumulateGrad)
    except (RuntimeError, AssertionError):  # "Expected gradient function to be set": no leaf of its own
        return False


class _MakeLeaf:
    """`t.requires_grad_()`, replayed after the view ops of an output that the function made
    a leaf requiring grad (`v = a.view(-1); v.requires_grad_()`, `a` not requiring grad)."""

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        return t.requires_grad_()

    def __repr__(self) -> str:
        return "requires_grad_"


MAKE_LEAF = ViewStep(_MakeLeaf(), ())


def _view_facts(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.is_conj(), t.is_neg()


def _replays_to(steps: Sequence[ViewStep], base: torch.Tensor, out: torch.Tensor) -> bool:
    """Does replaying `steps` on `base` give a tensor laid out exactly like `out`?
    (No, for instance, when an in-place metadata op such as `t_` changed it afterwards.)"""
    try:
        with torch.no_grad():
            t = base
            for step in steps:
                t = step(t)
    except Exception:
        return False
    return _view_facts(t) == _view_facts(out)


def _with_replay(info: OutputInfo, out: torch.Tensor, bases: dict[fx.Node, int],
                 base_values: Sequence[torch.Tensor], node_of: Callable) -> OutputInfo:
    """`info` with the recorded view chain from its base; or unchanged if there is none that
    reproduces `out`, provided `as_strided` on the base can (same dtype, no conj/neg bit)."""
    found = recorded_views(node_of(out), bases)
    if found is not None and _replays_to(found[1], base_values[found[0]], out):
        # (a view taken under no_grad of a base that requires grad needs no `requires_grad_()`,
        # and must not get one: its requires_grad follows the base's, e.g. after `base.detach_()`)
        replayed_requires_grad, _ = _replayed_autograd(found[1], base_values[found[0]].requires_grad, False)
        made_leaf = (MAKE_LEAF,) if _is_leaf_view(out) and (
            not replayed_requires_grad or _has_own_grad_accumulator(out)) else ()
        return dataclasses.replace(info, index=found[0], replay=found[1] + made_leaf)
    base = base_values[info.index]
    if _is_leaf_view(out) and not base.requires_grad:
        raise UnsupportedError(
            "aotgrad cannot rebuild an output that is a view made a leaf requiring grad (`v.requires_grad_()`) "
            "when the view ops that made it were not all recorded. To continue: return `.clone()` of the "
            "view before making it require grad.")
    if (out.dtype, out.is_conj(), out.is_neg()) != (base.dtype, base.is_conj(), base.is_neg()):
        raise UnsupportedError(
            f"aotgrad cannot rebuild an output of dtype {out.dtype} (conj={out.is_conj()}, "
            f"neg={out.is_neg()}) that views a tensor of dtype {base.dtype}: the view ops that made it "
            "were not all recorded. To continue: return `.clone()` of that output.")
    return info


def _made_by_view_op(t: torch.Tensor, node_of: Callable | None) -> bool:
    return node_of is not None and getattr(getattr(node_of(t), "target", None), "is_view", False)


def analyse_outputs(values: Sequence[torch.Tensor], outs: Sequence[Any],
                    node_of: Callable | None = None) -> ForwardAnalysis:
    """Classify the flat user outputs; pick the tensors the forward graph returns.

    Outputs that view an input are rebuilt at run time from the real input, so
    they stay real views (a later in-place op on them shows in the input, as in
    eager). Outputs that share storage with each other are rebuilt as views of
    one returned base: the output that owns the storage, or else the
    intermediate `._base` added as an extra forward output.
    """
    placed = _Placed([None] * len(outs))
    storage_users = _classify_outputs(values, outs, placed)
    bases = _bases_of_shared_storages(outs, storage_users, node_of)
    num_fresh = _place_fresh_outputs(outs, storage_users, bases, placed)
    _place_views_of_outputs(outs, storage_users, bases, placed)
    if node_of is not None:
        _with_replays(values, outs, placed, node_of)
    _with_histories(values, outs, placed)
    forward_outputs = placed.forward_outputs
    return ForwardAnalysis(
        inputs=[], outputs=placed.infos, forward_outputs=forward_outputs, num_fresh_user_outputs=num_fresh,
        forward_output_strides=[t.stride() for t in forward_outputs],
        leaf_outputs=[j for j, t in enumerate(forward_outputs) if is_new_leaf(t)])


@dataclass
class _Placed:
    """analyse_outputs so far: each user output's OutputInfo (None: not known yet) and the
    tensors the forward graph returns."""

    infos: list[OutputInfo | None]
    forward_outputs: list[torch.Tensor] = field(default_factory=list)
    _index: dict[int, int] = field(default_factory=dict)  # id(tensor) -> forward output index

    def returned(self, t: torch.Tensor) -> int:
        """t's index among the forward graph's outputs (added at the end the first time)."""
        if id(t) not in self._index:
            self._index[id(t)] = len(self.forward_outputs)
            self.forward_outputs.append(t)
        return self._index[id(t)]


def _classify_outputs(values: Sequence[torch.Tensor], outs: Sequence[Any],
                      placed: _Placed) -> dict[StorageWeakRef, list[int]]:
    """Outputs that are constants, repeats of an earlier output, inputs, results of a custom
    autograd.Function, or views of an input; the others by storage (returned), for
    `_bases_of_shared_storages`."""
    input_index = {id(v): i for i, v in enumerate(values)}
    input_storage: dict[StorageWeakRef, int] = {}
    for i, v in enumerate(values):
        input_storage.setdefault(_storage(v), i)
    first_user_index: dict[int, int] = {}
    storage_users: dict[StorageWeakRef, list[int]] = {}
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            placed.infos[k] = OutputInfo(OutputKind.CONSTANT, value=out)
            continue
        meta = dict(size=tuple(out.shape), stride=out.stride(), storage_offset=out.storage_offset(),
                    requires_grad=out.requires_grad)
        if id(out) in first_user_index:
            placed.infos[k] = OutputInfo(OutputKind.SAME_AS_OUTPUT, first_user_index[id(out)], **meta)
            continue
        first_user_index[id(out)] = k
        if id(out) in input_index:
            placed.infos[k] = OutputInfo(OutputKind.INPUT, input_index[id(out)], **meta)
            continue
        storage = _storage(out)
        if _from_custom_function(out):
            # An autograd.Function that returns (a view of) its input: autograd routes the
            # grad through the Function's backward, so rebuilding a plain view would skip it.
            placed.infos[k] = OutputInfo(OutputKind.FRESH, placed.returned(out), **meta)
            continue
        if storage in input_storage:
            placed.infos[k] = OutputInfo(OutputKind.ALIAS_OF_INPUT, input_storage[storage], **meta)
            continue
        storage_users.setdefault(storage, []).append(k)
    return storage_users


def _bases_of_shared_storages(outs: Sequence[Any], storage_users: dict[StorageWeakRef, list[int]],
                              node_of: Callable | None) -> dict[StorageWeakRef, torch.Tensor]:
    """The base each storage's outputs are rebuilt from, where they are not one fresh output:
    an output that is not a view (one that requires grad first, then one not made by an
    aliasing op such as `detach`, which has no `._base`), or else the views' intermediate
    `._base`."""
    bases: dict[StorageWeakRef, torch.Tensor] = {}
    for storage, users in storage_users.items():
        members = [outs[k] for k in users]
        if len(members) == 1 and members[0]._base is None:
            continue
        owners = sorted((t for t in members if t._base is None),
                        key=lambda t: (not t.requires_grad, _made_by_view_op(t, node_of)))
        bases[storage] = owners[0] if owners else members[0]._base
    return bases


def _place_fresh_outputs(outs: Sequence[Any], storage_users: dict[StorageWeakRef, list[int]],
                         bases: dict[StorageWeakRef, torch.Tensor], placed: _Placed) -> int:
    """Fresh outputs (alone in their storage, or the base of its views) are returned as they
    are; how many forward outputs that makes."""
    for storage, users in storage_users.items():
        base = bases.get(storage)
        for k in users:
            if base is None or outs[k] is base:
                out = outs[k]
                placed.infos[k] = OutputInfo(OutputKind.FRESH, placed.returned(out), tuple(out.shape),
                                             out.stride(), out.storage_offset(), out.requires_grad)
    return len(placed.forward_outputs)


def _place_views_of_outputs(outs: Sequence[Any], storage_users: dict[StorageWeakRef, list[int]],
                            bases: dict[StorageWeakRef, torch.Tensor], placed: _Placed) -> None:
    """The other outputs of a shared storage are views of its base (returned, an extra
    forward output if no user output is it)."""
    for storage, base in bases.items():
        index = placed.returned(base)
        for k in storage_users[storage]:
            if placed.infos[k] is None:
                out = outs[k]
                placed.infos[k] = OutputInfo(OutputKind.ALIAS_OF_OUTPUT, index, tuple(out.shape), out.stride(),
                                             out.storage_offset() - base.storage_offset(), out.requires_grad)


def _with_replays(values: Sequence[torch.Tensor], outs: Sequence[Any], placed: _Placed, node_of: Callable) -> None:
    """Views of an input or of a forward output get the view ops that made them, to replay."""
    input_nodes = {node_of(v): i for i, v in enumerate(values)}
    output_nodes = {node_of(t): j for j, t in enumerate(placed.forward_outputs)}
    for k, info in enumerate(placed.infos):
        if info.kind is OutputKind.ALIAS_OF_INPUT:
            placed.infos[k] = _with_replay(info, outs[k], input_nodes, values, node_of)
        elif info.kind is OutputKind.ALIAS_OF_OUTPUT:
            placed.infos[k] = _with_replay(info, outs[k], output_nodes, placed.forward_outputs, node_of)


def _with_histories(values: Sequence[torch.Tensor], outs: Sequence[Any], placed: _Placed) -> None:
    """A view whose rebuilt autograd history would differ from eager's takes its history from
    an extra forward output (`_history_carrier`); one with a version counter of its own in
    eager gets one too."""
    forward_outputs = placed.forward_outputs
    for k, info in enumerate(placed.infos):
        if info.kind not in (OutputKind.ALIAS_OF_INPUT, OutputKind.ALIAS_OF_OUTPUT):
            continue
        base = values[info.index] if info.kind is OutputKind.ALIAS_OF_INPUT else forward_outputs[info.index]
        if _rebuilt_autograd(info, base) != _autograd_of(outs[k]):
            viewed = _base_reachable(outs[k], outs, values)
            info = dataclasses.replace(info, history=len(forward_outputs))
            forward_outputs.append(_history_carrier(outs[k], k, viewed))
        # (`unsafe_split`'s outputs have counters of their own too, but a history a view gives)
        if (info.history is not None or not info.requires_grad) and not shares_version_counter(outs[k], base):
            info = dataclasses.replace(info, own_version_counter=True)
        placed.infos[k] = info


def _autograd_of(t: torch.Tensor) -> tuple[bool, bool]:
    """(requires_grad, has a grad_fn): what an output must show of its autograd history."""
    try:
        return t.requires_grad, t.grad_fn is not None
    except RuntimeError:  # a no_grad view whose base changed: eager's error on reading it
        return t.requires_grad, False


def _rebuilt_autograd(info: OutputInfo, base: torch.Tensor) -> tuple[bool, bool]:
    """`_autograd_of` the alias the epilogue rebuilds from `base` (as `RebuildOutput.run`:
    detached when it must not require grad, then the replayed view ops or as_strided).
    Worked out from the steps, not run: running them on symbolic fakes would add guards.
    (`.data`, for an own version counter, is decided after this and only where the alias
    requires no grad or takes a history, so it changes nothing here.)"""
    requires_grad = base.requires_grad and info.requires_grad
    has_grad_fn = requires_grad and info.replay is None  # as_strided, with grad mode on
    return _replayed_autograd(info.replay or (), requires_grad, has_grad_fn)


def _replayed_autograd(steps: Sequence[ViewStep], requires_grad: bool, has_grad_fn: bool) -> tuple[bool, bool]:
    """(requires_grad, has a grad_fn) after replaying view steps on a base that has these."""
    for step in steps:
        if isinstance(step.op, _MakeLeaf):
            requires_grad, has_grad_fn = True, False
        elif step.op is torch.ops.aten.detach.default:
            requires_grad, has_grad_fn = False, False
        elif requires_grad:
            has_grad_fn = step.grad_enabled  # a view taken under no_grad requires grad, without a grad_fn
    return requires_grad, has_grad_fn


def _base_reachable(out: torch.Tensor, outs: Sequence[Any], values: Sequence[torch.Tensor]) -> bool:
    """Is `out` a view whose base the caller gets (an output or an input)? A write to that base
    would make eager regenerate the view's grad_fn from the base's. (A view of an intermediate
    the caller never sees, say of a detached alias, keeps its own history whatever the caller
    writes into the memory they share.)"""
    base = out._base
    return base is not None and (any(base is o for o in outs) or any(base is v for v in values))


def _history_carrier(out: torch.Tensor, k: int, viewed: bool) -> torch.Tensor:
    """`out` as a forward output whose grad_fn the rebuilt alias takes (see OutputInfo.history).
    Only a history made by grad-mode ops can be carried, and only by an alias that is not a
    view the caller can reach the base of (eager would regenerate its grad_fn from the base's
    after a write to the base; the rebuilt alias keeps the carried one)."""
    requires_grad, has_grad_fn = _autograd_of(out)
    if viewed or not (requires_grad and has_grad_fn):
        raise UnsupportedError(
            f"aotgrad cannot rebuild output {k}: it shares memory with another tensor the caller gets, "
            f"but its autograd history (requires_grad={requires_grad}) is not what a view of that tensor "
            "would have (e.g. the base was detached in place, `base.detach_()`, after the view was taken; "
            "or a view made a leaf under `torch.no_grad()`). To continue: return `.clone()` of that output.")
    return out


def is_new_leaf(t: torch.Tensor) -> bool:
    """A leaf that requires grad: for a traced value that is not an input, made inside."""
    return t.requires_grad and t.grad_fn is None and t._base is None
