"""The entry points: aot_function, aot_module, aot_module_simplified, aot_export_joint.

The driver reads top to bottom as the pipeline (`compile_flat`):

    traced = trace_joint(fn, fake_args)            # capture + analysis + joint (one pass)
    gm, plan = functionalize(traced.gm)            # pure graph
    fw_gm, bw_gm = partition_fn(gm, ...)           # what to save
    fw, bw = fw_compiler(fw_gm), bw_compiler(bw_gm)
    runtime = TrainingRuntime(RuntimePlan(...), Epilogue.plan(...))

Each entry point flattens its inputs, keys a cache on what the compiled code
assumed (sizes, strides, dtypes, requires_grad, duplicated inputs, grad mode),
and compiles on a miss.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._guards import detect_fake_mode
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad import config
from aotgrad.analysis import OutputKind
from aotgrad.errors import MutatedAliasedInputsError, UnsupportedError, reject_sparse_inputs
from aotgrad.functionalize import functionalize
from aotgrad.joint import InnerLeaf, TracedJoint, trace_joint
from aotgrad.partition import default_partition
from aotgrad.partition.graphs import copy_saved_aliases
from aotgrad.partition.inspection import report as partition_report
from aotgrad.runtime import Epilogue, InferenceRuntime, RuntimePlan, TrainingRuntime
from aotgrad.runtime.boxed import boxed_graph
from aotgrad.trace import fake_mode_for, to_fake

log = logging.getLogger("aotgrad")


def nop(gm: fx.GraphModule, example_inputs) -> Callable:
    """The identity graph compiler: run the graph as traced (boxed: see runtime/boxed.py)."""
    return boxed_graph(gm)


@dataclass
class Options:
    fw_compiler: Callable
    bw_compiler: Callable | None = None
    partition_fn: Callable | None = None
    decompositions: dict | None = None
    inference_compiler: Callable | None = None
    dynamic: bool = False
    stages: list = field(default_factory=list)  # provenance lines of the last compile


def _apply_log_level() -> None:
    """`config.log_level` (or AOTGRAD_LOG) other than "warning": the `aotgrad` logger at that
    level, printing to stderr if nothing else handles it."""
    level = getattr(logging, str(config.log_level).upper(), None)
    if not isinstance(level, int) or level == logging.WARNING or log.level == level:
        return
    log.setLevel(level)
    if not log.handlers and not logging.getLogger().handlers:
        log.addHandler(logging.StreamHandler())


def _placeholder_vals(gm: fx.GraphModule) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _reject_unsupported(traced: TracedJoint, fakes: Sequence[torch.Tensor], fn_name: str) -> None:
    from torch.multiprocessing.reductions import StorageWeakRef

    storages: dict = {}
    for i, f in enumerate(fakes):
        storages.setdefault(StorageWeakRef(f.untyped_storage()), []).append(i)
    mutated = {info.index for info in traced.analysis.mutated_inputs}
    for group in storages.values():
        if len(group) > 1 and any(_overlaps(fakes[m], fakes[o]) for m in mutated.intersection(group)
                                  for o in group if o != m):
            raise MutatedAliasedInputsError(
                f"aotgrad cannot compile `{fn_name}`: inputs {group} are views of one tensor and input "
                f"{sorted(mutated.intersection(group))[0]} is mutated, so a write through one must show "
                "in the others; aotgrad does not support that yet. To continue: pass the base tensor "
                "once and take the views inside the function, or pass `.clone()`s.", group)


def _sharing_memory(fakes: Sequence[torch.Tensor], mutated: set[int]) -> set[int]:
    """The mutated inputs and every input that shares memory with one, disjoint views of one
    tensor included (`a` and `a[1:]` with `a` of one element): the write-back of a mutated
    input bumps the version counter they all share, so a value the backward saves that views
    any of them must be a copy (fuzz finding 33)."""
    written = {StorageWeakRef(fakes[i].untyped_storage()) for i in mutated if i < len(fakes)}
    return mutated | {i for i, f in enumerate(fakes) if StorageWeakRef(f.untyped_storage()) in written}


def _span(t: torch.Tensor) -> tuple[int, int]:
    extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()) if size > 0)
    return t.storage_offset(), t.storage_offset() + extent + (1 if t.numel() else 0)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Could a write to a show in b? (False only when their element ranges are disjoint.)"""
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def compile_flat(flat_fn: Callable, example_args: Sequence[torch.Tensor], options: Options, *,
                 fn_name: str = "fn", runner=None):
    """Compile `flat_fn(*tensors) -> flat outputs` for inputs like `example_args` (real or fake).

    Returns the runtime, the forward and backward graphs (None without a backward), and, when
    aotgrad made the symbolic sizes itself (dynamic=True on real inputs), the guard: a check
    that other inputs satisfy what the trace assumed about their sizes."""
    # dynamic=True on real inputs: aotgrad makes the symbols (and checks their guards per call);
    # under torch.compile the symbolic fakes come with the inputs and dynamo guards them
    own_symbols = options.dynamic and detect_fake_mode(list(example_args)) is None
    fake_mode = fake_mode_for(example_args, own_symbols)
    fakes = [to_fake(fake_mode, a, own_symbols) for a in example_args]
    guard = _shape_guard(fake_mode, fakes) if own_symbols else None
    _apply_log_level()
    grad_mode = torch.is_grad_enabled()
    wants_grad = any(f.requires_grad for f in fakes)
    traced = trace_joint(flat_fn, fakes, fake_mode=fake_mode, trace_backward=grad_mode and wants_grad,
                         decompositions=options.decompositions, fn_name=fn_name, inner_leaf_grads=True)
    if not grad_mode and wants_grad and any(info.requires_grad for info in traced.analysis.outputs):
        # called under no_grad, the function turns grad mode on (`with torch.enable_grad():`, or
        # a graph piece that starts inside a no_grad region and ends after it): its outputs may
        # depend on inputs that require grad, so the backward is traced after all
        traced = trace_joint(flat_fn, fakes, fake_mode=fake_mode, trace_backward=True,
                             decompositions=options.decompositions, fn_name=fn_name, inner_leaf_grads=True)
    _reject_unsupported(traced, fakes, fn_name)
    gm, fplan = functionalize(traced.gm)
    options.stages = [f"trace: {len(traced.gm.graph.nodes)} nodes", str(fplan)]
    log.debug("aotgrad %s\n%s", fn_name, "\n".join(options.stages))
    epilogue = Epilogue.plan(traced.analysis, grad_mode, traced.grad_mode_after, traced.symbol_sources,
                             traced.scalar_outputs)
    if not traced.traced_backward:
        compiler = options.inference_compiler or options.fw_compiler
        analysis = traced.analysis
        dead_ends = [info.index for info in analysis.outputs if info.kind is OutputKind.FRESH and info.requires_grad
                     and info.index not in analysis.leaf_outputs]
        return InferenceRuntime(compiler(gm, _placeholder_vals(gm)), epilogue, dead_ends), gm, None, guard
    partition_fn = options.partition_fn or default_partition
    # inputs the caller gets back (itself or a view): it may write into them before the backward
    gm.meta["returned_inputs"] = sorted({info.index for info in traced.analysis.outputs
                                         if info.kind in (OutputKind.INPUT, OutputKind.ALIAS_OF_INPUT)})
    fw_gm, bw_gm = partition_fn(gm, _placeholder_vals(gm), num_fwd_outputs=traced.num_forward_outputs)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("aotgrad %s partition:\n%s", fn_name, partition_report(fw_gm, bw_gm))
    mutated = {info.index for info in traced.analysis.mutated_inputs}
    fw_gm = copy_saved_aliases(fw_gm, bw_gm, _sharing_memory(fakes, mutated))
    forward = options.fw_compiler(fw_gm, _placeholder_vals(fw_gm))
    backward = (options.bw_compiler or options.fw_compiler)(bw_gm, _placeholder_vals(bw_gm))
    with_grad = set(traced.tangent_sources) | set(traced.backward_errors)
    differentiable = [j in with_grad for j in range(traced.num_forward_outputs)]
    plan = RuntimePlan(forward, backward, traced.num_forward_outputs, traced.num_primals, traced.tangent_sources,
                       traced.tangent_strides, traced.grad_inputs, differentiable, traced.backward_errors,
                       _inputs_to_detach(traced), fw_gm.meta.get("num_saved_sizes", 0),
                       bw_gm, options.bw_compiler or options.fw_compiler,
                       saved_outputs=_saved_outputs(fw_gm, traced.num_forward_outputs))
    runtime = TrainingRuntime(plan, epilogue, enable_grad=not grad_mode)
    if traced.inner_leaves:
        runtime = WithInnerLeaves(runtime, traced.inner_leaves)
    return runtime, fw_gm, bw_gm, guard


def _saved_outputs(fw_gm: torch.fx.GraphModule, num_outputs: int) -> tuple[int, ...]:
    """Which saved tensors the forward also returns as outputs (autograd keeps those apart)."""
    outs = next(iter(fw_gm.graph.find_nodes(op="output"))).args[0]
    returned = set(outs[:num_outputs])
    return tuple(k for k, node in enumerate(outs[num_outputs:]) if node in returned)


def _shape_guard(fake_mode, fakes: list) -> Callable[[list], bool]:
    """Do real inputs satisfy the guards the trace put on the symbolic sizes of `fakes`?"""
    shape_env = fake_mode.shape_env

    def check(args: list) -> bool:
        return shape_env.evaluate_guards_for_args(fakes, args)
    return check


@dataclass
class WithInnerLeaves:
    """Runs a training runtime with a fresh stand-in for each leaf the function makes itself
    (`InnerLeaf`) after the caller's inputs, so their grads accumulate there as in eager."""

    runtime: TrainingRuntime
    inner_leaves: list[InnerLeaf]

    def __call__(self, args: Sequence[torch.Tensor]) -> list[Any]:
        return self.runtime([*args, *(leaf.stand_in() for leaf in self.inner_leaves)])


def _inputs_to_detach(traced: TracedJoint) -> tuple[int, ...]:
    """Inputs that require grad but get none: passed to the Function detached, so its
    backward node has no edge to them (eager's engine never runs their grad_fn). One input
    stays attached if all are gradless, so the outputs still require grad as in eager."""
    gradless = traced.gradless_inputs
    if len(gradless) == len(traced.grad_inputs):
        gradless = gradless[1:]
    return tuple(gradless)


# -- keys --------------------------------------------------------------------

def _tensor_key(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, t.requires_grad,
            t.requires_grad and t.is_leaf)


def _dynamic_tensor_key(t: torch.Tensor) -> tuple:
    return (t.dim(), t.dtype, t.device, t.requires_grad, t.requires_grad and t.is_leaf)


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
    and `run` hands back the caller's tensors there.

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
            outs = flat_fn(*[rebuilt[i] if i in rebuilt else next(rest) for i in range(n)])
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


def _cached(cache: dict, key: tuple, tensors, keep, compile_: Callable[[], _Entry]) -> _Entry:
    """The entry for `key` whose guard the inputs pass (static entries have none), else a new one."""
    entries = cache.get(key)
    if entries is not None:
        for entry in entries:
            if entry.guard is None or entry.guard(tensors, keep):
                return entry
    entry = compile_()
    cache.setdefault(key, []).append(entry)
    return entry


class AotFunction:
    """aot_function's result: compiles per input signature, then runs the cached runtime.

    The signature holds each tensor's shape and strides; with dynamic=True only its rank
    (sizes are symbols), and an entry is reused for new sizes when they pass the guards
    the trace recorded in its ShapeEnv."""

    def __init__(self, fn: Callable, options: Options):
        self.fn = fn
        self.options = options
        self._tensor_key = _dynamic_tensor_key if options.dynamic else _tensor_key
        self.cache: dict[tuple, tuple] = {}
        self.flat_cache: dict[tuple, tuple] = {}  # calls with positional tensors only
        self.__name__ = getattr(fn, "__name__", "fn")
        self.last_graphs: tuple = ()

    def __call__(self, *args, **kwargs):
        entry, tensors, keep = self._entry(args, kwargs)
        runtime, out_spec, synthetic_base = entry.runtime, entry.out_spec, entry.synthetic_base
        if synthetic_base is None:
            outs = runtime([tensors[i] for i in keep])
        else:
            outs = synthetic_base.run(runtime, tensors, keep)
        return pytree.tree_unflatten(outs, out_spec[0])

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
                        lambda: self._compile(flat, spec, positions, keep, source, tensors))
        return entry, tensors, keep

    def _flat_entry(self, tensors: tuple):
        """_entry for positional tensor arguments only; the same key, minus the tree spec."""
        keep, source = _dedupe(tensors)
        key = (len(tensors), source, _storage_groups(tensors, self.__name__), torch.is_grad_enabled(),
               tuple(self._tensor_key(t) for t in tensors))

        def compile_():
            flat, spec = pytree.tree_flatten((tensors, {}))
            return self._compile(flat, spec, list(range(len(flat))), keep, source, list(tensors))
        return _cached(self.flat_cache, key, tensors, keep, compile_), tensors, keep

    def _compile(self, flat, spec, positions, keep, source, tensors):
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
        try:
            runtime, fw_gm, bw_gm, guard = compile_flat(flat_fn, unique, self.options, fn_name=self.__name__)
            synthetic_base = None
        except MutatedAliasedInputsError as e:
            synthetic_base = SyntheticBase.of(unique, e.group, e)
            runtime, fw_gm, bw_gm, guard = compile_flat(synthetic_base.wrap(flat_fn),
                                                        synthetic_base.inputs(tensors, keep),
                                                        self.options, fn_name=self.__name__)
        self.last_graphs = (fw_gm, bw_gm)
        return _Entry(runtime, out_spec, synthetic_base, _entry_guard(guard, synthetic_base))


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


def _options(fw_compiler, bw_compiler, partition_fn, decompositions, inference_compiler, dynamic) -> Options:
    return Options(fw_compiler, bw_compiler, partition_fn, decompositions, inference_compiler, dynamic)


def aot_function(fn: Callable, fw_compiler: Callable, bw_compiler: Callable | None = None, *,
                 partition_fn: Callable | None = None, decompositions: dict | None = None,
                 inference_compiler: Callable | None = None, dynamic: bool = False) -> AotFunction:
    """Compile fn's forward and backward ahead of time, on first call per input signature.

        f = aotgrad.aot_function(lambda x, y: (x * y).sin(), aotgrad.nop)
        out = f(x, y); out.sum().backward()      # same values and grads as eager

    fw_compiler(gm, example_inputs) -> callable compiles the forward graph; bw_compiler
    (default: fw_compiler) the backward; inference_compiler the graph used when no grad
    is needed. partition_fn(joint_gm, joint_inputs, num_fwd_outputs=n) -> (fw_gm, bw_gm).
    """
    return AotFunction(fn, _options(fw_compiler, bw_compiler, partition_fn, decompositions,
                                    inference_compiler, dynamic))


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

    def forward(self, *args, **kwargs):
        state = {**dict(self.orig_module.named_parameters(remove_duplicate=False)),
                 **dict(self.orig_module.named_buffers(remove_duplicate=False))}
        return self.compiled(state, args, kwargs)


def aot_module(module: torch.nn.Module, fw_compiler: Callable, bw_compiler: Callable | None = None,
               **options) -> AotModule:
    """aot_function for a module: parameters and buffers are traced as inputs, so
    gradients reach `param.grad` and buffer updates (BatchNorm running stats) are written back."""
    return AotModule(module, _options(fw_compiler, bw_compiler, options.get("partition_fn"),
                                      options.get("decompositions"), options.get("inference_compiler"),
                                      options.get("dynamic", False)))


def aot_module_simplified(gm: torch.nn.Module, example_inputs: Sequence[Any], fw_compiler: Callable,
                          bw_compiler: Callable | None = None, **options) -> Callable:
    """Compile a torch.compile FX graph (or any nn.Module: its parameters and buffers become
    inputs); returns a callable over the same flat inputs."""
    from aotgrad.simplified import compile_graph_module

    return compile_graph_module(gm, example_inputs, _options(
        fw_compiler, bw_compiler, options.get("partition_fn"), options.get("decompositions"),
        options.get("inference_compiler"), options.get("dynamic", False)))
