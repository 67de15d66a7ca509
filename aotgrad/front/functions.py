"""A compiled function and its cache of entries: AotFunction (aot_function's and
aot_module_simplified's result) and AotModule (aot_module's).

Each call flattens its inputs, keys the cache on what the compiled code assumed (keys.py), and
compiles on a miss (pipeline.compile_flat). Threads share the cache: a function compiles one
entry at a time, and a thread missing while another compiles waits, then looks again
(`_cached`).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

from aotgrad.errors import MutatedAliasedInputsError
from aotgrad.front.keys import (
    MISS, CallKey, CheckInputs, CheckStorages, call_key, dedupe, dynamic_tensor_key, key_changes, storage_groups,
    tensor_key)
from aotgrad.front.synthetic_base import SyntheticBase
from aotgrad.observe.phases import Origin, origin_of
from aotgrad.observe.torch_logs import log_recompile
from aotgrad.persistence import disk_cache
from aotgrad.pipeline import Options, compile_flat
from aotgrad.runtime import CompiledCall
from aotgrad.runtime.lower import Code, lower

log = logging.getLogger("aotgrad")


@dataclass
class _Entry:
    runtime: Callable
    out_spec: list
    synthetic_base: SyntheticBase | None
    guard: Callable | None = None  # dynamic=True: do these inputs satisfy the trace's size guards?
    call: Callable | None = None   # the generated straight-line call, for flat tensor calls (_generated_call)
    record: Any = None             # phases.CompileRecord of its compile


def _find(cache: dict, key: CallKey, tensors, keep) -> _Entry | None:
    """The entry for `key` whose guard the inputs pass (static entries have none)."""
    for entry in cache.get(key, ()):
        if entry.guard is None or entry.guard(tensors, keep):
            return entry
    return None


def _cached(cache: dict, key: CallKey, tensors, keep, compile_: Callable[[], _Entry], lock) -> _Entry:
    """The entry for `key` the inputs fit, else a new one. Entries are added whole, under
    `lock`: a thread that waited for another's compile finds its entry on the second look."""
    entry = _find(cache, key, tensors, keep)
    if entry is not None:
        return entry
    with lock:
        entry = _find(cache, key, tensors, keep)
        if entry is None:
            entry = compile_()
            cache.setdefault(key, []).append(entry)
    return entry


class AotFunction:
    """aot_function's result: compiles per input signature, then runs the cached runtime.

    The signature holds each tensor's shape and strides; with dynamic=True only its rank
    (sizes are symbols), and an entry is reused for new sizes when they pass the guards
    the trace recorded in its ShapeEnv.

    Threads may call it at once, first calls included: it compiles one entry at a time
    (`compile_lock`), and a thread wanting an entry another is compiling waits for it."""

    def __init__(self, fn: Callable, options: Options):
        self.fn = fn
        self.options = options
        # Held while compiling. Reentrant: a function that calls itself while being traced
        # compiles the inner call on the same thread instead of waiting for itself.
        self.compile_lock = threading.RLock()
        self._tensor_key = dynamic_tensor_key if options.dynamic else tensor_key
        self.cache: dict[CallKey, list[_Entry]] = {}
        self.flat_cache: dict[CallKey, list[_Entry]] = {}  # calls with positional tensors only
        self.__name__ = getattr(fn, "__name__", "fn")
        self.source: Callable = fn  # the user's code, which logs name (phases.Origin)
        # where the first compile came from (under torch.compile: Dynamo's frame), also named by
        # the logs of later compiles, which run outside Dynamo's compile
        self.origin: Origin | None = None
        self.input_names: list[str] | None = None  # for the recompiles log; None: "input 3"
        # positions, among the call's arguments, of the inputs that keep their memory from
        # call to call (a module's parameters and buffers): a graph compiler may skip checks on
        # them (Inductor's static_input_idxs: no alignment check, no copy into a CUDA graph's
        # memory). A synthetic base's compile has none (its inputs are not the caller's).
        self.static_positions: frozenset[int] = frozenset()
        self.last_graphs: tuple = ()
        self.disk_key: str | None = None  # the disk cache's key for fn (a graph), or why none (NotKeyed)
        self._fast: Callable | None = None  # the generated call of the entry used last

    def __call__(self, *args, **kwargs):
        fast = self._fast
        if fast is not None and not kwargs:  # the last entry's generated call (_generated_call)
            outs = fast(args)
            if outs is not MISS:
                return outs
        entry, tensors, keep = self._entry(args, kwargs)
        runtime, out_spec, synthetic_base = entry.runtime, entry.out_spec, entry.synthetic_base
        if synthetic_base is None:
            outs = runtime([tensors[i] for i in keep])
        else:
            outs = synthetic_base.run(runtime, tensors, keep)
        return pytree.tree_unflatten(outs, out_spec[0])

    def __getstate__(self) -> dict:  # copy.deepcopy of an aot_module: the copy gets a lock of its own
        return {k: v for k, v in self.__dict__.items() if k != "compile_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, compile_lock=threading.RLock())

    def precompile(self, *args, **kwargs) -> None:
        """Compile for inputs like these (real or fake) without running."""
        self._entry(args, kwargs)

    def _entry(self, args, kwargs):
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            return self._flat_entry(args)  # torch.compile's calls: skip the pytree work
        flat, spec = pytree.tree_flatten((args, kwargs))
        positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        tensors = [flat[i] for i in positions]
        keep, source = dedupe(tensors)
        others = tuple((i, v) for i, v in enumerate(flat) if not isinstance(v, torch.Tensor))
        key = call_key((spec, others), source, storage_groups(tensors, self.__name__),
                       tuple(self._tensor_key(t) for t in tensors))
        entry = _cached(self.cache, key, tensors, keep,
                        lambda: self._compile(flat, spec, positions, keep, source, tensors, key), self.compile_lock)
        return entry, tensors, keep

    def _flat_entry(self, tensors: tuple):
        """_entry for positional tensor arguments only; the same key, minus the tree spec."""
        keep, source = dedupe(tensors)
        key = call_key(len(tensors), source, storage_groups(tensors, self.__name__),
                       tuple(self._tensor_key(t) for t in tensors))

        def compile_():
            flat, spec = pytree.tree_flatten((tensors, {}))
            return self._compile(flat, spec, list(range(len(flat))), keep, source, list(tensors), key, flat_call=True)
        entry = _cached(self.flat_cache, key, tensors, keep, compile_, self.compile_lock)
        self._fast = entry.call
        return entry, tensors, keep

    def _compile(self, flat, spec, positions, keep, source, tensors, key, flat_call: bool = False):
        """An entry for this call; `flat_call` (positional tensors only, `key` from _flat_entry):
        with its generated call (_generated_call) where the entry allows one."""
        out_spec: list = [None]
        index_of_kept = {k: n for n, k in enumerate(keep)}

        def flat_fn(*unique):
            values = list(flat)
            for pos, src in zip(positions, source):
                values[pos] = unique[index_of_kept[src]]
            args, kwargs = pytree.tree_unflatten(values, spec)
            out = self.fn(*args, **kwargs)
            leaves, out_spec[0] = pytree.tree_flatten(out)
            return leaves

        unique = [tensors[i] for i in keep]
        load, store, entry = self._disk_cache(key, out_spec)
        cache = self.flat_cache if flat_call else self.cache
        if cache:  # a compile for inputs no entry fits: say what changed (TORCH_LOGS=recompiles)
            log_recompile(self.origin, lambda: key_changes(next(reversed(cache)), key, self.input_names))
        self.origin = self.origin or origin_of(self.__name__, self.source)
        static = tuple(n for n, i in enumerate(keep) if positions[i] in self.static_positions)  # among `unique`
        try:
            runtime, fw_gm, bw_gm, guard, record = compile_flat(flat_fn, unique, self.options, fn_name=self.__name__,
                                                        origin=self.origin, load=load, store=store,
                                                        cache_key=entry, static_primals=static)
            synthetic_base = None
        except MutatedAliasedInputsError as e:
            synthetic_base = SyntheticBase.of(unique, e.group, e)
            runtime, fw_gm, bw_gm, guard, record = compile_flat(synthetic_base.wrap(flat_fn),
                                                        synthetic_base.inputs(tensors, keep),
                                                        self.options, fn_name=self.__name__, origin=self.origin)
        self.last_graphs = (fw_gm, bw_gm)
        entry = _Entry(runtime, out_spec, synthetic_base, _entry_guard(guard, synthetic_base), record=record)
        if flat_call and synthetic_base is None and entry.guard is None:
            entry.call = _generated_call(self.__name__, key, [type(t) for t in tensors], runtime, out_spec,
                                         self.options.inputs_guarded)
        record.wrapper = _wrapper_source(entry)
        if self.input_names is not None and synthetic_base is None:  # (a synthetic base's inputs are not the caller's)
            record.input_names = [self.input_names[positions[i]] if positions[i] < len(self.input_names) else
                                  f"input {positions[i]}" for i in keep]
        return entry

    def _disk_cache(self, key: CallKey, out_spec: list) -> tuple[Callable | None, Callable | None, str | None]:
        """compile_flat's `load`, `store` and `cache_key` for this call's key, when the function
        is a graph the disk cache can key (`disk_key`, set by aot_module_simplified); else Nones
        (and a `store` that says why nothing is stored)."""
        if self.disk_key is None:
            return None, None, None
        if isinstance(self.disk_key, disk_cache.NotKeyed):
            return None, lambda partitioned: f"not stored: {self.disk_key}", None
        entry = disk_cache.entry_key(self.disk_key, key)

        def load(fake_mode):
            hit = disk_cache.load(entry, fake_mode)
            if hit is None:
                return None
            partitioned, out_spec[0] = hit
            return partitioned

        def store(partitioned) -> str:
            return disk_cache.store(entry, partitioned, out_spec[0])
        return load, store, (str(entry) if entry.cacheable else None)


def _generated_call(fn_name: str, key: CallKey, types: Sequence[type], runtime: CompiledCall, out_spec: list,
                    guarded: bool = False) -> Callable | None:
    """`call(args) -> user outputs | MISS` for an entry compiled for the flat positional tensors
    `key` describes (_flat_entry's key), of these `types`: the key checked (keys.py), then the
    runtime's steps and the unflattening, as straight-line code. None when the entry needs more
    than a straight call: duplicated or memory-sharing inputs (the general path dedupes them or
    makes a synthetic base), or a step with no straight form (leaves made inside, outputs whose
    grad_fn reaches nothing). `guarded`: Dynamo calls it, having checked part of the key.

    A graph without mutations or aliases gets no write-back and no alias code at all
    (`aot_function(lambda x, w: (x * w).sum(), nop)` called with f32[3] and a leaf f32[3]
    requiring grad; under torch.compile the checks Dynamo's guards make are left out):

        def call(args):  # <lambda>
            if len(args) != 2:
                return MISS
            a0, a1, = args
            if not (grad_enabled() is True
                    and type(a0) is c2
                    and a0.shape == c0
                    ...
                    and a1.is_leaf is True
                    and len({id(a0), id(a1)}) == 2):
                return MISS
            outs = (apply if functorch_active() else fast_apply)(plan, a0, a1)
            return_values = [outs[0]]
            return return_values[0]
    """
    count = key.structure
    if key.source != tuple(range(count)) or key.storage_groups != tuple(range(count)):
        return None
    steps: list = [CheckInputs(count, key.grad_mode, key.tensors, tuple(types), guarded)]
    if runtime.epilogue.touches_inputs:  # which inputs share memory was part of the compile
        steps.append(CheckStorages(count))
    steps += [*runtime.steps, Unflatten(out_spec[0])]
    return lower("call", f"def call(args):  # {fn_name}", steps, None)


@dataclass(frozen=True)
class Unflatten:
    """The user outputs in the structure the function returned (`spec`; None: a flat list)."""

    spec: Any

    def run(self, env) -> None:
        if self.spec is not None:
            env.return_values = pytree.tree_unflatten(env.return_values, self.spec)

    def emit(self, code: Code) -> bool:
        spec = self.spec
        if spec is None:
            code("    return return_values")
        elif spec.type in (tuple, list) and all(child.is_leaf() for child in spec.children()):
            code(f"    return {spec.type.__name__}(return_values)")
        elif spec.is_leaf():
            code("    return return_values[0]")
        else:
            code(f"    return {code.const(pytree.tree_unflatten, 'unflatten')}(return_values, {code.const(spec)})")
        return True


def _wrapper_source(entry: _Entry) -> str:
    """The generated code that runs a call of `entry`, for people (explain, report)."""
    runtime = entry.runtime
    parts = [entry.call.source if entry.call is not None else "# (calls take the general path)\n"]
    plan = runtime.plan  # (None: an inference call)
    if plan is not None:
        parts += [plan.run_forward.source, plan.run_backward.source]
    return "\n".join(parts)


def _entry_guard(sizes_guard: Callable | None, synthetic_base: SyntheticBase | None) -> Callable | None:
    """When a cache entry fits a call: its inputs pass the trace's size guards (dynamic=True)
    and, with a synthetic base, have the geometry of the traced views."""
    if synthetic_base is None:
        if sizes_guard is None:
            return None
        return lambda ts, kp: sizes_guard([ts[i] for i in kp])
    if synthetic_base.symbolic:  # under torch.compile: dynamo guards the views
        return None if sizes_guard is None else lambda ts, kp: sizes_guard(synthetic_base.inputs(ts, kp))
    static = sizes_guard is None
    return lambda ts, kp: (synthetic_base.matches(ts, kp, base_too=static)
                           and (static or sizes_guard(synthetic_base.inputs(ts, kp))))


# aot_function's keyword options; aot_module takes the same, aot_module_simplified also
# inputs_guarded (the backends': Dynamo's guards check the graph's inputs).


class AotModule(torch.nn.Module):
    """aot_module's result: the module's parameters and buffers are graph inputs."""

    def __init__(self, module: torch.nn.Module, options: Options):
        super().__init__()
        self.orig_module = module
        self.options = options

        def functional_call(state, args, kwargs):
            with torch.nn.utils.stateless._reparametrize_module(self.orig_module, state):
                return self.orig_module(*args, **kwargs)

        functional_call.__name__ = type(module).__name__ + ".forward"
        self.compiled = AotFunction(functional_call, options)
        self.compiled.source = module.forward

    def forward(self, *args, **kwargs):
        # While a compile traces the module, its parameters are that compile's fake tensors
        # (functional_call above): read them only between compiles.
        with self.compiled.compile_lock:
            state = {**dict(self.orig_module.named_parameters(remove_duplicate=False)),
                     **dict(self.orig_module.named_buffers(remove_duplicate=False))}
        return self.compiled(state, args, kwargs)
