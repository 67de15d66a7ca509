"""The runtime wrapper, generated per graph as straight-line Python that does only what the
graph needs.

One function is generated here (CompiledFunction's forward and backward are made of steps,
runtime/forward.py and runtime/backward.py, written with the same `Code`, runtime/lower.py):

- `call_code(...)`: a whole call of an `AotFunction` entry: checks that the call's inputs are
  those the entry was compiled for (what its cache key says), runs the Function, writes back
  mutated inputs and rebuilds outputs (epilogue), and returns the user's outputs. It returns
  `MISS` when the inputs differ, and the caller then looks the entry up the general way.

A graph without mutations or aliases gets no write-back and no alias code at all
(`aot_function(lambda x, w: (x * w).sum(), nop)` called with f32[3] and a leaf f32[3]
requiring grad; under torch.compile the checks dynamo's guards make are left out):

    def call(args):  # <lambda>
        if len(args) != 2:
            return MISS
        a0, a1, = args
        if not (grad_enabled() is True
                and type(a0) is c2
                and a0.shape == c0
                and a0.stride() == c1
                and a0.storage_offset() == 0
                and a0.dtype is c3
                and a0.device == c4
                and a0.requires_grad is False
                and type(a1) is c2
                ...
                and a1.requires_grad is True
                and a1.is_leaf is True
                and len({id(a0), id(a1)}) == 2):
            return MISS
        outs = (apply if functorch_active() else fast_apply)(plan, a0, a1)
        return_values = [outs[0]]
        return return_values[0]

Each generated function keeps its source (`.source`); the compile's record
(`phases.CompileRecord.wrapper`) holds it with the forward's and backward's, for people.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

from aotgrad.analysis import OutputKind
from aotgrad.runtime.lower import Code, emit_all

MISS = object()  # call_code's answer when a call's inputs are not the entry's


# -- a whole call ------------------------------------------------------------------

def _tensor_checks(code: Code, name: str, key: tuple, dynamic: bool, kind: type, guarded: bool) -> list[str]:
    """Conditions that input `name` is a `kind` (torch.Tensor, nn.Parameter) with the metadata
    in its cache-key part `key`. `guarded`: dynamo's guards have checked its type, dtype,
    device, requires_grad, sizes and strides already (the leafness and offset remain)."""
    checks = []
    if dynamic:  # (dim, dtype, device, requires_grad, leaf requiring grad): sizes are dynamo's to guard
        dim, dtype, device, requires_grad, leaf = key
        if not guarded:
            checks.append(f"{name}.dim() == {dim}")
    else:
        shape, stride, offset, dtype, device, requires_grad, leaf = key
        if not guarded:
            checks += [f"{name}.shape == {code.const(shape)}", f"{name}.stride() == {code.const(tuple(stride))}"]
        checks.append(f"{name}.storage_offset() == {offset}")
    if not guarded:
        checks = [f"type({name}) is {code.const(kind)}", *checks, f"{name}.dtype is {code.const(dtype)}",
                  f"{name}.device == {code.const(device)}", f"{name}.requires_grad is {requires_grad}"]
    if requires_grad:
        checks.append(f"{name}.is_leaf is {leaf}")
    return checks


def call_code(fn_name: str, key: tuple, types: Sequence[type], dynamic: bool, runtime,
              out_spec, guarded: bool = False) -> Callable | None:
    """`call(args) -> user outputs | MISS` for an AotFunction entry compiled for the flat
    positional tensors described by `key` (AotFunction._flat_entry's key), of these `types`;
    None when the entry needs more than a straight call (duplicated inputs, inputs sharing
    memory, leaves made inside). `guarded`: dynamo calls it, having checked part of the key."""
    from aotgrad.runtime.function import CompiledFunction, InferenceRuntime, TrainingRuntime

    count, source, storage_groups, grad_mode, tensor_keys = key
    if source != tuple(range(count)) or storage_groups != tuple(range(count)):
        return None  # duplicated or memory-sharing inputs: the general path (dedupe, synthetic bases)
    if not isinstance(runtime, (TrainingRuntime, InferenceRuntime)) or getattr(runtime, "dead_ends", None):
        return None  # leaves made inside, outputs with a grad_fn reaching nothing: the general path
    code = Code("call")
    code.const(MISS, "MISS")
    code.const(torch.is_grad_enabled, "grad_enabled")
    args = [f"a{i}" for i in range(count)]
    code(f"def call(args):  # {fn_name}")
    code(f"    if len(args) != {count}:")
    code("        return MISS")
    if args:
        code(f"    {', '.join(args)}, = args")
    checks = [f"grad_enabled() is {grad_mode}"]
    for name, tensor_key, kind in zip(args, tensor_keys, types):
        checks += _tensor_checks(code, name, tensor_key, dynamic, kind, guarded)
    if count > 1:  # distinct tensors (the key's dedupe; memory sharing is the storage check below)
        checks.append(f"len({{{', '.join(f'id({a})' for a in args)}}}) == {count}")
    code("    if not (" + "\n            and ".join(checks) + "):")
    code("        return MISS")
    epilogue = runtime.epilogue
    if epilogue.write_backs or epilogue.metadata or any(o.kind in (OutputKind.INPUT, OutputKind.ALIAS_OF_INPUT)
                                                         for o in epilogue.outputs):
        # a write into an input, or an output that is an input or views one: which inputs share
        # memory was part of the compile (the key's storage groups)
        storages = ", ".join(f"{a}.untyped_storage()._cdata" for a in args)
        code(f"    if len({{{storages}}}) != {count}:")
        code("        return MISS")
    if isinstance(runtime, TrainingRuntime):
        _training_call(code, runtime, args, CompiledFunction)
    else:
        code(f"    with {code.const(torch.no_grad, 'no_grad')}():")
        code(f"        outs = {code.const(runtime.forward, 'forward')}([{', '.join(args)}])")
    _epilogue(code, epilogue, args)
    _unflatten(code, out_spec)
    return code.build()


def _training_call(code: Code, runtime, args: list[str], function) -> None:
    from aotgrad.runtime.function import fast_apply

    plan = runtime.plan
    applied = list(args)
    for i in plan.detached_inputs:
        applied[i] = f"d{i}"
        code(f"    d{i} = {args[i]}.detach()  # requires grad, gets none: no edge to it")
    arguments = f"({code.const(plan, 'plan')}{''.join(', ' + a for a in applied)})"
    code.const(function.apply, "apply")
    if plan.backward_inlinable:  # (else compiled autograd calls its backward as a custom Function's)
        code.const(fast_apply, "fast_apply")
        code.const(torch._C._are_functorch_transforms_active, "functorch_active")
        call = f"(apply if functorch_active() else fast_apply){arguments}"
    else:
        call = f"apply{arguments}"
    if runtime.enable_grad:
        code("    if not grad_enabled():  # the function turns grad mode on inside")
        code(f"        with {code.const(torch.enable_grad, 'enable_grad')}():")
        code(f"            outs = {call}")
        code("    else:")
        code(f"        outs = {call}")
    else:
        code(f"    outs = {call}")


def _epilogue(code: Code, epilogue, args: list[str]) -> None:
    """The epilogue's steps written out where they are plain (fresh outputs, inputs returned,
    BatchNorm-style write-backs); else one line running them (`Epilogue.run`)."""
    if not emit_all(code, epilogue.steps):
        code(f"    return_values = {code.const(epilogue, 'epilogue')}.run([{', '.join(args)}], outs)")


def _unflatten(code: Code, out_spec: Any) -> None:
    spec = out_spec[0]
    if spec is None:
        code("    return return_values")
    elif spec.type in (tuple, list) and all(child.is_leaf() for child in spec.children()):
        code(f"    return {spec.type.__name__}(return_values)")
    elif spec.is_leaf():
        code("    return return_values[0]")
    else:
        code(f"    return {code.const(pytree.tree_unflatten, 'unflatten')}(return_values, {code.const(spec)})")
