"""The fast check of a key, written out as straight-line Python by key.py's parts.

In: a key (collect's structure) and the cache entries of that key. Out: a function
`matcher(root_edges, input_edges, root_grads, accumulate_grad) -> Hit | None` that checks a
later backward against every part of the key, with the key's constants in place (no loop over
steps, no lookups), or None when some part cannot be checked by code. The header parts come
first (the roots resolve their nodes: `n3 = e.node`), then each step's parts (its edges resolve
later steps' nodes), then the parts checked after the steps and the check that the steps are
distinct nodes (a node reached twice is one step; key.py's module docstring shows a step).
A `Hit` is what a matcher returns on a match (replay.py hands it to the engine).
"""
from __future__ import annotations

from typing import Callable

import torch

from aotgrad.compiled_autograd import calls
from aotgrad.compiled_autograd import hooks as hook_lookup
from aotgrad.compiled_autograd import key as parts
from aotgrad.compiled_autograd import kinds
from aotgrad.compiled_autograd.dynamic import layout
from aotgrad.compiled_autograd.saved import EagerFallback, hashable, packed_by_user
from aotgrad.persistence import generated

_NODE_CLASS = next(i for i, p in enumerate(parts.STEP) if isinstance(p, parts.NodeClass))
_EDGES = next(i for i, p in enumerate(parts.STEP) if isinstance(p, parts.Edges))


class Writer:
    """The lines and constants of one matcher, and what the parts of the step being written
    need to know: its number, kind, node type and whether it runs; which steps' nodes are known."""

    def __init__(self):
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}
        self.indent = 1
        self.resolved: set = set()
        self.index = 0
        self.kind = None
        self.node_type = None
        self.runs = False

    def const(self, value) -> str:
        name = f"C{len(self.constants)}"
        self.constants[name] = value
        return name

    def __call__(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def node_from(self, step: int, expression: str) -> None:
        """Step `step`'s node is `expression`: named the first time, compared after."""
        if step in self.resolved:
            self(f"if {expression} is not n{step}: return None")
        else:
            self(f"n{step} = {expression}")
            self.resolved.add(step)


class Hit:
    """A matched backward: the cache entries of its structure, its sizes, the graph's objects, and the saved
    tensors (with the SavedTensor each came from) to hand to the graph."""
    __slots__ = ("entries", "sizes", "objects", "keeps_state", "root_grads", "raws", "values", "owners")

    def __init__(self, entries, sizes, objects, keeps_state, root_grads, raws, values, owners):
        self.entries = entries
        self.sizes = sizes
        self.objects = objects
        self.keeps_state = keeps_state
        self.root_grads = root_grads
        self.raws = raws        # SavedTensor per saved tensor, in the graph's input order
        self.values = values    # the tensors their getters gave
        self.owners = owners    # the node each came from

    def take(self, keep_graph: bool) -> list:
        """The graph's input list: root gradients, then the saved tensors. Without keep_graph
        they are taken out of their nodes (the list is then their only holder)."""
        inputs = list(self.root_grads)
        if keep_graph:  # the nodes keep them; a saved output is passed without its history
            inputs.extend(v.detach() if v.grad_fn is node else v for v, node in zip(self.values, self.owners))
        else:
            self.values = None
            for raw in self.raws:
                raw.register_hooks(inputs.append, calls.freed)  # a later unpack raises eager's error
            if len(inputs) != len(self.root_grads) + len(self.raws):
                raise AssertionError("compiled autograd: a saved tensor was not handed over")
        self.raws = self.owners = None
        return inputs


def generate(structure: tuple, entries: list) -> Callable | None:
    """The straight-line matcher of a key (module docstring), or None."""
    w = Writer()
    header = structure[:len(parts.HEADER)]
    later = []
    for part, piece in zip(parts.HEADER, header):
        if getattr(part, "after_steps", False):
            later.append((part, piece))
        elif not part.emit(w, piece):
            return None
    w("probe = node_hooks_may_exist()")
    w("retaining = retaining_by_node()")
    w("look = probe or bool(retaining)")
    w("objects = []; keeps = []; raws = []; values = []; owners = []; outside = []")
    w("try:")
    w.indent = 2
    steps = structure[len(parts.HEADER):]
    for i, entry in enumerate(steps):
        if i not in w.resolved:
            return None  # (every step is reached from a root or an earlier step)
        w.index = i + 1
        w.node_type, w.kind, _ = entry[_NODE_CLASS]
        w.runs = entry[_EDGES][0]
        w(f"n = n{i}")
        for part, piece in zip(parts.STEP, entry):
            if not part.emit(w, piece):
                return None
    w.indent = 1
    w("except (RuntimeError, EagerFallback):")  # an error or a fallback: collect says it in its order
    w("    return None")
    count = len(steps)
    w(f"nodes = {{{', '.join(f'n{i}' for i in range(count))}}}")  # (nodes hash by identity)
    w(f"if len(nodes) != {count}: return None")
    w("if outside and any(c in nodes for c in outside): return None")
    for part, piece in later:
        if not part.emit(w, piece):
            return None
    w(f"return Hit({w.const(entries)}, sizes, objects, keeps, root_grads, raws, values, owners)")
    source = ("def matcher(root_edges, input_edges, root_grads, accumulate_grad):\n"
              "    sizes = []\n    ext = sizes.extend\n" + "\n".join(w.lines) + "\n")
    filename = f"<aotgrad replay matcher {hash(source) & 0xFFFFFFFFFFFF:x}>"
    namespace = dict(w.constants, strided=torch.strided, layout=layout, kind_of=kinds.kind_of,
                     node_class=kinds.node_class, step_hooks=parts.step_hooks, hashable=hashable,
                     packed_by_user=packed_by_user, custom_arguments_known=parts.custom_arguments_known,
                     autocast_state=parts.autocast_state, any_autocast_enabled=torch._C._is_any_autocast_enabled,
                     NO_HOOKS=hook_lookup.NO_HOOKS, node_hooks_may_exist=hook_lookup.node_hooks_may_exist,
                     retaining_by_node=hook_lookup.retaining_by_node, EagerFallback=EagerFallback,
                     SavedTensor=torch._C._autograd.SavedTensor, Hit=Hit)
    matcher = generated.define(source, filename, namespace, "matcher")
    matcher.source = source
    return matcher
