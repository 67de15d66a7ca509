"""replay.match for one template, written out as straight-line Python.

In: a `Template`. Out: a function `matcher(root_edges, input_edges, root_grads,
accumulate_grad) -> Hit | None` making exactly `replay.match`'s checks in the same order of
sizes, with the template's constants in place (no loop over steps, no record lookups), or
None for a template it does not cover (saved tensor lists; `match` serves those). A step
reads like this:

    n = n3                                       # resolved from an earlier step's edge
    if type(n) is not T12: return None           # AddmmBackward0
    nf = n.next_functions
    if len(nf) != 3: return None
    c = nf[1]
    if c[1] != 0: return None
    n5 = c[0]
    ...
    r = n._raw_saved_mat1
    if type(r) is not SavedTensor or r.unpack_hook is not None: return None
    s0 = n._saved_mat1
    if s0 is None: return None
    s0_shape = s0.shape
    if len(s0_shape) != 2 or s0.dtype is not C13 or not s0.is_cpu or ...: return None

and the end checks that the steps are distinct nodes whose sequence numbers compare as the
template's did (`n2._sequence_nr() < n0._sequence_nr() == ...`).
"""
from __future__ import annotations

from typing import Callable

import torch

from aotgrad import generated
from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd.collect import (
    ACCUMULATE, AOTGRAD, AUTOCAST, CUSTOM, TRACED, UNDEFINED, autocast_state, custom_arguments_known, kind_of, node_class,
    step_hooks, traced_values)
from aotgrad.compiled_autograd.dynamic import SizeValues, contiguous_layout, layout
from aotgrad.compiled_autograd.saved import EagerFallback


class _Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}

    def const(self, value) -> str:
        name = f"C{len(self.constants)}"
        self.constants[name] = value
        return name

    def __call__(self, text: str, indent: int = 2) -> None:
        self.lines.append("    " * indent + text)


class _ListSizes(SizeValues):
    """SizeValues over an existing list (for collect.traced_values on the rare path)."""

    def __init__(self, values: list):
        self.values = values


def _saved_check(w: _Writer, name: str, meta, indent: int = 2) -> str:
    """`name` has the template's dtype, rank, device and layout (dynamic.layout; a 0-dim tensor
    has one layout, and a contiguous one is told without calling `layout`). Returns the name
    of the variable holding its shape (read once: `.shape` builds a new tuple)."""
    dtype, device, dim, memory = meta
    shape = f"{name}_shape"
    w(f"if {name} is None: return None", indent)
    w(f"{shape} = {name}.shape", indent)
    on_device = f"not {name}.is_cpu" if device.type == "cpu" else f"{name}.device != {w.const(device)}"
    check = f"len({shape}) != {dim} or {name}.dtype is not {w.const(dtype)} or {on_device}"
    if dim and memory == contiguous_layout(dim):  # (layout's own fast test, written out)
        check += f" or (({name}.layout is not strided or not ({name}.is_contiguous() and " \
                 f"{name}.storage_offset() == 0 and 1 not in {shape})) and layout({name}) != {w.const(memory)})"
    elif dim:
        check += f" or layout({name}) != {w.const(memory)}"
    else:  # (a 0-dim sparse tensor: layout tells it, read only for other ranks)
        check += f" or {name}.layout is not strided"
    w(f"if {check}: return None", indent)
    return shape


def _traced_step(w: _Writer, record, index: int) -> list[str] | None:
    """A built-in node's saved tensors and values; the names of their shapes (in order)."""
    if any(record.raw_lists):
        return None  # (saved tensor lists: replay.match serves them)
    names = []
    position = 0
    for raw_attr, getter in record.layout.tensors:
        if position >= len(record.saved):
            return None
        meta = record.saved[position]
        w(f"r = n.{raw_attr}")
        if meta is None:
            w("if type(r) is list or type(r) is tuple: return None")
            w(f"if r is not None and (r.unpack_hook is not None or n.{getter} is not None): return None")
        else:
            name = f"s{position}"
            w("if type(r) is not SavedTensor or r.unpack_hook is not None: return None")
            w(f"{name} = n.{getter}")
            names.append(_saved_check(w, name, meta))
            w(f"raws.append(r); values.append({name}); owners.append(n)")
        position += 1
    if position != len(record.saved):
        return None
    if record.plain_values is None:
        w(f"if traced_values(n, {w.const(record.layout)}, {index}, _ListSizes(sizes), None) != "
          f"{w.const(record.values)}: return None")
    elif record.plain_values:
        w(f"v = {w.const(record.read_values)}(n)")
        for q, expected in enumerate(record.plain_values):
            if q in record.symbolic:
                w(f"x = v[{q}]")
                if expected is None:
                    w("if x is not None: return None")
                else:
                    w("if x is None: return None")
                    w("items = x if isinstance(x, (list, tuple)) else (x,)")
                    w(f"if len(items) != {expected}: return None")
                    w("ext(items)")
            else:
                w(f"if v[{q}] != {w.const(expected)}: return None")
    return names


def _ctx_step(w: _Writer, record) -> list[str]:
    """A custom Function's (or aotgrad's own) saved tensors, read through its ctx."""
    names = []
    w("rs = n._raw_saved_tensors")
    w(f"if len(rs) != {len(record.saved)}: return None")
    w("if any(r is not None and r.unpack_hook is not None for r in rs): return None")
    w("st = n.saved_tensors if any(r is not None for r in rs) else (None,) * len(rs)")
    for p, meta in enumerate(record.saved):
        if meta is None:
            w(f"if rs[{p}] is not None and st[{p}] is not None: return None")
        else:
            name = f"s{p}"
            w(f"{name} = st[{p}]")
            w(f"if rs[{p}] is None: return None")
            names.append(_saved_check(w, name, meta))
            w(f"raws.append(rs[{p}]); values.append({name}); owners.append(n)")
    return names


def generate(template) -> Callable | None:
    """The straight-line matcher of `template` (module docstring), or None."""
    from aotgrad.compiled_autograd.replay import _OUTSIDE

    w = _Writer()
    w(f"if accumulate_grad is not {template.accumulate_grad} or len(root_edges) != {len(template.roots)} "
      f"or len(input_edges) != {len(template.inputs)}: return None", 1)
    if template.structure[AUTOCAST] is None:  # (no autocast region active: one call answers, the common case)
        w("if any_autocast_enabled(): return None", 1)
    else:
        w(f"if autocast_state() != {w.const(template.structure[AUTOCAST])}: return None", 1)
    resolved: set = set()
    for k, (i, nr) in enumerate(template.roots):
        w(f"e = root_edges[{k}]", 1)
        w(f"if e.output_nr != {nr}: return None", 1)
        if i in resolved:
            w(f"if e.node is not n{i}: return None", 1)
        else:
            w(f"n{i} = e.node", 1)
            resolved.add(i)
    w("sizes = []", 1)
    w("ext = sizes.extend", 1)
    for k, meta in enumerate(template.structure[3]):
        w(f"g = root_grads[{k}]", 1)
        w(f"ext({_saved_check(w, 'g', meta, 1)})", 1)
    w("probe = node_hooks_may_exist()", 1)
    w("retaining = retaining_by_node()", 1)
    w("look = probe or bool(retaining)", 1)
    w("objects = []; keeps = []; raws = []; values = []; owners = []; outside = []", 1)
    w("try:", 1)
    for index, record in enumerate(template.steps, start=1):
        i = index - 1
        if i not in resolved:
            return None  # (every step is reached from a root or an earlier step)
        w(f"n = n{i}  # {record.type.__name__} (NodeCall {index})")
        w(f"if type(n) is not {w.const(record.type)}: return None")
        w("nf = n.next_functions")
        w(f"if len(nf) != {len(record.children)}: return None")
        for k, child in enumerate(record.children):
            if child is None:
                w(f"if nf[{k}][0] is not None: return None")
            elif child is _OUTSIDE:
                w(f"c = nf[{k}][0]")
                w(f"if type(c) is not {w.const(template.accumulate_type)}: return None")
                w("outside.append(c)")
            else:
                j, nr = child
                w(f"c = nf[{k}]")
                w(f"if c[1] != {nr}: return None")
                if j in resolved:
                    w(f"if c[0] is not n{j}: return None")
                else:
                    w(f"n{j} = c[0]")
                    resolved.add(j)
        kind = record.kind
        if record.forward_cls:
            w(f"if kind_of(n) is not {w.const(kind)} or node_class({w.const(kind)}, n) != "
              f"{w.const(record.node_class)}: return None")
        if kind is ACCUMULATE:  # (a leaf's hooks: the two step_hooks reads when nothing else is looked for)
            w("leaf = n.variable")
            w("h = step_hooks(n, leaf, probe, retaining) if look or leaf._backward_hooks "
              "or leaf._post_accumulate_grad_hooks is not None else NO_HOOKS")
        else:
            w("h = step_hooks(n, None, probe, retaining) if look else NO_HOOKS")
        saved: list[str] = []
        if record.runs:
            if kind is TRACED:
                names = _traced_step(w, record, index)
                if names is None:
                    return None
                saved = names
            elif kind is AOTGRAD:
                saved = _ctx_step(w, record)
                w(f"if tuple(n.saved_sizes) != {w.const(record.values)}: return None")
            elif kind is CUSTOM:
                w("custom_arguments_known(n)")
                saved = _ctx_step(w, record)
                w("objects.append(n)")
            elif kind is ACCUMULATE:
                w("if leaf.layout is not strided: return None")
                w("objects.append(leaf)")
            elif kind is not UNDEFINED:
                w("objects.append(n); keeps.append(n)" if record.holds_state else "objects.append(n)")
        elif record.saved:
            return None
        if record.hooks == hook_lookup.NO_HOOKS.shape():  # (NO_HOOKS has it: asked only of other hooks)
            w("if h is not NO_HOOKS:")
            w(f"    if h.shape() != {w.const(record.hooks)}: return None")
            w("    objects.extend(h.callables())")
        else:
            w(f"if h.shape() != {w.const(record.hooks)}: return None")
            w("if h is not NO_HOOKS: objects.extend(h.callables())")
        for shape in saved:
            w(f"ext({shape})")
        w("md = n._input_metadata")
        w(f"if len(md) != {len(record.metadata)}: return None")
        for q, (dim, dtype, device) in enumerate(record.metadata):
            w(f"m = md[{q}]")
            w("sh = m.shape")
            w(f"if len(sh) != {dim} or m.dtype is not {w.const(dtype)} or m.device != {w.const(device)}: return None")
            w("ext(sh)")
    w("except (RuntimeError, EagerFallback):", 1)
    w("return None", 2)
    count = len(template.steps)
    w(f"nodes = {{{', '.join(f'n{i}' for i in range(count))}}}", 1)  # (nodes hash by identity)
    w(f"if len(nodes) != {count}: return None", 1)
    w("if outside and any(c in nodes for c in outside): return None", 1)
    for k, (i, nr) in enumerate(template.inputs):
        w(f"e = input_edges[{k}]", 1)
        w(f"if e.node is not n{i} or e.output_nr != {nr}: return None", 1)
    if count > 1:  # (replay._same_seq_pattern as one chained comparison)
        chain = f"n{template.seq_order[0]}._sequence_nr()"
        for i, tie in zip(template.seq_order[1:], template.seq_ties):
            chain += f" {'==' if tie else '<'} n{i}._sequence_nr()"
        w(f"if not ({chain}): return None", 1)
    w(f"return Hit({w.const(template.entries)}, sizes, objects, keeps, root_grads, raws, values, owners)", 1)
    return _compile(w)


def _compile(w: _Writer) -> Callable:
    from aotgrad.compiled_autograd import replay

    source = "def matcher(root_edges, input_edges, root_grads, accumulate_grad):\n" + "\n".join(w.lines) + "\n"
    filename = f"<aotgrad replay matcher {hash(source) & 0xFFFFFFFFFFFF:x}>"
    namespace = dict(w.constants, strided=torch.strided, layout=layout, kind_of=kind_of, node_class=node_class, step_hooks=step_hooks,
                     traced_values=traced_values, custom_arguments_known=custom_arguments_known,
                     autocast_state=autocast_state, any_autocast_enabled=torch._C._is_any_autocast_enabled,
                     NO_HOOKS=hook_lookup.NO_HOOKS, node_hooks_may_exist=hook_lookup.node_hooks_may_exist,
                     retaining_by_node=hook_lookup.retaining_by_node, EagerFallback=EagerFallback,
                     _ListSizes=_ListSizes, SavedTensor=torch._C._autograd.SavedTensor, Hit=replay.Hit)
    matcher = generated.define(source, filename, namespace, "matcher")
    matcher.source = source
    return matcher
