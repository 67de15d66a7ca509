"""The entry points: aot_function, aot_module, aot_module_simplified, aot_export_joint.

The pipeline each compile runs is pipeline.py (`compile_flat`). Each entry point
flattens its inputs, keys a cache on what the compiled code assumed (sizes, strides,
dtypes, requires_grad, duplicated inputs, grad mode), and compiles on a miss. Threads
share the cache: a function compiles one entry at a time, and a thread missing while
another compiles waits, then looks again (`_cached`).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode

from aotgrad.persistence import disk_cache
from aotgrad.errors import MutatedAliasedInputsError, UnsupportedError, reject_sparse_inputs, unknown_option_error
from aotgrad.observe.phases import Origin, origin_of
from aotgrad.pipeline import Options, compile_flat
from aotgrad.observe.torch_logs import log_recompile
from aotgrad.runtime.boxed import boxed_graph
from aotgrad.runtime.wrapper import MISS, call_code

log = logging.getLogger("aotgrad")


def nop(gm: fx.GraphModule, example_inputs) -> Callable:
    """The identity graph compiler: run the graph as traced (boxed: see runtime/boxed.py)."""
    return boxed_graph(gm)


# -- keys --------------------------------------------------------------------

def _tensor_key(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
            t.requires_grad and t.is_leaf)


def _dynamic_tensor_key(t: torch.Tensor) -> tuple:
    return (t.dim(), t.dtype, t.device, t.requires_grad, t.requires_grad and t.is_leaf)


_KEY_FIELDS = {_tensor_key: ("sizes", "strides", "storage offset", "dtype", "device", "requires_grad",
                             "is a leaf requiring grad"),
               _dynamic_tensor_key: ("rank", "dtype", "device", "requires_grad", "is a leaf requiring grad")}


def _key_changes(old: tuple, new: tuple, tensor_key: Callable, names: list[str] | None) -> list[str]:
    """What differs between two keys of AotFunction's caches, for the recompiles log. Both
    end in (duplicates, shared memory, grad mode, one tensor_key per tensor).

        input 1 (L_x_): storage offset 1, now 0
    """
    if old == new:
        return ["the inputs fail the size guards of the entry compiled for symbolic sizes"]
    *old_rest, old_source, old_groups, old_grad, old_tensors = old
    *new_rest, new_source, new_groups, new_grad, new_tensors = new
    changes = []
    if old_rest != new_rest or len(old_tensors) != len(new_tensors):
        changes.append("the arguments' structure or non-tensor values")
    if old_grad != new_grad:
        changes.append(f"grad mode: {'on' if old_grad else 'off'}, now {'on' if new_grad else 'off'}")
    if old_source != new_source:
        changes.append(f"which inputs are one tensor: {list(old_source)}, now {list(new_source)}")
    if old_groups != new_groups:
        changes.append(f"which inputs share memory: {list(old_groups)}, now {list(new_groups)}")
    for i, (was, now) in enumerate(zip(old_tensors, new_tensors)):
        name = f" ({names[i]})" if names is not None and i < len(names) else ""
        changes += [f"input {i}{name}: {field} {_shown(a)}, now {_shown(b)}"
                    for field, a, b in zip(_KEY_FIELDS[tensor_key], was, now) if a != b]
    return changes


def _shown(value) -> Any:
    return list(value) if isinstance(value, torch.Size) else value


def _dedupe(tensors: Sequence[torch.Tensor]) -> tuple[list[int], tuple[int, ...]]:
    """Indices of first occurrences, and for each position the index of its first occurrence."""
    first: dict[int, int] = {}
    source = []
    for i, t in enumerate(tensors):
        source.append(first.setdefault(id(t), i))
    keep = [i for i, s in enumerate(source) if s == i]
    return keep, tuple(source)


def _storage_groups(tensors: Sequence[torch.Tensor], fn_name: str) -> tuple[int, ...]:
    seen: dict[int, int] = {}
    try:
        return tuple(seen.setdefault(t.untyped_storage()._cdata, i) for i, t in enumerate(tensors))
    except NotImplementedError:  # "Cannot access storage of SparseTensorImpl"
        reject_sparse_inputs(tensors, fn_name)
        raise


@dataclass
class SyntheticBase:
    """Inputs that share memory and are mutated are passed as their common base instead;
    the traced function rebuilds them as views of it, so a write through one is seen
    through the others, and the base's new value is written back once.

    before: fn(a, b) with a = base[0:2], b = base[1:3], a mutated
    after:  fn'(base) = fn(base.as_strided([2], [1], 0), base.as_strided([2], [1], 1))

    An output that is one of the rebuilt inputs itself (`return (a,)`) is the caller's
    tensor in eager, not a new view: `returned_inputs`, learnt while tracing, says which,
    and `run` hands back the caller's tensors there. An input whose geometry the function
    changes in place (`b.t_()`) gets it with `as_strided_` after the call.

    With aot_function(dynamic=True) the views are traced at their example's sizes, strides
    and offsets (only the base's sizes are symbols): `matches` says whether a call's inputs
    have that geometry, and other geometries compile again. When the examples' geometry is
    itself symbolic (torch.compile's fakes), each view's sizes, strides and offset are passed
    as size carriers after the base instead, and the trace reads them from those.
    """

    group: list[int]                       # positions among the unique inputs
    views: list[tuple]                     # (size, stride, storage_offset) of each, absolute
    base: tuple                            # the base's (size, stride, storage_offset)
    returned_inputs: dict[int, int] = field(default_factory=dict)  # flat output -> unique input it is
    # unique input -> its (size, stride, storage_offset) after the function changed it in place
    # (`t_()`), learnt while tracing; `run` gives the caller's tensor that geometry
    changed_geometry: dict[int, tuple] = field(default_factory=dict)
    symbolic: bool = False                 # the geometry is passed per call (size carriers)

    @staticmethod
    def of(unique: Sequence[torch.Tensor], group: list[int], error: Exception) -> "SyntheticBase":
        bases = {id(_base_of(unique[i])) for i in group}
        if len(bases) != 1:
            raise error
        base = _base_of(unique[group[0]])
        for i in group:
            if unique[i].requires_grad and unique[i].grad_fn is None and unique[i] is not base:
                raise UnsupportedError(
                    f"{error}\n(aotgrad rebuilds such inputs as views of their common base, but input {i} is a "
                    "view that requires grad without a grad_fn, a leaf of its own (made with `requires_grad_()` "
                    "or under `torch.no_grad()`): its gradient cannot flow through the base.)")
        views = [_geometry(unique[i]) for i in group]
        symbolic = any(isinstance(v, torch.SymInt) for v in pytree.tree_leaves(views))
        return SyntheticBase(group, views, _geometry(base), symbolic=symbolic)

    def matches(self, tensors: Sequence[torch.Tensor], keep: Sequence[int], base_too: bool) -> bool:
        """Do these inputs have the traced views' geometry (and the base's, if `base_too`)?"""
        unique = [tensors[i] for i in keep]
        return ([_geometry(unique[i]) for i in self.group] == self.views
                and (not base_too or _geometry(_base_of(unique[self.group[0]])) == self.base))

    def inputs(self, tensors: Sequence[torch.Tensor], keep: Sequence[int]) -> list[torch.Tensor]:
        unique = [tensors[i] for i in keep]
        base = _base_of(unique[self.group[0]])
        others = [t for i, t in enumerate(unique) if i not in self.group]
        if not self.symbolic:
            return others + [base]
        geometry = pytree.tree_leaves([_geometry(unique[i]) for i in self.group])
        fake_mode = detect_fake_mode([base])
        return others + [base] + [size_carrier(n, fake_mode) for n in geometry]

    def run(self, runtime: Callable, tensors: Sequence[torch.Tensor], keep: Sequence[int]) -> list:
        outs = runtime(self.inputs(tensors, keep))
        for i, geometry in self.changed_geometry.items():
            tensor = tensors[keep[i]]
            # (after the base's write-back) A leaf that requires grad can only have changed its
            # geometry in place under no_grad (eager refuses it otherwise): so here too
            with torch.no_grad() if tensor.is_leaf and tensor.requires_grad else contextlib.nullcontext():
                tensor.as_strided_(*geometry)
        for k, i in self.returned_inputs.items():
            outs[k] = tensors[keep[i]]
        return outs

    def wrap(self, flat_fn: Callable) -> Callable:
        group, views = self.group, self.views
        num_carriers = len(pytree.tree_leaves(views)) if self.symbolic else 0

        def with_views(*args):
            if num_carriers:  # the views' geometry, read from the carriers' sizes
                args, carriers = args[:-num_carriers], args[-num_carriers:]
                _, spec = pytree.tree_flatten(views)
                geometry = pytree.tree_unflatten([c.shape[0] for c in carriers], spec)
            else:
                geometry = views
            base, rest = args[-1], iter(args[:-1])
            n = len(args) - 1 + len(group)
            rebuilt = {i: base.as_strided(*view) for i, view in zip(group, geometry)}
            before = {i: (_geometry(v), v.requires_grad) for i, v in rebuilt.items()}
            outs = flat_fn(*[rebuilt[i] if i in rebuilt else next(rest) for i in range(n)])
            self.changed_geometry = {}
            for i, v in rebuilt.items():
                if (_geometry(v), v.requires_grad) == before[i]:
                    continue
                if v.requires_grad != before[i][1] or self.symbolic or any(
                        isinstance(n, torch.SymInt) for n in pytree.tree_leaves(_geometry(v))):
                    raise UnsupportedError(
                        f"aotgrad cannot compile this function: input {i} shares memory with input(s) "
                        f"{[j for j in group if j != i]}, one of them is written in place, and input {i}'s "
                        "requires_grad, or its shape and strides under dynamic shapes, are changed in place "
                        "(`requires_grad_()`, `t_()`...). To continue: pass `.clone()` of one of them, or use "
                        "the out-of-place op (`x = x.t()`).")
                self.changed_geometry[i] = _geometry(v)
            self.returned_inputs = {k: i for k, out in enumerate(outs) for i, view in rebuilt.items()
                                    if out is view}
            return outs
        return with_views


_CARRIER_BASE = torch.empty(())


def size_carrier(n, fake_mode=None) -> torch.Tensor:
    """A tensor whose one size is n and that holds no memory (a 0-d tensor expanded): a
    graph reads n as its size, so a number becomes a symbol the trace can read. A fake
    one in `fake_mode` (tracing; n may be a SymInt)."""
    if fake_mode is None:
        return _CARRIER_BASE.expand(n)
    with fake_mode:
        return torch.empty(()).expand(n)


def _geometry(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset()


def _base_of(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


@dataclass
class _Entry:
    runtime: Callable
    out_spec: list
    synthetic_base: SyntheticBase | None
    guard: Callable | None = None  # dynamic=True: do these inputs satisfy the trace's size guards?
    call: Callable | None = None   # the generated straight-line call, for flat tensor calls (wrapper.py)
    record: Any = None             # phases.CompileRecord of its compile


def _find(cache: dict, key: tuple, tensors, keep) -> _Entry | None:
    """The entry for `key` whose guard the inputs pass (static entries have none)."""
    for entry in cache.get(key, ()):
        if entry.guard is None or entry.guard(tensors, keep):
            return entry
    return None


def _cached(cache: dict, key: tuple, tensors, keep, compile_: Callable[[], _Entry], lock) -> _Entry:
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
        self._tensor_key = _dynamic_tensor_key if options.dynamic else _tensor_key
        self.cache: dict[tuple, tuple] = {}
        self.flat_cache: dict[tuple, tuple] = {}  # calls with positional tensors only
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
        if fast is not None and not kwargs:  # the last entry's generated call (runtime/wrapper.py)
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
        keep, source = _dedupe(tensors)
        others = tuple((i, v) for i, v in enumerate(flat) if not isinstance(v, torch.Tensor))
        key = (spec, others, source, _storage_groups(tensors, self.__name__), torch.is_grad_enabled(),
               tuple(self._tensor_key(t) for t in tensors))
        entry = _cached(self.cache, key, tensors, keep,
                        lambda: self._compile(flat, spec, positions, keep, source, tensors, key), self.compile_lock)
        return entry, tensors, keep

    def _flat_entry(self, tensors: tuple):
        """_entry for positional tensor arguments only; the same key, minus the tree spec."""
        keep, source = _dedupe(tensors)
        key = (len(tensors), source, _storage_groups(tensors, self.__name__), torch.is_grad_enabled(),
               tuple(self._tensor_key(t) for t in tensors))

        def compile_():
            flat, spec = pytree.tree_flatten((tensors, {}))
            return self._compile(flat, spec, list(range(len(flat))), keep, source, list(tensors), key, flat_call=True)
        entry = _cached(self.flat_cache, key, tensors, keep, compile_, self.compile_lock)
        self._fast = entry.call
        return entry, tensors, keep

    def _compile(self, flat, spec, positions, keep, source, tensors, key, flat_call: bool = False):
        """An entry for this call; `flat_call` (positional tensors only, `key` from _flat_entry):
        with its generated call (runtime/wrapper.py) where the entry allows one."""
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
            log_recompile(self.origin, lambda: _key_changes(next(reversed(cache)), key, self._tensor_key,
                                                            self.input_names))
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
            entry.call = call_code(self.__name__, key, [type(t) for t in tensors], self.options.dynamic,
                                   runtime, out_spec, self.options.inputs_guarded)
        record.wrapper = _wrapper_source(entry)
        if self.input_names is not None and synthetic_base is None:  # (a synthetic base's inputs are not the caller's)
            record.input_names = [self.input_names[positions[i]] if positions[i] < len(self.input_names) else
                                  f"input {positions[i]}" for i in keep]
        return entry

    def _disk_cache(self, key: tuple, out_spec: list) -> tuple[Callable | None, Callable | None, str | None]:
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


def _wrapper_source(entry: _Entry) -> str:
    """The generated code that runs a call of `entry`, for people (explain, report)."""
    runtime = entry.runtime
    parts = [entry.call.source if entry.call is not None else "# (calls take the general path)\n"]
    plan = getattr(runtime, "plan", None)
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
OPTIONS = ("partition_fn", "decompositions", "inference_compiler", "dynamic")
SIMPLIFIED_OPTIONS = (*OPTIONS, "inputs_guarded")


def _options(entry_point: Callable, fw_compiler, bw_compiler, options: dict, accepted=OPTIONS) -> Options:
    """The Options of an entry point's call; an option it does not take raises UnknownOptionError
    (were it dropped, a misspelt `partiton_fn` would compile with the default partitioner)."""
    for name in options:
        if name not in accepted:
            raise unknown_option_error(entry_point, name, accepted)
    return Options(fw_compiler, bw_compiler, **options)


def _names_unknown_options(entry_point: Callable) -> Callable:
    """`entry_point` (whose options are keyword parameters) raising UnknownOptionError, with the
    closest name, for a keyword argument it does not take, where Python's TypeError names none."""
    parameters = frozenset(inspect.signature(entry_point).parameters)

    @functools.wraps(entry_point)
    def checked(*args, **kwargs):
        for name in kwargs:
            if name not in parameters:
                raise unknown_option_error(entry_point, name, OPTIONS)
        return entry_point(*args, **kwargs)
    return checked


@_names_unknown_options
def aot_function(fn: Callable, fw_compiler: Callable, bw_compiler: Callable | None = None, *,
                 partition_fn: Callable | None = None, decompositions: dict | None = None,
                 inference_compiler: Callable | None = None, dynamic: bool = False) -> AotFunction:
    """Compile fn's forward and backward ahead of time, on first call per input signature.

        f = aotgrad.aot_function(lambda x, y: (x * y).sin(), aotgrad.nop)
        out = f(x, y); out.sum().backward()      # same values and grads as eager

    fw_compiler(gm, example_inputs) -> callable compiles the forward graph; bw_compiler
    (default: fw_compiler) the backward; inference_compiler the graph used when no grad
    is needed. partition_fn(joint_gm, joint_inputs, num_fwd_outputs=n) -> (fw_gm, bw_gm).
    A keyword argument it does not take raises UnknownOptionError naming the closest one.
    """
    return AotFunction(fn, _options(aot_function, fw_compiler, bw_compiler, dict(
        partition_fn=partition_fn, decompositions=decompositions, inference_compiler=inference_compiler,
        dynamic=dynamic)))


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


def aot_module(module: torch.nn.Module, fw_compiler: Callable, bw_compiler: Callable | None = None,
               **options) -> AotModule:
    """aot_function for a module: parameters and buffers are traced as inputs, so
    gradients reach `param.grad` and buffer updates (BatchNorm running stats) are written back.
    `options` are aot_function's (OPTIONS); another raises UnknownOptionError."""
    return AotModule(module, _options(aot_module, fw_compiler, bw_compiler, options))


def aot_module_simplified(gm: torch.nn.Module, example_inputs: Sequence[Any], fw_compiler: Callable,
                          bw_compiler: Callable | None = None, **options) -> Callable:
    """Compile a torch.compile FX graph (or any nn.Module: its parameters and buffers become
    inputs); returns a callable over the same flat inputs. `options` are aot_function's and
    inputs_guarded (SIMPLIFIED_OPTIONS); another raises UnknownOptionError."""
    from aotgrad.simplified import compile_graph_module

    return compile_graph_module(gm, example_inputs, _options(aot_module_simplified, fw_compiler, bw_compiler,
                                                             options, SIMPLIFIED_OPTIONS))
