"""Graphs called with one list of arguments that they empty: "boxed" calls.

A backward graph's saved activations are its arguments. Called as `f(*args)`, the
argument tuple keeps every one of them alive until the graph returns, so the
backward's peak memory holds all activations and all gradients at once. A boxed
graph takes a list, moves the values into locals and clears the list; FX's code
already drops each local after its last use, so each activation is freed as soon
as the graph is done with it, as eager's engine frees them. That lets the
allocator hand the freed blocks to the gradients computed next instead of asking
the system for new pages (measured on the CNN benchmark: fewer page faults and a
faster step).

A compiled graph says it takes one list with `fn._boxed_call = True`, the
convention torch's graph compilers share (Inductor's compiled graphs do). The
runtime calls every compiled graph boxed; `as_boxed` adapts the others.

    def forward(self, primals_1, relu, tangents_1):        # FX's code for the backward
    def forward(self, args):                               # its boxed twin
        primals_1, relu, tangents_1, = args
        args.clear()
"""
from __future__ import annotations

import re
from typing import Callable

import torch
import torch.fx as fx

from aotgrad.persistence import generated


def is_boxed(fn: Callable) -> bool:
    return getattr(fn, "_boxed_call", False) is True


def as_boxed(fn: Callable) -> Callable:
    """`fn` called with one list of arguments."""
    if is_boxed(fn):
        return fn

    def boxed(args: list):
        return fn(*args)
    boxed._boxed_call = True
    return boxed


def without_autocast(fn: Callable) -> Callable:
    """`fn`, boxed, run with autocast off where the caller has it on. A traced graph records
    the ops autocast chose, casts included (`_to_copy` to bf16 before a matmul); run under
    the caller's autocast, autocast would cast again, at the top of each op the graph calls
    (an op the trace ran in float32 inside a composite, `baddbmm` in SDPA's math, would run
    in bf16, and a later op reading it fails or rounds otherwise). PyTorch's AOTAutograd runs
    its compiled graphs the same way."""
    fn = as_boxed(fn)

    def run(args: list):
        if torch._C._is_any_autocast_enabled():
            with torch._C._DisableAutocast():
                return fn(args)
        return fn(args)
    run._boxed_call = True
    run.__wrapped__ = fn  # the compiled graph itself
    return run


def boxed_graph(gm: fx.GraphModule) -> Callable:
    """`gm`'s generated code, taking one list that it clears (the same code otherwise).

    Built from the code FX already generated (one `exec`; regenerating it from the
    graph costs ~30 ms on a GPT backward). Falls back to `as_boxed(gm)` if the code
    does not start the way FX writes it."""
    src, namespace = _fx_code(gm)
    heads = _HEAD.findall(src)
    if len(heads) != 1 or src.count("def forward(") != 1:
        return as_boxed(gm)
    names = heads[0][2:]
    head = f"def forward(self{heads[0]}):"
    unpack = f"\n    {names}, = args\n    args.clear()" if names else ""
    src = _direct_op_calls(src.replace(head, "def forward(self, args):" + unpack), namespace)
    filename = f"<aotgrad boxed graph {hash(src) & 0xFFFFFFFFFFFF:x}>"  # one entry per distinct code
    function = generated.define(src, filename, namespace, "forward")
    function._boxed_call = True
    return function.__get__(gm)  # a bound method; `_boxed_call` reads through to the function


_HEAD = re.compile(r"^def forward\(self((?:, \w+)*)\):$", re.MULTILINE)  # FX's, without defaults or annotations


def _fx_code(gm: fx.GraphModule) -> tuple[str, dict]:
    """FX's code for `gm` and a copy of the globals it runs with. A graph loaded from the disk
    cache carries the code it was stored with (graph_pickle.LoadedGraphModule): read, not compiled."""
    stored = getattr(gm, "stored_code", None)
    if stored is not None:
        return stored.src, dict(stored.globals)
    src = gm.code  # first: a lazy GraphModule compiles its forward here
    return src, dict(type(gm).forward.__globals__)


_OP_CALL = re.compile(r"torch\.ops\.(\w+)\.(\w+)\.(\w+)\(")


def _direct_op_calls(src: str, namespace: dict) -> str:
    """`torch.ops.aten.mm.default(a, b)` -> `aten_mm_default(a, b)`, the name bound to the
    overload's C++ callable (`OpOverload.__call__` only forwards to it): no attribute chain
    and no Python frame per op (about 1 us per op on this CPU)."""
    def direct(match: re.Match) -> str:
        namespace_name, op_name, overload_name = match.groups()
        try:
            overload = getattr(getattr(getattr(torch.ops, namespace_name), op_name), overload_name)
        except (AttributeError, RuntimeError):
            return match.group(0)
        if not isinstance(overload, torch._ops.OpOverload):
            return match.group(0)
        name = f"{namespace_name}_{op_name}_{overload_name}"
        namespace[name] = overload._op
        return name + "("
    return _OP_CALL.sub(direct, src)
