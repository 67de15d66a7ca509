"""The torch.compile backends: `aotgrad` (graphs run as traced) and `aotgrad_inductor`.

Registered when aotgrad is imported and through the `torch_dynamo_backends`
entry-point group (pyproject.toml), so `torch.compile(m, backend="aotgrad")` works
in a fresh process. `aotgrad_inductor` hands each partitioned graph to Inductor's
graph compiler (`compile_fx_inner`); `InductorCompilers` holds what the forward's
compile learned (the layout of each saved value) until the backward is compiled.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import typing
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from aotgrad import config
from aotgrad.analysis import known_equal
from aotgrad.api import aot_module_simplified, nop
from aotgrad.distributed.ddp import compile_in_ddp
from aotgrad.errors import UnknownOptionError
from aotgrad.partition import default_partition, min_cut_rematerialization_partition
from aotgrad.partition.graphs import is_tangent
from aotgrad.persistence import inductor_keys


def _partitioner(default: str):
    """The backend's partitioner: `default` ("default" for aotgrad, "min_cut" for
    aotgrad_inductor) unless `config.partitioner` names another; a memory budget
    (`config.activation_memory_budget` below 1, or `activation_memory_budget_bytes`)
    selects min-cut, the partitioner that honours it (it reads both per call)."""
    name = config.partitioner if config.partitioner != "default" else default
    budgeted = config.activation_memory_budget < 1.0 or config.activation_memory_budget_bytes is not None
    return min_cut_rematerialization_partition if name == "min_cut" or budgeted else default_partition


def aotgrad_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]):
    """Forward and backward traced ahead of time, run as traced (like "aot_eager"); inside a
    DDP module's forward, one piece per DDP bucket (aotgrad/distributed/ddp.py)."""
    return compile_in_ddp(gm, example_inputs, _aotgrad_whole)


def _aotgrad_whole(gm: fx.GraphModule, example_inputs: Sequence[Any], inputs_guarded: bool = False):
    return aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop,
                                 partition_fn=_partitioner("default"), inputs_guarded=inputs_guarded)


# -- aotgrad_inductor ----------------------------------------------------------

def _output_nodes(gm: fx.GraphModule) -> list:
    output = gm.graph.find_nodes(op="output")[0]
    return list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else [output.args[0]]


def _keep_output_strides(gm: fx.GraphModule, count: int) -> None:
    """Ask Inductor to return the first `count` outputs in their traced strides.

    Inductor may otherwise pick its own layout for any output (channels-last after
    a convolution). The user sees forward outputs and gradients (eager's strides),
    and the epilogue rebuilds views of forward outputs from their traced strides, so
    those keep them; only saved values, which only our own backward reads, are left free.
    `user_visible_output_idxs` on the output node is the key Inductor reads for
    this (torch/_inductor/graph.py, get_user_visible_output_strides).
    """
    output = gm.graph.find_nodes(op="output")[0]
    output.meta["user_visible_output_idxs"] = [
        i for i, node in enumerate(_output_nodes(gm)[:count]) if isinstance(node, fx.Node)]


def _output_strides(compiled, example_inputs: Sequence[Any]) -> list | None:
    """The strides Inductor's compiled graph returns each output in (None where unknown), read
    from the expressions it records for them (`CompiledFxGraph.output_strides`): numbers as
    numbers, symbolic ones evaluated at the inputs' sizes; None if it recorded none.

    Inductor would report them through the TracingContext (`report_output_strides`), but it
    evaluates every number there against all the shape env's symbols (mobilenetv2 on torch
    2.14: 1,134 strides, 0.45 s of a 6 s warm first step)."""
    from torch._inductor.utils import shape_env_from_inputs

    exprs = getattr(compiled, "output_strides", None)
    if exprs is None:
        return None
    shape_env = None  # (found at the first symbolic stride)

    def value(expr):
        nonlocal shape_env
        if isinstance(expr, int) or expr.isdigit():
            return int(expr)
        shape_env = shape_env or shape_env_from_inputs(example_inputs)
        return int(expr) if shape_env is None else shape_env.evaluate_symexpr(expr)
    return [None if strides is None else tuple(value(e) for e in strides) for strides in exprs]


def _restrided(val: torch.Tensor, stride: tuple) -> torch.Tensor:
    """A fake tensor like `val` but laid out with `stride`."""
    with val.fake_mode:
        return torch.empty_strided(val.shape, stride, dtype=val.dtype, device=val.device)


def _symbolic_layout(val: torch.Tensor, stride: Sequence) -> tuple | None:
    """The strides Inductor reported for a saved value, in terms of `val`'s symbolic sizes.

    Inductor may report strides at the example's values (48 for `8*s1`); compiling the
    backward for those numbers would guard s1 == 6, and every new size would compile again.
    A dense layout (channels-last, say) is rebuilt from its dim order with the symbolic
    sizes; None if the numbers are no dense layout of these sizes (then no restride)."""
    if not any(isinstance(s, torch.SymInt) for s in val.shape) or any(isinstance(s, torch.SymInt) for s in stride):
        return tuple(stride)
    hints = [_hint(s) for s in val.shape]
    order = sorted(range(val.dim()), key=lambda d: (stride[d], hints[d] or 0))
    symbolic, step = [0] * val.dim(), 1
    for d in order:
        symbolic[d] = step
        step = step * val.shape[d]
    if any(hints[d] != 1 and _hint(symbolic[d]) != stride[d] for d in range(val.dim())):
        return None
    return tuple(symbolic)


def _hint(n) -> int | None:
    return n.node.hint if isinstance(n, torch.SymInt) else n


def _compile(gm: fx.GraphModule, example_inputs: list, role: str, static_input_idxs: list[int],
             patches: dict | None = None, device_index=None) -> Callable:
    """`role`: "forward", "backward" or "inference" (keys the graph in inductor_keys.py);
    `static_input_idxs`: the inputs whose memory stays put from call to call (for Inductor);
    `device_index`: Inductor's BoxedDeviceIndex shared by one forward and its backward
    (CUDA graphs, `mode="reduce-overhead"`: the backward joins the forward's graph tree)."""
    from torch._inductor import config as inductor_config

    fx_kwargs = {"is_backward": role == "backward", "boxed_forward_device_index": device_index,
                 "static_input_idxs": static_input_idxs}
    if role == "backward":  # (a variant's placeholders are some of the backward's)
        role += " " + ",".join(str(n.target) for n in gm.graph.find_nodes(op="placeholder"))
    with inductor_config.patch(patches or {}):
        writes = [] if fx_kwargs["is_backward"] or inductor_config.triton.cudagraphs else _in_graph_writes(gm)
        key = inductor_keys.key_for(gm, role, fx_kwargs)
        stored = inductor_keys.known(key)
        compiled = None if stored is None else _load_stored(gm, example_inputs, stored, fx_kwargs)
        if compiled is None:
            compiled = _compile_a_copy(gm, example_inputs, fx_kwargs, writes, key, stored)

    def run(args: list):  # Inductor's compiled graphs take one list, which they clear
        return compiled(args)
    run._boxed_call = True
    run.input_writes = tuple(slot for _, slot in writes)
    run.output_strides = _output_strides(compiled, example_inputs) if role == "forward" else None  # (InductorCompilers)
    # Inductor cut the graph in pieces (graph partitions around ops CUDA graphs cannot hold)
    run.partitioned = len(getattr(compiled, "partition_maps", None) or ()) > 1
    return run


def _static_primals(gm: fx.GraphModule) -> list[int]:
    """The forward's (or inference graph's) inputs whose memory stays put from call to call,
    for Inductor's `static_input_idxs`, as PyTorch's compile_fx tells it (on a GPU Inductor
    then neither checks their alignment per call nor, under CUDA graphs, copies them into
    the graph's memory per replay): the parameters and buffers, which pipeline.instantiate
    puts in `meta["static_primals"]`."""
    static = list(gm.meta.get("static_primals", ()))
    count = len(gm.graph.find_nodes(op="placeholder"))
    assert all(i < count for i in static), f"static primals {static} of a graph with {count} inputs"
    return static


def _static_backward_inputs(gm: fx.GraphModule, forward_partitioned: bool) -> list[int]:
    """The backward's inputs whose memory stays put (see _static_primals), as PyTorch's
    compile_fx_backward says: every saved value, which the forward makes in its own memory
    (a CUDA graph's, under `reduce-overhead`); only the primals where Inductor cut the forward
    in pieces (a piece run outside a CUDA graph makes its values anywhere).

        backward(primals_3, mm, tangents_1) -> [0, 1]; forward in pieces -> [0]
    """
    placeholders = gm.graph.find_nodes(op="placeholder")
    if forward_partitioned:
        return [i for i, node in enumerate(placeholders) if str(node.target).startswith("primals")]
    return [i for i, node in enumerate(placeholders) if not is_tangent(node)]


def _load_stored(gm: fx.GraphModule, example_inputs: list, stored: str, fx_kwargs: dict):
    """The graph Inductor's cache holds under `stored` (the key kept for `gm`), or None if it
    has none that fits (lost, or its guards fail). Inductor gets `gm` itself: on a hit it
    neither hashes nor rewrites the graph, and the forward's in-graph writes and random ops
    are in the stored code already, so no copy is made (mobilenetv2 on torch 2.14: 0.45 s)."""
    try:
        return _inductor(gm, example_inputs, fx_kwargs, stored, hit_only=True)
    except inductor_keys.NotStored:
        return None


def _compile_a_copy(gm: fx.GraphModule, example_inputs: list, fx_kwargs: dict, writes: list,
                    key: str | None, stored: str | None):
    """Inductor's compile of a copy of `gm` with `writes` made in the graph and Inductor's
    random ops, under the `stored` key if there is one (Inductor's entry was lost), else
    under Inductor's own key, which is then kept for `key`."""
    if stored is None:
        # (whether a saved value's fake requires grad depends on how the graph was made: traced,
        # loaded from the disk cache, or cut into a variant; Inductor keys its cache on it)
        example_inputs = [v.detach() if isinstance(v, torch.Tensor) and v.requires_grad else v
                          for v in example_inputs]
    gm = _inductors_copy(gm, code_needed=stored is None)
    _write_inputs_in_graph(gm, writes)
    _use_inductor_random(gm, example_inputs)
    if stored is None:
        _attributes_in_one_order(gm)
    compiled = _inductor(gm, example_inputs, fx_kwargs, stored)
    if stored is None:
        inductor_keys.remember(key, compiled)
    return compiled


def _inductor(gm: fx.GraphModule, example_inputs: list, fx_kwargs: dict, stored: str | None, hit_only: bool = False):
    """Inductor's graph compiler (`compile_fx_inner`) on `gm`, its cache lookup answered with
    `stored` (inductor_keys.answering) and without torch._dynamo's repro copy."""
    from torch._inductor.compile_fx import compile_fx_inner

    with inductor_keys.answering(gm, stored, hit_only=hit_only), _without_repro_copy():
        return compile_fx_inner(gm, example_inputs, **fx_kwargs)


_repro_lock = threading.Lock()
_repro_wrapper: list = []  # Inductor's own `wrap_compiler_debug` while `_without_repro_copy` blocks are open
_repro_blocks = 0


@contextlib.contextmanager
def _without_repro_copy():
    """Inductor's `compile_fx_inner` wraps its compiler in torch._dynamo's repro wrapper
    (`wrap_compiler_debug`), which deep-copies the graph before compiling and uses the copy only
    to write a repro when `torch._dynamo.config.repro_after == "aot"` (a warm mobilenetv2 on
    torch 2.14: 60 ms for two graphs Inductor then loads from its cache). Inside the block, a
    compile under any other setting gets the compiler unwrapped (`_unwrapped`, which still
    wraps when "aot" is set, checked at each call, for other threads too); after the last
    block, Inductor's wrapper is its own again."""
    global _repro_blocks
    import torch._inductor.compile_fx as inductor

    if not callable(getattr(inductor, "wrap_compiler_debug", None)):
        yield
        return
    with _repro_lock:
        if _repro_blocks == 0:
            _repro_wrapper.append(inductor.wrap_compiler_debug)
            inductor.wrap_compiler_debug = _unwrapped
        _repro_blocks += 1
    try:
        yield
    finally:
        with _repro_lock:
            _repro_blocks -= 1
            if _repro_blocks == 0:
                inductor.wrap_compiler_debug = _repro_wrapper.pop()


def _unwrapped(compiler_fn, compiler_name: str):
    """`wrap_compiler_debug` inside `_without_repro_copy`: the compiler as it is, unless
    torch._dynamo's repro tools are asked to act after AOTAutograd."""
    if getattr(torch._dynamo.config, "repro_after", None) == "aot":
        return _repro_wrapper[0](compiler_fn, compiler_name)
    return compiler_fn


def _in_graph_writes(gm: fx.GraphModule) -> list[tuple[int, int]]:
    """The write-backs hidden from autograd that the pipeline allows inside the graph
    (`gm.meta["writable_in_graph"]`: BatchNorm's running statistics), as (input, output slot)
    pairs: those whose new value the graph computes (`_write_inputs_in_graph` makes them)."""
    writes = gm.meta.get("writable_in_graph", ())
    if not writes:
        return []
    placeholders = gm.graph.find_nodes(op="placeholder")
    outs = _output_nodes(gm)
    return [(i, slot) for i, slot in writes if isinstance(outs[slot], fx.Node) and outs[slot] is not placeholders[i]]


def _write_inputs_in_graph(gm: fx.GraphModule, writes: list[tuple[int, int]]) -> None:
    """`writes` (from `_in_graph_writes`) done inside the graph, in place: a `copy_` of the new
    value into the input before the output, and None returned in its place. Inductor then
    writes the input's memory from its own kernels, as it does under PyTorch's AOTAutograd;
    returned, each value was a buffer of its own, a Function output and a `copy_` in the
    epilogue (MobileNetV2's 52 BatchNorms: 156 of each per step). The epilogue bumps the
    written inputs' versions (pipeline._writable_in_graph). Not done under CUDA graphs, where
    Inductor does not record a graph that writes an input it copies in.

        before: new = add(mul(primals_3, 0.9), ...); return (loss, new, ...)
        after:  new = ...; copy_ = copy_(primals_3, new); return (loss, None, ...)
    """
    if not writes:
        return
    placeholders = gm.graph.find_nodes(op="placeholder")
    output = gm.graph.find_nodes(op="output")[0]
    outs = _output_nodes(gm)
    with gm.graph.inserting_before(output):
        for i, slot in writes:
            copy = gm.graph.call_function(torch.ops.aten.copy_.default, (placeholders[i], outs[slot]))
            copy.meta.update(placeholders[i].meta)
            outs[slot] = None
    output.args = (tuple(outs),)
    visible = output.meta.get("user_visible_output_idxs")
    if visible is not None:
        written = {slot for _, slot in writes}
        output.meta["user_visible_output_idxs"] = [j for j in visible if j not in written]
    gm.recompile()


def _inductors_copy(gm: fx.GraphModule, code_needed: bool = True) -> fx.GraphModule:
    """A copy of `gm` for Inductor, which rewrites the graph it compiles in place (its
    post-grad passes, on a cache miss only). aotgrad keeps the graph as partitioned: a
    backward variant is cut from it later, and Inductor keys the variant's compile on its
    code, which would then depend on whether this process compiled the backward or loaded
    it from Inductor's cache (gpt2: every first warm process compiled its variant again).
    Nodes and their meta are copied shallowly; parameters and buffers are shared. Without
    `code_needed` (Inductor gets a stored key and hashes no code) the copy makes its code
    only if something asks for it (half the copy's time)."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    graph.find_nodes(op="output")[0].meta.update(gm.graph.find_nodes(op="output")[0].meta)
    copied = (fx.GraphModule if code_needed else _LazyGraphModule)(gm, graph)
    copied.meta.update(gm.meta)
    return copied


def _attributes_in_one_order(gm: fx.GraphModule) -> None:
    """The graph module's attributes sorted by name, its code made. Inductor's graph cache
    keys on the pickled module, attribute order included: a graph fresh from the partitioner
    and the same graph from aotgrad's disk cache (which makes its code on first use) would
    have two keys, and a second process would compile again what the first one stored.

        fresh:  training, ..., _modules, _code, ..., meta, shape_env
        loaded: training, ..., _modules, ..., meta, shape_env, _code  ->  both sorted
    """
    if hasattr(gm, "real_recompile"):  # a lazy module: its code now, as a fresh module has it
        gm.real_recompile()
    attributes = sorted(gm.__dict__.items())
    gm.__dict__.clear()
    gm.__dict__.update(attributes)


def _use_inductor_random(gm: fx.GraphModule, example_inputs: list) -> None:
    """Rewrite `aten.rand`/`randn`/`randint` (dropout decomposes to `rand`) into Inductor's own
    random ops (a seed drawn per call, then `inductor_random`), in place.

    Inductor lowers random numbers only in that form (unless `fallback_random` is set, when it
    calls eager's ops and the pass does nothing). PyTorch applies the rewrite among the passes
    on its joint graph before partitioning; aotgrad partitions itself, so each graph gets it
    here. The partitioners never recompute a random op (partition/cost.py), so the backward
    reads the mask the forward drew and needs no seed of its own.
    """
    from torch._guards import detect_fake_mode
    from torch._inductor.fx_passes.replace_random import replace_random_passes
    from torch._inductor.virtualized import V

    vals = [node.meta.get("val") for node in gm.graph.find_nodes(op="placeholder")]
    fake_mode = detect_fake_mode(list(example_inputs) + vals)
    assert fake_mode is not None, "aotgrad_inductor: no fake mode among the graph's inputs"
    with V.set_fake_mode(fake_mode):  # the pass builds its replacements' values in it
        if replace_random_passes(gm):
            # regenerate the code: Inductor's graph cache keys on it, and stale code (still
            # calling aten.rand) would share its key with the graph before the rewrite
            gm.graph.lint()
            gm.recompile()


class _InductorJointPasses:
    """A partitioner that first runs Inductor's joint-graph passes (no-op removal, folding of
    uniform constants, Inductor's early pattern rewrites), in place, as Inductor's own pipeline
    does before it partitions. Random ops stay as they are here (the partitioners never
    recompute them; each graph gets Inductor's random ops after the split:
    _use_inductor_random).

    The disk cache keys a partitioner on its qualified name, so the name carries the Inductor
    settings the passes read; a custom joint pass without a `uuid()` leaves it without one
    (nothing cached: its code cannot be keyed)."""

    def __init__(self, partition_fn, patches: dict | None = None):
        from torch._inductor import config as inductor_config

        self.partition_fn = partition_fn
        self.patches = patches or {}  # torch.compile's mode= and options=, as for the graph compiles
        self.__name__ = getattr(partition_fn, "__name__", type(partition_fn).__name__)
        with inductor_config.patch(self.patches):
            custom = [getattr(inductor_config, k) for k in ("joint_custom_pre_pass", "joint_custom_post_pass")]
            flags = inductor_config.pattern_matcher, inductor_config.joint_graph_constant_folding
        uuids = [None if p is None else getattr(p, "uuid", lambda: None)() for p in custom]
        keyable = all(u is not None or p is None for p, u in zip(custom, uuids))
        self.__qualname__ = (f"inductor_joint_passes(pattern_matcher={flags[0]}, constant_folding={flags[1]}, "
                             f"custom={uuids})+{self.__name__}") if keyable else None

    def __call__(self, joint_gm: fx.GraphModule, joint_inputs, **kwargs):
        from torch._guards import detect_fake_mode
        from torch._inductor import config as inductor_config
        from torch._inductor.fx_passes.joint_graph import joint_graph_passes
        from torch._inductor.virtualized import V

        fake_mode = detect_fake_mode(list(joint_inputs))
        with V.set_fake_mode(fake_mode), inductor_config.patch({**self.patches, "fallback_random": True}):
            joint_gm = joint_graph_passes(joint_gm)
        return self.partition_fn(joint_gm, joint_inputs, **kwargs)


class InductorCompilers:
    """The forward, backward and inference compilers of one `aotgrad_inductor` graph.

    Inductor may store a saved activation in another layout than the trace gave it
    (channels-last after a convolution: its layout optimisation), and a backward
    compiled for the traced strides then fails its input stride checks. So the
    forward's compile records the strides its saved outputs really have, keyed by
    the saved value's fake tensor (the backward's placeholder carries the same
    one), and the backward is compiled for those strides: PyTorch does the same in
    `_aot_stage2b_bw_compile`.

        forward:  conv -> relu -> (loss, relu)   relu saved as f32[2,16,8,8] (1024,1,128,16)
        backward: placeholder relu  "f32[2,16,8,8]" restrided (1024,64,8,1) -> (1024,1,128,16)
    """

    def __init__(self, patches: dict | None = None):
        # id(val) -> (val, real stride), from the forward's compile; kept for every backward cut
        # from it (the backward and its variants are compiled at their first call, in any order)
        self.saved_strides: dict[int, tuple[torch.Tensor, tuple]] = {}
        self.patches = patches or {}  # Inductor's config for every graph (torch.compile's mode=, options=)
        from torch._inductor.cudagraph_utils import BoxedDeviceIndex
        self.device_index = BoxedDeviceIndex(None)  # the forward's CUDA device, for CUDA graphs
        # id(val) -> val, the saved values of forwards Inductor cut in pieces (_static_backward_inputs):
        # per forward, as the strides are (entries' forwards and backwards compile interleaved)
        self.saved_by_partitioned: dict[int, torch.Tensor] = {}

    def forward(self, gm: fx.GraphModule, example_inputs):
        outputs = _output_nodes(gm)
        num_user = len(outputs) - gm.meta.get("num_saved", 0)
        _keep_output_strides(gm, num_user)
        saved_vals = [node.meta.get("val") if isinstance(node, fx.Node) else None for node in outputs[num_user:]]
        compiled = _compile(gm, list(example_inputs), "forward", _static_primals(gm), patches=self.patches,
                            device_index=self.device_index)
        if compiled.partitioned:
            self.saved_by_partitioned.update((id(val), val) for val in saved_vals if isinstance(val, torch.Tensor))
        strides = compiled.output_strides
        if strides is not None and len(strides) == len(outputs):
            for val, stride in zip(saved_vals, strides[num_user:]):
                if isinstance(val, torch.Tensor) and stride is not None:
                    layout = _symbolic_layout(val, stride)
                    if layout is not None:
                        self.saved_strides[id(val)] = (val, layout)
        return compiled

    def backward(self, gm: fx.GraphModule, example_inputs):
        _keep_output_strides(gm, len(_output_nodes(gm)))
        inputs = list(example_inputs)
        placeholders = gm.graph.find_nodes(op="placeholder")
        for i, val in enumerate(inputs):
            recorded, stride = self.saved_strides.get(id(val), (None, None))
            if recorded is val and not known_equal(val.stride(), stride):
                inputs[i] = placeholders[i].meta["val"] = _restrided(val, stride)
        forward_partitioned = any(self.saved_by_partitioned.get(id(val)) is val for val in example_inputs)
        return _compile(gm, inputs, "backward", _static_backward_inputs(gm, forward_partitioned),
                        patches=self.patches, device_index=self.device_index)

    def inference(self, gm: fx.GraphModule, example_inputs):
        _keep_output_strides(gm, len(_output_nodes(gm)))
        return _compile(gm, list(example_inputs), "inference", _static_primals(gm), patches=self.patches,
                        device_index=self.device_index)


def inductor_patches(mode: str | None, options: dict | None) -> dict:
    """Inductor's config for torch.compile's `mode=` and `options=`, as `backend="inductor"`
    reads them: a mode's options (`torch._inductor.list_mode_options`), then the options,
    each checked against Inductor's config (name, then type)."""
    from torch._inductor import config as inductor_config
    from torch._inductor import list_mode_options

    patches: dict = {}
    if mode and mode != "default":
        patches.update(list_mode_options(mode))
    current = inductor_config.get_config_copy()
    for key, value in (options or {}).items():
        name = key.replace("-", "_")
        if name not in current:
            raise UnknownOptionError(
                f"aotgrad_inductor: unknown Inductor option {key!r} in torch.compile(options=...). "
                "The options are Inductor's config names (torch._inductor.list_options()), e.g. "
                "'max_autotune', 'epilogue_fusion', 'triton.cudagraphs'.")
        expected = inductor_config.get_type(name)
        if typing.get_origin(expected) is None and isinstance(expected, type) and not isinstance(value, expected):
            raise UnknownOptionError(
                f"aotgrad_inductor: Inductor option {key!r} takes a {type(current[name]).__name__}, "
                f"got {type(value).__name__} ({value!r}).")
        patches[name] = value
    return patches


def aotgrad_inductor_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *, mode: str | None = None,
                             options: dict | None = None):
    """Forward and backward traced by aotgrad, each compiled by Inductor's graph compiler;
    inside a DDP module's forward, one piece per DDP bucket. `mode` and `options` are
    torch.compile's, read as `backend="inductor"` reads them (inductor_patches)."""
    patches = inductor_patches(mode, options)
    return compile_in_ddp(gm, example_inputs, functools.partial(_aotgrad_inductor_whole, patches=patches))


def _aotgrad_inductor_whole(gm: fx.GraphModule, example_inputs: Sequence[Any], inputs_guarded: bool = False,
                            patches: dict | None = None):
    import torch._inductor.lowering  # noqa: F401  (Inductor's max-pool decomposition reads it, unimported)
    from torch._inductor.decomposition import select_decomp_table

    compilers = InductorCompilers(patches)
    return aot_module_simplified(gm, example_inputs, fw_compiler=compilers.forward,
                                 bw_compiler=compilers.backward, inference_compiler=compilers.inference,
                                 partition_fn=_InductorJointPasses(_partitioner("min_cut"), patches),
                                 decompositions=select_decomp_table(),
                                 inputs_guarded=inputs_guarded)


def register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    for name, fn in (("aotgrad", aotgrad_backend), ("aotgrad_inductor", aotgrad_inductor_backend)):
        if name not in _BACKENDS or _BACKENDS[name] is None:
            register_backend(fn, name=name)
