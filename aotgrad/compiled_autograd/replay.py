"""A cache hit, the fast way: this backward's autograd graph checked against the key of one
seen before, and its graph inputs read, with no heap walk and no key built.

In: the roots, `inputs=` and root gradients of a backward call, and the `Template`s of this
compiler (one per key collect built for a backward that was captured or hit the cache the slow
way). Out: a `Hit` (the cache entries of that key, this call's sizes, the objects, and the saved
tensors still in their nodes), or None when no template matches.

A template's check is Python generated from its key by key.py's parts (replay_code.py): every
part of the key is checked, by the same part that read it, so a match means collect would build
the same structure; the sizes come out in collect's order for `cache.lookup`. Reading saved
tensors through their nodes' getters runs autograd's version check and changes nothing: a
template that does not match leaves the graph as it found it. Only `Hit.take` changes the graph:
without retain_graph each saved tensor is handed to the graph's input list by
`SavedTensor.register_hooks` (the node drops it; unpacking it again raises eager's error).
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from aotgrad.compiled_autograd.collect import Collected
from aotgrad.compiled_autograd.replay_code import Hit, generate

_KEEP = 8              # templates kept per compiler, most recently used first


class Template:
    """A key with its generated check (`matcher(root_edges, input_edges, root_grads,
    accumulate_grad) -> Hit | None`) and the cache's entries of that key (cache.entries_of)."""
    __slots__ = ("structure", "entries", "matcher")

    def __init__(self, structure: tuple, entries: list, matcher: Callable):
        self.structure = structure
        self.entries = entries
        self.matcher = matcher


def make_template(collected: Collected, entries: list) -> Template | None:
    """The template of a collected key; None where some part cannot be checked by code (a graph
    reaching nodes the walk leaves out, a root or input the walk does not reach)."""
    matcher = generate(collected.structure, entries)
    return Template(collected.structure, entries, matcher) if matcher is not None else None


class Templates:
    """The templates of one compiler, most recently used first (threads share them)."""

    def __init__(self):
        self._by_structure: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._newest: Template | None = None  # the most recently used (a hint, read without the lock)

    def find(self, root_edges: list, input_edges: list, root_grads: list, accumulate_grad: bool) -> Hit | None:
        for template in reversed(list(self._by_structure.values())):
            hit = template.matcher(root_edges, input_edges, root_grads, accumulate_grad)
            if hit is not None:
                if template is not self._newest:  # (a key is a large tuple: hashing it on every hit costs)
                    with self._lock:
                        if template.structure in self._by_structure:
                            self._by_structure.move_to_end(template.structure)
                            self._newest = template
                return hit
        return None

    def knows(self, structure: tuple) -> bool:
        return structure in self._by_structure

    def remember(self, template: Template) -> None:
        with self._lock:
            self._by_structure[template.structure] = template
            self._by_structure.move_to_end(template.structure)
            self._newest = template
            while len(self._by_structure) > _KEEP:
                self._by_structure.popitem(last=False)


_templates: dict[int, Templates] = {}


def templates_of(compiler_fn: Callable) -> Templates:
    found = _templates.get(id(compiler_fn))
    if found is None:
        found = _templates[id(compiler_fn)] = Templates()
    return found


def reset() -> None:
    _templates.clear()
