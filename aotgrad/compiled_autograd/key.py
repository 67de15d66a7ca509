"""What a captured backward graph depends on, said once: the cache key and the check of a later
backward against it, both derived from one list of parts.

A key is one entry per part of `HEADER` (read from the backward call) and one entry per step
(a tuple with one piece per part of `STEP`, read from the step's node), plus the sizes the parts
add in order (dynamic.SizeList: the sizes may become symbols, so they are kept apart). Each part
carries both sides of what it means, side by side:

    read(r)          on a miss (collect.py): the part's piece of the key, read through `r` (a
                     `Reading`); it may add sizes, take saved tensors into the graph's inputs,
                     add objects and say which nodes keep their state.
    emit(w, piece)   once per key (replay_code.py): Python that checks a later backward against
                     the recorded piece and adds the same sizes, saved tensors and objects in the
                     same order, returning None where it differs; False where a piece cannot be
                     checked that way (the key then has no fast check: every hit goes through
                     collect).

So whatever a backward reads (saved tensors, through the user's hooks or not; hooks; saved
values; autocast) is in the key and in the check, or in neither. The generated code reads like
this for one step (`n` is the node the edges of earlier steps resolved):

    if type(n) is not C4: return None            # AddmmBackward0 (NodeClass)
    nf = n.next_functions                          # (Edges)
    if len(nf) != 3: return None
    c = nf[1]
    if c[1] != 0: return None
    n5 = c[0]
    ...
    r = n._raw_saved_mat1                          # (Saved)
    if type(r) is not SavedTensor or r.unpack_hook is not None: return None
    s = n._saved_mat1
    ...
"""
from __future__ import annotations

import operator

import torch

from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.dynamic import contiguous_layout, symbolic_attributes
from aotgrad.compiled_autograd.kinds import (
    ACCUMULATE, AOTGRAD, CUSTOM, OPAQUE, TRACED, UNDEFINED, holds_state, kind_of_type, node_class)
from aotgrad.compiled_autograd.saved import EagerFallback, hashable, layout_of, take_ctx_tensors, take_tensors

OUTSIDE = "outside"         # an edge into an AccumulateGrad node the walk leaves out (inputs=)
PRUNED = "pruned"           # an edge into another node the walk leaves out: no fast check


class Reading:
    """One backward call being read on a miss: what the parts read from, and what they fill in."""

    def __init__(self, walk, root_grads: list, accumulate_grad: bool, input_edges: list, sizes):
        self.walk = walk
        self.root_grads = root_grads
        self.accumulate_grad = accumulate_grad
        self.input_edges = input_edges
        self.index_of = {step.node: i for i, step in enumerate(walk.steps)}
        self.sizes = sizes              # dynamic.SizeList
        self.inputs: list = list(root_grads)   # the graph's tensor inputs: root gradients, then saved tensors
        self.input_dims: list = []      # per input: where its dims start in `sizes`
        self.objects: list = []         # leaves, ctxs, nodes run as is, hook functions
        self.slots: list = []           # every saved tensor taken over
        self.keeps_state: list = []     # nodes run as is whose saved state stays in them
        self.probe = hook_lookup.node_hooks_may_exist()
        self.retaining = hook_lookup.retaining_by_node()
        # the step being read (set by collect for each step)
        self.step = None
        self.plan = None

    @property
    def node(self):
        return self.step.node


class Part:
    """One thing a graph depends on (module docstring). `name` is how cache misses name it."""
    name = ""

    def read(self, r: Reading):
        raise NotImplementedError

    def emit(self, w, piece) -> bool:
        raise NotImplementedError


# --- the header: the backward call itself --------------------------------------------------------

class Accumulate(Part):
    """backward() (into `.grad`) or autograd.grad() (results)."""
    name = "accumulation"

    def read(self, r):
        return r.accumulate_grad

    def emit(self, w, piece):
        w(f"if accumulate_grad is not {piece}: return None")
        return True


class Roots(Part):
    """Which step and input slot each root gradient enters (resolves those steps' nodes)."""
    name = "roots"

    def read(self, r):
        return tuple(r.walk.roots)

    def emit(self, w, piece):
        if any(root is None for root in piece):
            return False
        w(f"if len(root_edges) != {len(piece)}: return None")
        for k, (i, nr) in enumerate(piece):
            w(f"e = root_edges[{k}]")
            w(f"if e.output_nr != {nr}: return None")
            w.node_from(i, "e.node")
        return True


class RootGradients(Part):
    """Each root gradient's dtype, device, rank and layout (its sizes go to the sizes)."""
    name = "root gradients"

    def read(self, r):
        metas = []
        for g in r.root_grads:
            if not plain_strided(g):
                raise not_plain_strided("a root gradient", g)
            meta, start = r.sizes.tensor(g, 0)
            metas.append(meta)
            r.input_dims.append(start)
        return tuple(metas)

    def emit(self, w, piece):
        for k, meta in enumerate(piece):
            w(f"g = root_grads[{k}]")
            _tensor_meta_check(w, "g", meta)
        return True


_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu", "xla", "mtia", "maia", "ipu", "privateuseone")


def autocast_state() -> tuple | None:
    """The autocast regions active while a backward runs (eager's backward ops are autocast
    too, and a capture records their casts): None when there is none, the common case."""
    if not torch._C._is_any_autocast_enabled():
        return None
    return tuple((device, torch.get_autocast_dtype(device)) for device in _AUTOCAST_DEVICES
                 if torch.is_autocast_enabled(device))


class Autocast(Part):
    """The autocast regions the backward runs under."""
    name = "autocast"

    def read(self, r):
        return autocast_state()

    def emit(self, w, piece):
        if piece is None:  # (no autocast region active: one call answers, the common case)
            w("if any_autocast_enabled(): return None")
        else:
            w(f"if autocast_state() != {w.const(piece)}: return None")
        return True


class Results(Part):
    """autograd.grad's `inputs=`: how many results, and the step and output each is read at.
    Checked after the steps (their nodes are known then)."""
    name = "inputs="
    after_steps = True

    def read(self, r):
        edges = tuple((r.index_of[e.node], e.output_nr) if e.node in r.index_of else PRUNED
                      for e in r.input_edges)
        return r.walk.num_results, edges

    def emit(self, w, piece):
        _, edges = piece
        if PRUNED in edges:
            return False
        w(f"if len(input_edges) != {len(edges)}: return None")
        for k, (i, nr) in enumerate(edges):
            w(f"e = input_edges[{k}]")
            w(f"if e.node is not n{i} or e.output_nr != {nr}: return None")
        return True


class Order(Part):
    """The steps sorted by sequence number and which neighbours there tie: the engine's heap
    only compares them, so the same pattern runs the steps in the same order."""
    name = "order of sequence numbers"
    after_steps = True

    def read(self, r):
        seqs = [step.node._sequence_nr() for step in r.walk.steps]
        order = tuple(sorted(range(len(seqs)), key=seqs.__getitem__))
        ordered = [seqs[i] for i in order]
        return order, tuple(a == b for a, b in zip(ordered, ordered[1:]))

    def emit(self, w, piece):
        order, ties = piece
        if len(order) > 1:  # (one chained comparison)
            chain = f"n{order[0]}._sequence_nr()"
            for i, tie in zip(order[1:], ties):
                chain += f" {'==' if tie else '<'} n{i}._sequence_nr()"
            w(f"if not ({chain}): return None")
        return True


# --- each step: one node ----------------------------------------------------------------------

class NodeClass(Part):
    """The node's type, how it runs (kind) and, for custom Functions, their class."""
    name = "node"

    def read(self, r):
        node = r.node
        return type(node), r.plan.kind, node_class(r.plan.kind, node)

    def emit(self, w, piece):
        node_type, kind, extra = piece
        w(f"if type(n) is not {w.const(node_type)}: return None  # {node_type.__name__} (NodeCall {w.index})")
        if kind is CUSTOM or kind is AOTGRAD:  # (kind and class depend on more than the type)
            w(f"if kind_of(n) is not {w.const(kind)} or node_class({w.const(kind)}, n) != {w.const(extra)}: "
              "return None")
        elif kind is OPAQUE and kind_of_type(node_type) is TRACED:  # run as is for the user's saved tensor hooks
            w(f"if not packed_by_user(n, {w.const(layout_of(node_type).tensors)}): return None")
        return True


class Edges(Part):
    """Whether the node runs, where each of its edges goes (by step index: one node reached
    twice is one step) and which of its inputs autograd.grad reads."""
    name = "edges"

    def read(self, r):
        step = r.step
        children = []
        for child, nr in step.node.next_functions:
            if child is None:
                children.append(None)
            elif child in r.index_of:
                children.append((r.index_of[child], nr))
            elif child.name() == "torch::autograd::AccumulateGrad":  # a leaf inputs= leaves out
                children.append((OUTSIDE, type(child)))
            else:
                children.append(PRUNED)
        return step.runs, tuple(children), tuple(step.captures)

    def emit(self, w, piece):
        _, children, _ = piece
        w("nf = n.next_functions")
        w(f"if len(nf) != {len(children)}: return None")
        for k, child in enumerate(children):
            if child is None:
                w(f"if nf[{k}][0] is not None: return None")
            elif child is PRUNED:
                return False
            elif child[0] is OUTSIDE:
                w(f"c = nf[{k}][0]")
                w(f"if type(c) is not {w.const(child[1])}: return None")
                w("outside.append(c)")
            else:
                j, nr = child
                w(f"c = nf[{k}]")
                w(f"if c[1] != {nr}: return None")
                w.node_from(j, "c[0]")
        return True


def traced_values(node, layout, index: int, sizes, value_dims: dict | None) -> tuple:
    """A built-in node's saved non-tensor values: those it may read as symbols into `sizes`
    (where they start into `value_dims`), the rest as they compare in the key."""
    get, symbolic = value_reader(type(node), layout)
    values = []
    for value, attr in zip(get(node), symbolic):
        if attr is not None and value is not None:
            items = value if isinstance(value, (list, tuple)) else (value,)
            start = sizes.add(items, index)
            if value_dims is not None:
                value_dims[attr] = (start, len(items), isinstance(value, (list, tuple)))
            values.append((attr, len(items)))
        else:
            values.append(hashable(value))
    return tuple(values)


_value_readers: dict[type, tuple] = {}


def value_reader(node_type: type, layout) -> tuple:
    """(read all saved values of a node at once, per value: its name if it may be a symbol)."""
    reader = _value_readers.get(node_type)
    if reader is None:
        symbolic = symbolic_attributes(node_type)
        names = layout.values
        if not names:
            get = _no_values
        elif len(names) == 1:
            one = operator.attrgetter(names[0])
            get = lambda node: (one(node),)  # noqa: E731
        else:
            get = operator.attrgetter(*names)
        reader = _value_readers[node_type] = (get, tuple(n if n in symbolic else None for n in names))
    return reader


def _no_values(node) -> tuple:
    return ()


def _compares_directly(value) -> bool:
    """Does a raw saved value compare with its key form by `!=` (no `hashable` needed)?"""
    kind = type(value)
    return value is None or kind is int or kind is bool or kind is str or (kind is float and value == value)


class Values(Part):
    """The saved non-tensor values the node's formula reads (built-in nodes; aotgrad's own: the
    sizes its backward graph was made for). Values that may be symbols go to the sizes."""
    name = "saved values"

    def read(self, r):
        if not r.step.runs:
            return ()
        kind = r.plan.kind
        if kind is TRACED:
            return traced_values(r.node, layout_of(type(r.node)), r.plan.index, r.sizes, r.plan.value_dims)
        if kind is AOTGRAD:
            return tuple(r.node.saved_sizes)
        return ()

    def emit(self, w, piece):
        if not piece:
            return True
        if w.kind is AOTGRAD:
            w(f"if tuple(n.saved_sizes) != {w.const(piece)}: return None")
            return True
        get, symbolic = value_reader(w.node_type, layout_of(w.node_type))
        w(f"v = {w.const(get)}(n)")
        for q, (expected, attr) in enumerate(zip(piece, symbolic)):
            if attr is not None and expected is not None:  # read into the sizes
                w(f"x = v[{q}]")
                w("if x is None: return None")
                w("items = x if isinstance(x, (list, tuple)) else (x,)")
                w(f"if len(items) != {expected[1]}: return None")
                w("ext(items)")
            elif attr is not None or _compares_directly(expected):
                w(f"if v[{q}] != {w.const(expected)}: return None")
            else:
                w(f"if hashable(v[{q}]) != {w.const(expected)}: return None")
        return True


def plain_strided(t: torch.Tensor) -> bool:
    """A dense strided tensor, the only kind a captured graph takes: sparse (COO, CSR, ...),
    MKLDNN and nested tensors have no strides for the graph to be traced with."""
    return t.layout is torch.strided and not t.is_nested


def not_plain_strided(what: str, t: torch.Tensor) -> EagerFallback:
    kind = "a nested" if t.is_nested else f"a {t.layout}"
    return EagerFallback(f"{what} is {kind} tensor: captured graphs take dense strided tensors only")


def custom_arguments_known(node) -> None:
    """Which results of a custom Function go to which input must be known."""
    if getattr(node, "_aotgrad_unrecorded", False):
        raise EagerFallback(f"custom Function {node.name()} was applied before compiled autograd was first "
                            "enabled: which of its arguments and outputs are tensors was not recorded")
    if len(node.next_functions) != len(node.needs_input_grad) and hook_lookup.tensor_positions(node) is None:
        raise EagerFallback(f"custom Function {node.name()} has non-tensor inputs and was not applied through "
                            "torch.autograd.Function.apply: which results go to which input is unknown")


class Saved(Part):
    """What the step hands the graph: its saved tensors (graph inputs; per tensor its dtype,
    device, rank and layout, its sizes to the sizes; None where nothing was saved) and its
    object (a custom Function's ctx, a leaf, a node run as is)."""
    name = "saved tensors"

    def read(self, r):
        node, plan, index = r.node, r.plan, r.plan.index
        kind = plan.kind
        if r.step.runs:
            if kind is TRACED:
                plan.saved = take_tensors(node, layout_of(type(node)).tensors)
            elif kind is AOTGRAD:
                plan.saved = take_ctx_tensors(node)
            elif kind is CUSTOM:
                custom_arguments_known(node)
                plan.saved = take_ctx_tensors(node)
                r.objects.append(node)
            elif kind is ACCUMULATE:
                leaf = node.variable
                if not plain_strided(leaf):
                    raise not_plain_strided(f"the leaf of {node.name()} (NodeCall {index})", leaf)
                r.objects.append(leaf)
            elif kind is not UNDEFINED:
                r.objects.append(node)
                if holds_state(node):
                    r.keeps_state.append(node)  # run as is: its saved state stays in it
        lengths = None
        if kind is TRACED and r.step.runs:  # (per tensor attribute: None for one tensor, else the list's length)
            lengths = tuple(len(raw) if type(raw) is list or type(raw) is tuple else None
                            for raw in (getattr(node, attr) for attr, _ in layout_of(type(node)).tensors))
        holds = kind is OPAQUE and r.step.runs and holds_state(node)
        metas = []
        for slot in plan.saved:
            if slot is None:
                metas.append(None)
                continue
            if not plain_strided(slot.value):
                raise not_plain_strided(f"a tensor {node.name()} (NodeCall {index}) saved", slot.value)
            r.slots.append(slot)
            r.inputs.append(slot.value)
            if not slot.owned and (not r.keeps_state or r.keeps_state[-1] is not node):
                r.keeps_state.append(node)  # the user's saved_tensors_hooks hold this one
            meta, start = r.sizes.tensor(slot.value, index)
            r.input_dims.append(start)
            metas.append(meta)
        return tuple(metas), lengths, holds

    def emit(self, w, piece):
        metas, lengths, holds = piece
        kind = w.kind
        if not w.runs:
            return not metas
        if kind is TRACED:
            return _emit_traced_saved(w, metas, lengths)
        if kind is AOTGRAD or kind is CUSTOM:
            if kind is CUSTOM:
                w("custom_arguments_known(n)")
            _emit_ctx_saved(w, metas)
            if kind is CUSTOM:
                w("objects.append(n)")
        elif kind is ACCUMULATE:
            w("leaf = n.variable")
            w("if leaf.layout is not strided or leaf.is_nested: return None")
            w("objects.append(leaf)")
        elif kind is not UNDEFINED:
            w("objects.append(n); keeps.append(n)" if holds else "objects.append(n)")
        return True


def _emit_saved_value(w, value: str, raw: str, meta) -> None:
    """One saved tensor read through its node's getter: checked as the key has it, handed over."""
    _tensor_meta_check(w, value, meta)
    w(f"raws.append({raw}); values.append({value}); owners.append(n)")


def _emit_traced_saved(w, piece: tuple, lengths: tuple) -> bool:
    """A built-in node's saved tensors, attribute by attribute (lists flattened, as take_tensors)."""
    position = 0
    attrs = layout_of(w.node_type).tensors
    if len(lengths) != len(attrs):
        return False
    for (raw_attr, getter), count in zip(attrs, lengths):
        w(f"r = n.{raw_attr}")
        if count is None:  # one tensor
            if position >= len(piece):
                return False
            meta = piece[position]
            if meta is None:
                w("if type(r) is list or type(r) is tuple: return None")
                w(f"if r is not None and (r.unpack_hook is not None or n.{getter} is not None): return None")
            else:  # (a SavedTensor: not a list)
                w("if type(r) is not SavedTensor or r.unpack_hook is not None: return None")
                w(f"s = n.{getter}")
                _emit_saved_value(w, "s", "r", meta)
            position += 1
        else:  # a list of tensors
            metas = piece[position:position + count]
            if len(metas) != count:
                return False
            w(f"if (type(r) is not list and type(r) is not tuple) or len(r) != {count}: return None")
            w("if any(x is not None and x.unpack_hook is not None for x in r): return None")
            w(f"sl = n.{getter} if any(x is not None for x in r) else (None,) * {count}")
            for q, meta in enumerate(metas):
                _emit_listed_value(w, f"r[{q}]", f"sl[{q}]", meta)
            position += count
    return position == len(piece)


def _emit_ctx_saved(w, piece) -> None:
    """A custom Function's (or aotgrad's own) saved tensors, read through its ctx."""
    w("rs = n._raw_saved_tensors")
    w(f"if len(rs) != {len(piece)}: return None")
    if not piece:
        return
    w("if any(r is not None and r.unpack_hook is not None for r in rs): return None")
    w("st = n.saved_tensors if any(r is not None for r in rs) else (None,) * len(rs)")
    for p, meta in enumerate(piece):
        _emit_listed_value(w, f"rs[{p}]", f"st[{p}]", meta)


def _emit_listed_value(w, raw: str, value: str, meta) -> None:
    """One item of a list of saved tensors: nothing saved where the key has None, else its
    SavedTensor and the tensor its getter gave."""
    if meta is None:
        w(f"if {raw} is not None and {value} is not None: return None")
    else:
        w(f"s = {value}")
        w(f"if {raw} is None: return None")
        _emit_saved_value(w, "s", raw, meta)


def step_hooks(node, leaf, probe: bool, retaining: dict):
    """The hooks of one step (`NO_HOOKS` when there is nothing to look for); raises
    EagerFallback for a hook only the eager engine can run."""
    if probe or leaf is not None or retaining:
        node_hooks = hook_lookup.hooks_of(node, leaf, probe, retaining)
        reason = node_hooks.needs_engine() if node_hooks is not hook_lookup.NO_HOOKS else None
        if reason:
            raise EagerFallback(reason)
        return node_hooks
    return hook_lookup.NO_HOOKS


class Hooks(Part):
    """The node's hooks (how many of each kind, where; not which: the functions are objects)."""
    name = "hooks"

    def read(self, r):
        node = r.node
        leaf = node.variable if r.plan.kind is ACCUMULATE else None
        node_hooks = r.plan.hooks = step_hooks(node, leaf, r.probe, r.retaining)
        r.objects.extend(node_hooks.callables())
        return node_hooks.shape()

    def emit(self, w, piece):
        if w.kind is ACCUMULATE:  # (a leaf's hooks: the two step_hooks reads when nothing else is looked for)
            w("leaf = n.variable")
            w("h = step_hooks(n, leaf, probe, retaining) if look or leaf._backward_hooks "
              "or leaf._post_accumulate_grad_hooks is not None else NO_HOOKS")
        else:
            w("h = step_hooks(n, None, probe, retaining) if look else NO_HOOKS")
        if piece == hook_lookup.NO_HOOKS.shape():  # (NO_HOOKS has it: asked only of other hooks)
            w("if h is not NO_HOOKS:")
            w(f"    if h.shape() != {w.const(piece)}: return None")
            w("    objects.extend(h.callables())")
        else:
            w(f"if h.shape() != {w.const(piece)}: return None")
            w("if h is not NO_HOOKS: objects.extend(h.callables())")
        return True


class InputMetadata(Part):
    """The gradients the node takes: rank, dtype and device per input (shapes to the sizes)."""
    name = "input metadata"

    def read(self, r):
        metadata = []
        for m in r.node._input_metadata:
            if m.is_nested_tensor:
                raise EagerFallback(f"{r.node.name()} takes the gradient of a nested tensor: captured graphs "
                                    "take dense strided tensors only")
            r.plan.meta_dims.append(r.sizes.add(m.shape, r.plan.index))
            metadata.append((len(m.shape), m.dtype, m.device))
        return tuple(metadata)

    def emit(self, w, piece):
        w("md = n._input_metadata")
        w(f"if len(md) != {len(piece)}: return None")
        for q, (dim, dtype, device) in enumerate(piece):
            w(f"m = md[{q}]")
            w("sh = m.shape")
            w(f"if len(sh) != {dim} or m.dtype is not {w.const(dtype)} or m.device != {w.const(device)}: return None")
            w("ext(sh)")
        return True


HEADER: tuple[Part, ...] = (Accumulate(), Roots(), RootGradients(), Autocast(), Results(), Order())
# read in this order (sizes: saved values, then saved tensors, then input metadata; objects: the
# step's own, then its hook functions)
STEP: tuple[Part, ...] = (NodeClass(), Edges(), Values(), Saved(), Hooks(), InputMetadata())
AUTOCAST = HEADER.index(next(p for p in HEADER if isinstance(p, Autocast)))
STEP_HOOKS = STEP.index(next(p for p in STEP if isinstance(p, Hooks)))
STEP_VALUES = STEP.index(next(p for p in STEP if isinstance(p, Values)))


def _tensor_meta_check(w, name: str, meta) -> None:
    """`name` has the key's dtype, rank, device and layout (dynamic.layout; a contiguous one is
    told without calling `layout`); its shape goes to the sizes."""
    dtype, device, dim, memory = meta
    shape = f"{name}_shape"
    w(f"if {name} is None: return None")
    w(f"{shape} = {name}.shape")
    on_device = f"not {name}.is_cpu" if device.type == "cpu" else f"{name}.device != {w.const(device)}"
    check = f"len({shape}) != {dim} or {name}.dtype is not {w.const(dtype)} or {on_device}"
    if dim and memory == contiguous_layout(dim):  # (layout's own fast test, written out)
        check += f" or (({name}.layout is not strided or not ({name}.is_contiguous() and " \
                 f"{name}.storage_offset() == 0 and 1 not in {shape})) and layout({name}) != {w.const(memory)})"
    elif dim:
        check += f" or layout({name}) != {w.const(memory)}"
    else:  # (a 0-dim sparse tensor: layout tells it, read only for other ranks)
        check += f" or {name}.layout is not strided"
    w(f"if {check}: return None")
    w(f"ext({shape})")
