"""The pipeline one compile runs: capture -> analyse -> joint -> functionalize -> partition -> compile -> run.

    partitioned = trace_and_partition(flat_fn, fakes, ...)   # plain data: graphs + facts
    runtime = instantiate(partitioned, options, phases)      # compiled graphs behind the runtime

`trace_and_partition` ends in a `Partitioned`: everything the run needs that does not
depend on the graph compiler, so the disk cache can store it and a second process skip
straight to `instantiate`. `compile_flat` is both, timed phase by phase (phases.py).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode
from torch.multiprocessing.reductions import StorageWeakRef

from aotgrad import config
from aotgrad.analysis import OutputKind
from aotgrad.errors import MutatedAliasedInputsError
from aotgrad.functionalize import functionalize
from aotgrad.joint import InnerLeaf, TracedJoint, trace_joint
from aotgrad.observe.phases import CompileRecord, Origin, Phases, log_compiled, origin_of
from aotgrad.observe.torch_logs import log_graph
from aotgrad.partition import default_partition
from aotgrad.partition.absent_tangents import without_tangents
from aotgrad.partition.cost import storage_root
from aotgrad.partition.graphs import copy_saved_aliases, is_tangent
from aotgrad.partition.inspection import report as partition_report
from aotgrad.runtime import CompiledCall, Epilogue, RuntimePlan, inference_call, training_call
from aotgrad.runtime.backward import BackwardVariants
from aotgrad.runtime.boxed import as_boxed, without_autocast
from aotgrad.trace import fake_mode_for, to_fake
from aotgrad.trace.symbolic import has_symbols

log = logging.getLogger("aotgrad")


@dataclass
class Options:
    fw_compiler: Callable
    bw_compiler: Callable | None = None
    partition_fn: Callable | None = None
    decompositions: dict | None = None
    inference_compiler: Callable | None = None
    dynamic: bool = False
    # called by dynamo with the graph's inputs, which its guards check: type, dtype, device,
    # requires_grad, sizes and strides (the generated call checks the rest of the key)
    inputs_guarded: bool = False


def _placeholder_vals(gm: fx.GraphModule) -> list:
    return [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]


def _repeated_outputs(forward: fx.GraphModule, num_forward_outputs: int) -> tuple[int, ...]:
    """The forward outputs the graph returns an earlier output's value for (one node at two
    places: functionalization found their values equal), which CompiledFunction must return as
    distinct tensors (forward.apart)."""
    returned = forward.graph.output_node().args[0][:num_forward_outputs]
    seen: set = set()
    repeated = []
    for j, node in enumerate(returned):
        if isinstance(node, fx.Node):
            if node in seen:
                repeated.append(j)
            seen.add(node)
    return tuple(repeated)


def _reject_unsupported(traced: TracedJoint, fakes: Sequence[torch.Tensor], fn_name: str) -> None:
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


@dataclass
class Partitioned:
    """What trace, functionalize and partition made of one function for one input signature.

    Plain data, independent of the graph compilers: `forward` is the inference graph when
    there is no `backward`. The facts are those `RuntimePlan` and the epilogue run on."""

    forward: fx.GraphModule
    backward: fx.GraphModule | None
    epilogue: Epilogue
    num_forward_outputs: int = 0
    num_primals: int = 0
    tangent_sources: list[int] = field(default_factory=list)
    tangent_strides: list[tuple] = field(default_factory=list)
    grad_inputs: list[int] = field(default_factory=list)
    differentiable: list[bool] = field(default_factory=list)
    backward_errors: dict[int, str] = field(default_factory=dict)
    detached_inputs: tuple[int, ...] = ()
    saved_outputs: tuple[int, ...] = ()
    enable_grad: bool = False  # traced under no_grad, the function turns grad mode on inside
    inner_leaves: list[InnerLeaf] = field(default_factory=list)
    dead_ends: list[int] = field(default_factory=list)  # inference: outputs with a grad_fn reaching nothing
    made_to_require_grad: tuple[int, ...] = ()  # inputs the function calls `requires_grad_()` on


def compile_flat(flat_fn: Callable, example_args: Sequence[torch.Tensor], options: Options, *,
                 fn_name: str = "fn", origin: Origin | None = None,
                 load: Callable[[Any], Partitioned | None] | None = None,
                 store: Callable[[Partitioned], str] | None = None, cache_key: str | None = None,
                 static_primals: tuple[int, ...] = ()):
    """Compile `flat_fn(*tensors) -> flat outputs` for inputs like `example_args` (real or fake).

    Returns the runtime, the forward and backward graphs (None without a backward), the guard
    when aotgrad made the symbolic sizes itself (dynamic=True on real inputs: a check that
    other inputs satisfy what the trace assumed about their sizes), and the compile's record.
    `load(fake_mode)` and `store(partitioned)` (the disk cache) skip the trace on a hit and
    keep what was traced on a miss; `store` returns what it did, for the record; `cache_key` is
    the disk-cache entry they use (the compilers see it: `instantiate`). `origin` says where
    the compile comes from in logs (default: `origin_of(fn_name)`). `static_primals`: positions,
    among `example_args`, of the inputs whose memory stays put from call to call (parameters,
    buffers)."""
    # dynamic=True on real inputs: aotgrad makes the symbols (and checks their guards per call);
    # under torch.compile the symbolic fakes come with the inputs and dynamo guards them
    own_symbols = options.dynamic and detect_fake_mode(list(example_args)) is None
    fake_mode = fake_mode_for(example_args, own_symbols)
    phases = Phases(fn_name, origin=origin or origin_of(fn_name))
    partitioned = guard = None
    if load is not None and not own_symbols:  # (the disk cache keeps no symbolic graphs)
        with phases("disk cache load"):
            partitioned = load(fake_mode)
        phases.record.disk_cache = "miss" if partitioned is None else "hit"
    if partitioned is None:
        fakes = [to_fake(fake_mode, a, own_symbols) for a in example_args]  # (only the trace needs them)
        guard = _shape_guard(fake_mode, fakes) if own_symbols else None
        partitioned = trace_and_partition(flat_fn, fakes, fake_mode, options, fn_name, phases)
        if store is not None:
            with phases("disk cache store"):
                phases.record.disk_cache = store(partitioned)
            if phases.record.disk_cache.startswith("not stored: "):
                log.info("aotgrad %s: not stored in the disk cache: %s", fn_name,
                         phases.record.disk_cache.removeprefix("not stored: "))
    runtime = instantiate(partitioned, options, phases, cache_key=None if own_symbols else cache_key,
                          static_primals=static_primals)
    record = phases.finish()
    return runtime, partitioned.forward, partitioned.backward, guard, record


def trace_and_partition(flat_fn: Callable, fakes: list, fake_mode, options: Options, fn_name: str,
                        phases: Phases) -> Partitioned:
    """Trace the joint graph, make it functional, split it: everything before the compilers."""
    grad_mode = torch.is_grad_enabled()
    wants_grad = any(f.requires_grad for f in fakes)
    with phases("trace"):
        traced = trace_joint(flat_fn, fakes, fake_mode=fake_mode, trace_backward=grad_mode and wants_grad,
                             decompositions=options.decompositions, fn_name=fn_name, inner_leaf_grads=True)
        if not grad_mode and wants_grad and any(info.requires_grad for info in traced.analysis.outputs):
            # called under no_grad, the function turns grad mode on (`with torch.enable_grad():`, or
            # a graph piece that starts inside a no_grad region and ends after it): its outputs may
            # depend on inputs that require grad, so the backward is traced after all
            traced = trace_joint(flat_fn, fakes, fake_mode=fake_mode, trace_backward=True,
                                 decompositions=options.decompositions, fn_name=fn_name, inner_leaf_grads=True)
        _reject_unsupported(traced, fakes, fn_name)
    with phases("functionalize"):
        gm, fplan = functionalize(traced.gm)
    log.debug("aotgrad %s: trace %d nodes\n%s", fn_name, len(traced.gm.graph.nodes), fplan)
    record = phases.record
    record.analysis = traced.analysis
    epilogue = Epilogue.plan(traced.analysis, grad_mode, traced.grad_mode_after, traced.symbol_sources,
                             traced.scalar_outputs)
    record.epilogue = epilogue
    if not traced.traced_backward:
        analysis = traced.analysis
        dead_ends = [info.index for info in analysis.outputs if info.kind is OutputKind.FRESH and info.requires_grad
                     and info.index not in analysis.leaf_outputs]
        # an input written with a value that requires grad in eager (a no_grad view of a leaf
        # made inside): its write-back, seen by autograd, gives it a history reaching nothing too
        first_write = len(analysis.forward_outputs)
        dead_ends += [first_write + k for k, info in enumerate(analysis.mutated_inputs)
                      if info.mutation_visible_to_autograd]
        record.forward = gm
        return Partitioned(gm, None, epilogue, dead_ends=dead_ends)
    partition_fn = options.partition_fn or default_partition
    log_graph("joint", gm, record.origin)  # (before the partitioner: aotgrad_inductor's passes rewrite it)
    with phases("partition"):
        # inputs the caller gets back (itself or a view): it may write into them before the backward
        gm.meta["returned_inputs"] = sorted({info.index for info in traced.analysis.outputs
                                             if info.kind in (OutputKind.INPUT, OutputKind.ALIAS_OF_INPUT)})
        fw_gm, bw_gm = partition_fn(gm, _placeholder_vals(gm), num_fwd_outputs=traced.num_forward_outputs)
        # (in-place metadata ops the runtime replays on an input bump its version counter too)
        mutated = {info.index for info in traced.analysis.inputs if info.mutates_data or info.metadata_steps}
        fw_gm = copy_saved_aliases(fw_gm, bw_gm, _sharing_memory(fakes, mutated))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("aotgrad %s partition:\n%s", fn_name, partition_report(fw_gm, bw_gm))
    record.joint, record.num_forward_outputs = gm, traced.num_forward_outputs
    record.forward, record.backward = fw_gm, bw_gm
    with_grad = set(traced.tangent_sources) | set(traced.backward_errors)
    return Partitioned(
        fw_gm, bw_gm, epilogue, traced.num_forward_outputs, traced.num_primals, traced.tangent_sources,
        traced.tangent_strides, traced.grad_inputs, [j in with_grad for j in range(traced.num_forward_outputs)],
        traced.backward_errors, _inputs_to_detach(traced), _saved_outputs(fw_gm, traced.num_forward_outputs),
        enable_grad=not grad_mode, inner_leaves=traced.inner_leaves,
        made_to_require_grad=traced.made_to_require_grad)


def instantiate(p: Partitioned, options: Options, phases: Phases, cache_key: str | None = None,
                static_primals: tuple[int, ...] = ()) -> CompiledCall:
    """Compile the graphs of `p` and put them behind the runtime.

    `cache_key`: the disk-cache entry `p` is stored under, which determines its graphs; each
    graph's `meta["aotgrad_cache_key"]` holds it for the compilers (aotgrad_inductor keeps
    Inductor's cache key per graph under it: inductor_keys.py). None: no such entry.
    `static_primals`: the primals (the forward's first placeholders, in order) whose memory
    stays put between calls, as the forward's `meta["static_primals"]` (aotgrad_inductor
    passes them to Inductor: backends.InductorCompilers)."""
    record = phases.record
    record.forward, record.backward, record.epilogue = p.forward, p.backward, p.epilogue
    record.tangent_sources, record.grad_inputs = p.tangent_sources, p.grad_inputs
    p.forward.meta["writable_in_graph"] = _writable_in_graph(p.forward, p.epilogue)
    p.forward.meta["static_primals"] = tuple(static_primals)
    for gm in (p.forward, p.backward):
        if gm is not None and cache_key is not None:
            gm.meta["aotgrad_cache_key"] = cache_key
    if p.backward is None:
        compiler = _without_autocast_compiler(options.inference_compiler or options.fw_compiler)
        log_graph("inference", p.forward, record.origin)
        with phases("compile"):
            forward = compiler(p.forward, _placeholder_vals(p.forward))
        return inference_call(forward, p.epilogue.written_in_graph(forward.input_writes),
                              len(_placeholder_vals(p.forward)), p.dead_ends)
    fw_compiler = _without_autocast_compiler(options.fw_compiler)
    bw_compiler = _without_autocast_compiler(options.bw_compiler or options.fw_compiler)
    log_graph("forward", p.forward, record.origin)
    log_graph("backward", p.backward, record.origin)
    with phases("compile"):
        forward = fw_compiler(p.forward, _placeholder_vals(p.forward))
        if _compiled_lazily(p.backward):
            record.backward_at_first_call = True
            backward = _compiled_at_first_call(_compiled_later(bw_compiler), p.backward, record)
        else:
            backward = bw_compiler(p.backward, _placeholder_vals(p.backward))
    plan = RuntimePlan(forward, backward, p.num_forward_outputs, p.num_primals, p.tangent_sources,
                       p.tangent_strides, p.grad_inputs, p.differentiable, p.backward_errors,
                       p.detached_inputs, p.forward.meta.get("num_saved_sizes", 0),
                       BackwardVariants(p.backward, without_tangents,
                                        _compiled_later(_logging_variants(bw_compiler, p.backward, record.origin))),
                       saved_outputs=p.saved_outputs,
                       repeated_outputs=_repeated_outputs(p.forward, p.num_forward_outputs),
                       **_own_counter_results(p.forward, p.backward, p.num_forward_outputs, p.epilogue))
    return training_call(plan, p.epilogue.written_in_graph(forward.input_writes), p.enable_grad, p.inner_leaves,
                         p.made_to_require_grad)


def _compiled_lazily(backward: fx.GraphModule) -> bool:
    """Is the backward compiled at its first call rather than with the forward?

    At the first call, aotgrad knows which outputs got a gradient: a training step that
    backpropagates only the loss compiles just the backward variant for that call
    (BackwardVariants.compiled_without), and the whole backward only if a call needs it. A graph
    whose shapes are symbolic is compiled with the forward: its compile may add guards on
    the sizes, which dynamo checks only if they come while the forward's frame is compiled
    (PyTorch's AOTAutograd draws the same line, at sizes saved for the backward)."""
    return config.lazy_backward and not has_symbols(_placeholder_vals(backward))


def _compiled_at_first_call(compiler: Callable, gm: fx.GraphModule, record: CompileRecord) -> Callable:
    """`compiler(gm, ...)`'s compiled graph, boxed, compiled when it is first called (once,
    under a lock: two threads may run their first backward together); its time goes into
    `record` (the compile it belongs to) and its own info line."""
    compiled: list[Callable] = []
    lock = threading.Lock()

    def run(args: list):
        if not compiled:
            with lock:
                if not compiled:
                    start = time.perf_counter()
                    compiled.append(as_boxed(compiler(gm, _placeholder_vals(gm))))
                    seconds = time.perf_counter() - start
                    record.phases["backward compile"] = seconds
                    log_compiled("backward (at its first call)", record.origin, seconds)
        return compiled[0](args)
    run._boxed_call = True
    return run


def _without_autocast_compiler(compiler: Callable) -> Callable:
    """`compiler`, called with autocast off, whose compiled graphs run with autocast off
    (boxed.without_autocast); the backward variants for missing tangents are compiled with it
    later. A graph holds autocast's casts already; a compiler that traces again under the
    caller's autocast (Inductor's pattern replacements on CUDA: a bf16 `addmm` whose first
    operand stayed float32) would add its own. PyTorch's AOTAutograd compiles the same way."""
    @functools.wraps(compiler)
    def compile_graph(gm, example_inputs):
        with torch._C._DisableAutocast() if torch._C._is_any_autocast_enabled() else contextlib.nullcontext():
            compiled = compiler(gm, example_inputs)
        wrapped = without_autocast(compiled)
        wrapped.input_writes = getattr(compiled, "input_writes", ())  # (_writable_in_graph)
        return wrapped
    return compile_graph


def _writable_in_graph(forward: fx.GraphModule, epilogue: Epilogue) -> tuple[tuple[int, int], ...]:
    """(input index, output slot) of the write-backs the forward's compiler may do inside the
    graph, set as `forward.meta["writable_in_graph"]`: those hidden from autograd (BatchNorm's
    running statistics; Epilogue.writable_in_graph) into inputs that do not require grad. A
    compiler that does them marks its compiled graph `input_writes` (the slots, where it
    returns None), and the epilogue keeps only their version bumps (Epilogue.written_in_graph);
    any other compiler leaves them to the epilogue."""
    vals = _placeholder_vals(forward)
    return tuple((i, slot) for i, slot in epilogue.writable_in_graph()
                 if i < len(vals) and isinstance(vals[i], torch.Tensor) and not vals[i].requires_grad)


def _logging_variants(compiler: Callable, backward: fx.GraphModule, origin: Origin) -> Callable:
    """`compiler` for the backward's variants (BackwardVariants.compiled_without: calls where some
    outputs get no gradient), compiled at such a call: each variant's graph goes to PyTorch's
    logs (torch_logs.py) and its compile gets its info line, naming the tangents it lacks."""
    tangents = [n.target for n in backward.graph.find_nodes(op="placeholder") if is_tangent(n)]

    @functools.wraps(compiler)
    def compile_variant(gm: fx.GraphModule, example_inputs):
        kept = {n.target for n in gm.graph.find_nodes(op="placeholder")}
        variant = "without " + ", ".join(t for t in tangents if t not in kept)
        log_graph("backward", gm, origin, variant=variant)
        start = time.perf_counter()
        compiled = compiler(gm, example_inputs)
        log_compiled(f"backward {variant}", origin, time.perf_counter() - start)
        return compiled
    return compile_variant


def _compiled_later(compiler: Callable) -> Callable:
    """`compiler`, for a graph compiled at a later call (the backward at its first call, a
    backward variant at the first backward that misses some grads):
    - inside dynamo's tracing context of this compile, as now: Inductor finds its shape
      environment there, without which it neither reads nor fills its graph cache (each
      process would compile that graph again);
    - never traced by dynamo: under a torch.compile'd function that calls `.backward()`,
      dynamo compiles each Python frame the backward runs, and a compile traced that way
      made a function missing its globals (NameError at its first call)."""
    from torch._guards import TracingContext, tracing

    context = TracingContext.try_get()

    @torch.compiler.disable
    @functools.wraps(compiler)
    def compile_graph(gm, example_inputs):
        with tracing(context) if context is not None else contextlib.nullcontext():
            return compiler(gm, example_inputs)
    return compile_graph


def _own_counter_results(fw_gm: torch.fx.GraphModule, bw_gm: torch.fx.GraphModule | None, num_outputs: int,
                         epilogue) -> dict:
    """Forward results eager holds through `.data` (the tracer's meta["own_version_counter"],
    kept by functionalization and partitioning on the nodes replaying it): flagged outputs,
    and saved values flagged or read by the backward through flagged nodes only (partition's
    `read_through_data`); and the saved ones among them that are a written input's new value
    (or `.data` of it), which eager reads from the input's memory."""
    outs = next(iter(fw_gm.graph.find_nodes(op="output"))).args[0]
    saved_reads = [n for n in bw_gm.graph.find_nodes(op="placeholder")
                   if not is_tangent(n)] if bw_gm is not None else []

    def own(r: int, node) -> bool:
        if not isinstance(node, torch.fx.Node):
            return False
        if node.meta.get("own_version_counter"):
            return True
        s = r - num_outputs
        return 0 <= s < len(saved_reads) and bool(saved_reads[s].meta.get("read_through_data"))

    flagged = tuple(r for r, node in enumerate(outs) if own(r, node))
    reshaped = {m.input_index for m in epilogue.metadata}
    # a written input's new value -> (the input, its result index)
    written_into = {outs[w.slot]: (w.input_index, w.slot) for w in epilogue.write_backs
                    if not w.after_metadata and w.input_index not in reshaped and w.slot < num_outputs}

    def new_value_of(node: torch.fx.Node) -> tuple[int, int | None] | None:
        """(input, None) when `node` is a written input's new value (or `.data` of it);
        (input, the new value's result) when it views one (`a.data[1:]` with `a` written)."""
        if node.target is torch.ops.aten.detach.default:
            node = node.args[0]
        if node in written_into:
            return written_into[node][0], None
        root = storage_root(node)
        return written_into[root] if root is not node and root in written_into else None

    from_inputs = tuple((r, *found) for r in flagged if r >= num_outputs
                        for found in [new_value_of(outs[r])] if found is not None)
    return dict(own_counter_results=flagged, saved_from_inputs=from_inputs)


def _saved_outputs(fw_gm: torch.fx.GraphModule, num_outputs: int) -> tuple[int, ...]:
    """Which saved tensors the forward also returns as outputs (autograd keeps those apart)."""
    outs = next(iter(fw_gm.graph.find_nodes(op="output"))).args[0]
    returned = set(outs[:num_outputs])
    return tuple(k for k, node in enumerate(outs[num_outputs:]) if node in returned)


def _shape_guard(fake_mode, fakes: list) -> Callable[[list], bool]:
    """Do real inputs satisfy the guards the trace put on the symbolic sizes of `fakes`?"""
    shape_env = fake_mode.shape_env

    def check(args: list) -> bool:
        # ignore_static=False: a size the trace fixed (`x.shape[0] == 3` made s0 the constant
        # 3) reads as static on the fakes, and only this check can see a call differ from it
        return shape_env.evaluate_guards_for_args(fakes, args, ignore_static=False)
    return check


def _inputs_to_detach(traced: TracedJoint) -> tuple[int, ...]:
    """Inputs that require grad but get none: passed to the Function detached, so its
    backward node has no edge to them (eager's engine never runs their grad_fn). One input
    stays attached if all are gradless, so the outputs still require grad as in eager."""
    gradless = traced.gradless_inputs
    if len(gradless) == len(traced.grad_inputs):
        gradless = gradless[1:]
    return tuple(gradless)


