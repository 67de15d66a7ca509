"""Captured graphs by key, the counters, and why a lookup missed.

In: a `compiler_fn`, a structure and its sizes from `collect`. Out: the entry whose graph
serves them: same structure, same sizes where the graph has none, and the graph's guards
hold where it has symbols. On a miss, `plan_capture` says which sizes the new graph makes
symbols: those that already were, and those that changed since the last graph of this
structure (the others stay as they are). `count` counts in
`aotgrad.counters["compiled_autograd"]`: captures (cache misses), compiles (`compiler_fn`
calls), hits (backward calls a cached graph ran), eager_fallbacks (backward calls PyTorch's
engine ran instead).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from aotgrad.compiled_autograd import key as parts
from aotgrad.compiled_autograd.key import STEP_HOOKS, STEP_VALUES

HEADER = len(parts.HEADER)  # key entries before the first step's
from aotgrad.observe.counting import counters

_graphs: dict[tuple, list["Entry"]] = {}   # (compiler id, structure) -> entries, newest first
_compilers: dict[int, Callable] = {}        # kept alive: their ids stay theirs



@dataclass
class Entry:
    """A compiled graph, the sizes it was captured with, which of them are symbols in it, and
    the guards on those symbols."""
    compiled: Any           # None: this structure runs on PyTorch's engine (capturing it failed)
    sizes: list[int]        # the sizes it was captured with
    dynamic: frozenset      # positions that are symbols in it
    guards: Any             # dynamic.Guards, or None for a graph without symbols

    def serves(self, sizes: list[int]) -> bool:
        if sizes == self.sizes:
            return self.guards is None or self.guards.hold(sizes)
        dynamic = self.dynamic
        if len(sizes) != len(self.sizes):
            return False
        for i, (a, b) in enumerate(zip(sizes, self.sizes)):
            if a != b and i not in dynamic:
                return False
        return self.guards is None or self.guards.hold(sizes)


def count(name: str) -> None:
    counters["compiled_autograd"][name] += 1


def lookup(compiler_fn: Callable, structure: tuple, sizes: list[int]) -> Entry | None:
    """The newest entry of this compiler and structure that serves these sizes, or None."""
    return serving(_graphs.get((id(compiler_fn), structure), ()), sizes)


def serving(entries: list[Entry], sizes: list[int]) -> Entry | None:
    """The first of `entries` that serves these sizes, or None."""
    for entry in entries:
        if entry.serves(sizes):
            return entry
    return None


def entries_of(compiler_fn: Callable, structure: tuple) -> list[Entry]:
    """The live list of this compiler's entries for a structure (`store` adds to it): a
    replay template keeps it, so a hit does not hash the structure."""
    _compilers[id(compiler_fn)] = compiler_fn
    return _graphs.setdefault((id(compiler_fn), structure), [])


def store(compiler_fn: Callable, structure: tuple, entry: Entry) -> None:
    """Add an entry (looked up before the older ones of its structure)."""
    _compilers[id(compiler_fn)] = compiler_fn
    _graphs.setdefault((id(compiler_fn), structure), []).insert(0, entry)


def plan_capture(compiler_fn: Callable, structure: tuple, sizes, plans: list) -> tuple[frozenset, list[str]]:
    """The dynamic positions of the graph to capture for this miss, and why it missed."""
    entries = _graphs.get((id(compiler_fn), structure))
    if not entries:
        return frozenset(), [_new_node_reason(compiler_fn, structure, plans)]
    last = entries[0]
    changed = [i for i, (a, b) in enumerate(zip(sizes.values, last.sizes)) if a != b]
    new = [i for i in changed if i not in last.dynamic and sizes.capable[i] and sizes.values[i] >= 2
           and last.sizes[i] >= 2]
    dynamic = frozenset(i for i in last.dynamic | set(new) if sizes.values[i] >= 2)
    reasons = [f"changed shapes: marking size idx {i} of {owner_label(plans, sizes.owners[i])} as dynamic" for i in new]
    reasons += [f"changed shapes: size idx {i} of {owner_label(plans, sizes.owners[i])} stays static "
                f"({'0 or 1' if sizes.values[i] < 2 else 'its node reads it as a constant'})"
                for i in changed if i not in last.dynamic and i not in new]
    return dynamic, reasons


def owner_label(plans: list, owner: int) -> str:
    return "torch::autograd::GraphRoot (NodeCall 0)" if owner == 0 else plans[owner - 1].label


def _new_node_reason(compiler_fn: Callable, structure: tuple, plans: list) -> str:
    """What makes this structure new, against the stored one that agrees longest with it: the
    autocast state, one node's hooks or saved values, or a new node."""
    previous = [k for (fn_id, k) in _graphs if fn_id == id(compiler_fn)]
    for other in previous:  # one part of the header alone differs (key.HEADER: autocast, order, ...)
        differing = [i for i, (a, b) in enumerate(zip(other[:HEADER], structure[:HEADER])) if a != b]
        if len(differing) == 1 and other[HEADER:] == structure[HEADER:]:
            i = differing[0]
            return f"{parts.HEADER[i].name} during the backward changed: {other[i]} -> {structure[i]}"
    best_len, closest = -1, None
    for other in previous:
        n = 0
        for a, b in zip(structure, other):
            if a != b:
                break
            n += 1
        if n > best_len:
            best_len, closest = n, other
    sizes = sorted(len(k) for k in previous)
    owner = 0 if best_len < HEADER else min(best_len - HEADER, len(plans) - 1) + 1
    if closest is not None and HEADER <= best_len < min(len(structure), len(closest)):
        changed = _changed_part(closest[best_len], structure[best_len])
        if changed is not None:
            return f"{changed[0]} of {owner_label(plans, owner)} changed: {changed[1]} -> {changed[2]}"
    return f"new autograd node: {owner_label(plans, owner)} with key size {len(structure)}, previous key sizes={sizes}"


def _changed_part(old: tuple, new: tuple) -> tuple[str, str, str] | None:
    """(what, before, after) when two steps' key entries differ only in their hooks or only in
    their saved non-tensor values; None otherwise (a different node)."""
    differing = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    if len(old) != len(new) or len(differing) != 1:
        return None
    if differing == [STEP_HOOKS]:
        return "hooks", _hooks_text(old[STEP_HOOKS]), _hooks_text(new[STEP_HOOKS])
    if differing == [STEP_VALUES]:
        return "saved values", repr(old[STEP_VALUES]), repr(new[STEP_VALUES])
    return None


def _hooks_text(shape: tuple) -> str:
    """hooks.NodeHooks.shape() for people."""
    tensor, retain, pre, post, post_accumulate = shape
    parts = [f"tensor hooks on gradient {list(tensor)}" if tensor else "",
             f"retain_grad on {list(retain)}" if retain else "", "pre-hooks" if pre else "",
             "post-hooks" if post else "", "post-accumulate-grad hooks" if post_accumulate else ""]
    return ", ".join(p for p in parts if p) or "none"


def reset() -> None:
    _graphs.clear()
    _compilers.clear()
    counters["compiled_autograd"].clear()
