"""Epilogue steps run after the compiled forward: write back mutated inputs, rebuild
outputs that alias inputs or each other, restore the grad mode the code left.

In: the real inputs and the compiled forward's outputs. Out: the flat user outputs.
`Epilogue` is the data (write-backs, metadata replays, restrides, output rebuilds, each a
small dataclass with a readable repr); `epilogue_steps` makes its steps (the bottom of this
file), each with `run` and `emit` side by side (runtime/lower.py): `Epilogue.run` interprets
them, and an entry's generated call writes them out when every one has straight code.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from aotgrad.analysis import ForwardAnalysis, OutputKind, ViewStep
from aotgrad.runtime.lower import Code, interpret
from aotgrad.runtime.sizes import SymbolSources, concrete, has_symbols
from aotgrad.trace.symbolic import free_symbols


@dataclass(frozen=True)
class WriteBack:
    """input[input_index].copy_(forward output slot); under no_grad if autograd must not see it."""

    input_index: int
    slot: int
    visible_to_autograd: bool
    bumps_version: bool = True  # False: written as eager did, through `.data` (no version bump)
    after_metadata: bool = False  # written after the input's metadata replay (its storage grew)
    in_graph: bool = False  # the compiled graph wrote it (Epilogue.written_in_graph): only the version bump is left

    @property
    def quiet(self) -> bool:
        """Hidden from autograd and bumping the version: BatchNorm's running statistics.
        The epilogue writes all of these in one `_foreach_copy_` under one no_grad, unless the
        compiled graph wrote them itself."""
        return not self.visible_to_autograd and self.bumps_version and not self.after_metadata and not self.in_graph

    @property
    def unversioned(self) -> bool:
        """Hidden from autograd and bumping no version: BatchNorm's running mean and variance,
        which eager writes below autograd. The epilogue writes all of these in one
        `_foreach_copy_` into their `.data` (whose version counter is their own), unless the
        compiled graph wrote them itself."""
        return not self.visible_to_autograd and not self.bumps_version and not self.after_metadata and not self.in_graph

    def run(self, inputs: Sequence[torch.Tensor], outs: Sequence[Any]) -> None:
        new = outs[self.slot]
        target = inputs[self.input_index]
        if self.visible_to_autograd and torch.is_grad_enabled():
            target.copy_(new)
        elif not self.bumps_version:
            target.data.copy_(new)
        else:
            with torch.no_grad():
                target.copy_(new)


@dataclass(frozen=True)
class ReplayMetadata:
    """What the function did in place to input `input_index`'s metadata, done to the caller's
    tensor: around its data write-back (in the input's original geometry), a `detach_()` if it
    was detached and then written, the recorded metadata ops (`t_`, `unsqueeze_`,
    `as_strided_`, `resize_`, in the grad mode each ran in: eager's grad_fns), and a
    `detach_()` if it ends detached (`detach_()`, `requires_grad_(False)`) or a
    `requires_grad_()` if it was made to require grad (the training runtime does that before
    the call too: call.RequireGrad)."""

    input_index: int
    steps: tuple = ()
    autograd_change: str | None = None
    symbolic: bool = False

    def concrete(self, env: dict) -> "ReplayMetadata":
        steps = tuple(_with_sizes(s, env) for s in self.steps)
        return ReplayMetadata(self.input_index, steps, self.autograd_change)

    def before_write(self, inputs: Sequence[torch.Tensor]) -> None:
        if self.autograd_change == "detach_before_write":
            inputs[self.input_index].detach_()

    def after_write(self, inputs: Sequence[torch.Tensor]) -> None:
        target = inputs[self.input_index]
        for step in self.steps:
            step(target)
        if self.autograd_change == "detach":
            target.detach_()
        elif self.autograd_change == "requires_grad":
            target.requires_grad_()


def _with_sizes(step: ViewStep, env: dict) -> ViewStep:
    """A recorded view step with the call's sizes (dynamic shapes)."""
    return dataclasses.replace(step, args=concrete(step.args, env), kwargs=concrete(step.kwargs, env))


def _same_layout(t: torch.Tensor, stride: tuple) -> bool:
    """t's strides equal `stride` wherever they matter (dims of size > 1)."""
    return all(n <= 1 or a == b for n, a, b in zip(t.shape, t.stride(), stride))


@dataclass(frozen=True)
class RestrideBase:
    """Forward output `index`, which other outputs view, given its traced (eager's) strides
    where the compiled forward laid it out otherwise on dims of size 1 only: an `as_strided`
    of the same memory, the same elements. Views replayed on it then get eager's strides.

    (`v0 = a.amax(2); v2 = v0.t(); v2.add_(ones(1, 3))`: v0's new value is
    `t(add(t(v0), ones))`, strides (1, 3) where eager's v0 keeps (1, 1); `v0.unfold(-1, 1, 2)`
    replayed on it has strides (1, 6, 3), eager's (1, 2, 1).) Strides that differ on a larger
    dim cannot be fixed without a copy: functionalize keeps written intermediates in eager's
    layout, and the view replay gives the same elements either way.
    """

    index: int
    stride: tuple
    symbolic: bool = False  # the traced strides are SymInts: made concrete per call

    def concrete(self, env: dict) -> "RestrideBase":
        return RestrideBase(self.index, concrete(self.stride, env))

    def run(self, outs: list) -> None:
        base = outs[self.index]
        if base.stride() != self.stride and _same_layout(base, self.stride):
            outs[self.index] = base.as_strided(base.shape, self.stride, base.storage_offset())


@dataclass(frozen=True)
class RebuildOutput:
    """One user output, from its kind: a forward output, an input, or a view of either.

    Views are rebuilt by replaying the recorded view ops on the real base (so dtype,
    conj/neg bits and grad_fn are eager's), or, when none were recovered, with as_strided.
    """

    kind: OutputKind
    index: Any
    size: tuple = ()
    stride: tuple = ()
    storage_offset: int = 0
    requires_grad: bool = False
    base_stride: tuple | None = None  # set when the view reads absolute offsets of a forward output
    value: Any = None
    replay: tuple[ViewStep, ...] | None = None
    symbolic: bool = False  # sizes or view arguments are SymInts: made concrete per call
    own_version_counter: bool = False  # eager's output does not share its base's (`x.data`)
    history: int | None = None  # the forward output whose autograd history the alias takes

    def concrete(self, env: dict) -> "RebuildOutput":
        """This step with the call's sizes (dynamic shapes)."""
        replay = None if self.replay is None else tuple(
            _with_sizes(s, env) for s in self.replay)
        return RebuildOutput(self.kind, self.index, concrete(self.size, env), concrete(self.stride, env),
                             concrete(self.storage_offset, env), self.requires_grad,
                             concrete(self.base_stride, env), self.value, replay,
                             own_version_counter=self.own_version_counter, history=self.history)

    def run(self, inputs, outs, built: list) -> Any:
        kind = self.kind
        if kind is OutputKind.FRESH:
            return outs[self.index]
        if kind is OutputKind.INPUT:
            return inputs[self.index]
        if kind is OutputKind.SAME_AS_OUTPUT:
            return built[self.index]
        if kind is OutputKind.CONSTANT:
            return self.value
        base = inputs[self.index] if kind is OutputKind.ALIAS_OF_INPUT else outs[self.index]
        if base.requires_grad and (self.history is not None or not self.requires_grad):
            base = base.detach()  # (a view taken under no_grad would still require grad)
        alias = self._view(base)
        if self.own_version_counter:
            alias = alias.data  # the same memory, a version counter of its own
        if self.history is not None:
            alias = _with_history(alias, outs[self.history])
        return alias

    def _view(self, base: torch.Tensor) -> torch.Tensor:
        if self.base_stride is not None and not _same_layout(base, self.base_stride):
            raise RuntimeError(
                f"aotgrad: an output is a view of a compiled-graph output whose strides "
                f"{tuple(base.stride())} differ from the traced ones {self.base_stride}; "
                "rebuilding the view would read the wrong elements. To continue: return "
                "`.clone()` of the view, or use backend='aotgrad' (graphs run as traced).")
        if self.replay is not None:
            for step in self.replay:
                base = step(base)
            return base
        offset = self.storage_offset
        if self.kind is OutputKind.ALIAS_OF_OUTPUT:
            offset += base.storage_offset()
        return base.as_strided(self.size, self.stride, offset)


class _TakeHistory(torch.autograd.Function):
    """`alias` (returned as modified in place) with `carrier`'s autograd history: the gradient
    of the alias flows to the carrier, as it did in eager to the tensor written into it."""

    @staticmethod
    def forward(ctx, alias, carrier):
        ctx.mark_dirty(alias)
        return alias

    @staticmethod
    def backward(ctx, grad):
        return None, grad


def _with_history(alias: torch.Tensor, carrier: torch.Tensor) -> torch.Tensor:
    """`alias` rebuilt without a history (see OutputInfo.history) taking `carrier`'s; its
    version stays as it was (eager's write that gave it the history is already counted)."""
    version = alias._version
    alias = alias.detach()  # not a view: autograd would route the grad through the base (summing overlaps)
    with torch.enable_grad():
        alias = _TakeHistory.apply(alias, carrier)
    torch._C._autograd._unsafe_set_version_counter((alias,), (version,))
    return alias


@dataclass
class Epilogue:
    write_backs: list[WriteBack] = field(default_factory=list)
    outputs: list[RebuildOutput] = field(default_factory=list)
    grad_mode_after: bool | None = None
    leaf_outputs: list[int] = field(default_factory=list)
    sizes: SymbolSources | None = None  # dynamic shapes: where the symbols of symbolic steps are read
    restrides: list[RestrideBase] = field(default_factory=list)  # run before the outputs are rebuilt
    scalar_outputs: list[int] = field(default_factory=list)  # symbolic numbers, returned as 0-d tensors
    metadata: list[ReplayMetadata] = field(default_factory=list)  # inputs' metadata, around the write-backs

    num_inputs: int = 0  # the flat inputs the epilogue is run with

    def __post_init__(self):
        self.steps = epilogue_steps(self)

    def __getstate__(self) -> dict:  # (the disk cache stores the data; the steps follow from it)
        return {k: v for k, v in self.__dict__.items() if k != "steps"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.steps = epilogue_steps(self)

    @property
    def touches_inputs(self) -> bool:
        """Does it write into an input or return one, or a view of one? Then which inputs
        share memory was part of the compile."""
        return bool(self.write_backs or self.metadata or any(
            o.kind in (OutputKind.INPUT, OutputKind.ALIAS_OF_INPUT) for o in self.outputs))

    def written_in_graph(self, slots) -> "Epilogue":
        """This epilogue for a compiled forward that writes the write-backs at `slots` into its
        inputs itself (and returns None there): those keep only their version bump, one per
        input as the `_foreach_copy_` gives (a graph compiler's kernels write memory without
        one), or none where eager wrote without one (BatchNorm's running mean and variance)."""
        slots = set(slots)
        if not slots:
            return self
        writable = {slot for _, slot in self.writable_in_graph()}
        assert slots <= writable, f"write-backs {sorted(slots - writable)} cannot move into a graph"
        return dataclasses.replace(self, write_backs=[dataclasses.replace(w, in_graph=True) if w.slot in slots else w
                                                      for w in self.write_backs])

    def writable_in_graph(self) -> tuple[tuple[int, int], ...]:
        """(input index, forward output slot) of the write-backs a graph compiler may do inside
        the forward graph (a `copy_` into the input): those hidden from autograd and not tied
        to a metadata replay (BatchNorm's running statistics)."""
        return tuple((w.input_index, w.slot) for w in self.write_backs
                     if not w.visible_to_autograd and not w.after_metadata and not w.in_graph)

    @staticmethod
    def plan(analysis: ForwardAnalysis, grad_mode_before: bool, grad_mode_after: bool,
             symbol_sources: dict | None = None, scalar_outputs: Sequence[int] = ()) -> "Epilogue":
        first_mutation_slot = len(analysis.forward_outputs)
        write_backs = [WriteBack(info.index, first_mutation_slot + k, info.mutation_visible_to_autograd,
                                 info.bumps_version, info.grows_storage)
                       for k, info in enumerate(analysis.mutated_inputs)]
        outputs = []
        for info in analysis.outputs:
            base_stride = None
            absolute = info.replay is None or any(s.op is torch.ops.aten.as_strided.default for s in info.replay)
            if info.kind is OutputKind.ALIAS_OF_OUTPUT and absolute:
                base_stride = tuple(analysis.forward_output_strides[info.index])
            replay_args = [(s.args, s.kwargs) for s in info.replay or ()]
            symbolic = info.kind not in (OutputKind.FRESH, OutputKind.INPUT, OutputKind.SAME_AS_OUTPUT) and \
                has_symbols((tuple(info.size), tuple(info.stride), info.storage_offset, base_stride, replay_args))
            outputs.append(RebuildOutput(info.kind, info.index, info.size, tuple(info.stride),
                                         info.storage_offset, info.requires_grad, base_stride, info.value,
                                         info.replay, symbolic, info.own_version_counter, info.history))
        changed = grad_mode_after if grad_mode_after != grad_mode_before else None
        restrides = _restride_bases(analysis, symbol_sources or {})
        metadata = [ReplayMetadata(info.index, info.metadata_steps, info.autograd_change,
                                   has_symbols([(s.args, s.kwargs) for s in info.metadata_steps]))
                    for info in analysis.inputs if info.metadata_steps or info.autograd_change]
        symbolic = any(o.symbolic for o in outputs) or any(r.symbolic for r in restrides) or any(
            m.symbolic for m in metadata)
        sizes = SymbolSources.of(symbol_sources or {}, analysis.forward_outputs,
                                 analysis.symbol_outputs) if symbolic else None
        return Epilogue(write_backs, outputs, changed, list(analysis.leaf_outputs), sizes, restrides,
                        list(scalar_outputs), metadata, len(analysis.inputs))

    def run(self, inputs: Sequence[torch.Tensor], outs: Sequence[Any]) -> list[Any]:
        """The user outputs, after the writes into `inputs` (the steps interpreted)."""
        return interpret(self.steps, EpilogueEnv(inputs, outs)).built

    def __repr__(self) -> str:
        lines = [f"  {s}" for s in self.write_backs + self.metadata + self.restrides + self.outputs]
        lines += [f"  output {j}: .item()" for j in self.scalar_outputs]
        if self.grad_mode_after is not None:
            lines.append(f"  set_grad_enabled({self.grad_mode_after})")
        return "Epilogue(\n" + "\n".join(lines) + "\n)"


def _restride_bases(analysis: ForwardAnalysis, symbol_sources: dict) -> list[RestrideBase]:
    """A restride step for each forward output that other outputs view, except leaves made
    inside (a view of one is no leaf) and traced strides that read symbols no input carries
    (data-dependent sizes: eager's strides are not known per call)."""
    bases = {info.index for info in analysis.outputs if info.kind is OutputKind.ALIAS_OF_OUTPUT}
    steps = []
    for j in sorted(bases - set(analysis.leaf_outputs)):
        stride = tuple(analysis.forward_output_strides[j])
        symbolic = has_symbols(stride)
        if symbolic and not free_symbols(stride) <= set(symbol_sources):
            continue
        steps.append(RestrideBase(j, stride, symbolic))
    return steps


# -- the epilogue's steps (runtime/lower.py: run and emit side by side) -------------------

class EpilogueEnv:
    """The epilogue's values. In the generated call, input i is the local `a{i}`, the compiled
    forward's outputs are `outs` and the user outputs `return_values` (`built` here)."""

    __slots__ = ("inputs", "outs", "sizes", "metadata", "built")

    def __init__(self, inputs: Sequence[torch.Tensor], outs: Sequence[Any]):
        self.inputs, self.outs = inputs, outs
        self.sizes: dict | None = None
        self.metadata: Sequence[ReplayMetadata] = ()
        self.built: list[Any] = []


@dataclass(frozen=True)
class BindSizes:
    """Dynamic shapes: the call's values of the symbols the steps below read (read before any
    metadata changes)."""

    sources: SymbolSources

    def run(self, env: EpilogueEnv) -> None:
        env.sizes = self.sources.bind(env.inputs, env.outs)

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class MetadataBeforeWrites:
    """The inputs' metadata replays (`ReplayMetadata`), with the call's sizes, and their part
    before the data write-backs (a `detach_()` of an input detached and then written)."""

    replays: tuple[ReplayMetadata, ...]

    def run(self, env: EpilogueEnv) -> None:
        env.metadata = [m.concrete(env.sizes) if m.symbolic else m for m in self.replays]
        for m in env.metadata:
            m.before_write(env.inputs)

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class WriteTogether:
    """Write-backs hidden from autograd, all in one `_foreach_copy_` under no_grad (distinct
    inputs, aliased ones share one base: the order is free): `pairs` of (input, forward output
    slot). `through_data`: into the inputs' `.data`, bumping no version, as eager writes
    BatchNorm's running mean and variance; else into the inputs (BatchNorm's count)."""

    pairs: tuple[tuple[int, int], ...]
    through_data: bool

    def run(self, env: EpilogueEnv) -> None:
        inputs, outs = env.inputs, env.outs
        with torch.no_grad():
            torch._foreach_copy_([inputs[i].data if self.through_data else inputs[i] for i, _ in self.pairs],
                                 [outs[k] for _, k in self.pairs])

    def emit(self, code: Code) -> bool:
        targets = ", ".join(f"a{i}.data" if self.through_data else f"a{i}" for i, _ in self.pairs)
        sources = ", ".join(f"outs[{k}]" for _, k in self.pairs)
        comment = "written as eager does: no version bump" if self.through_data else \
            "written back: not seen by autograd"
        code(f"    with {code.const(torch.no_grad, 'no_grad')}():  # {comment}")
        code(f"        {code.const(torch._foreach_copy_, 'foreach_copy_')}([{targets}], [{sources}])")
        return True


@dataclass(frozen=True)
class BumpVersions:
    """Inputs the compiled graph wrote itself (Epilogue.written_in_graph): only the version
    bump eager's write made is left."""

    inputs: tuple[int, ...]

    def run(self, env: EpilogueEnv) -> None:
        torch.autograd.graph.increment_version([env.inputs[i] for i in self.inputs])

    def emit(self, code: Code) -> bool:
        bumped = ", ".join(f"a{i}" for i in self.inputs)
        code(f"    {code.const(torch.autograd.graph.increment_version, 'increment_version')}([{bumped}])"
             "  # written inside the graph: their version bumps")
        return True


@dataclass(frozen=True)
class WriteOneByOne:
    """The other write-backs, each by its own `WriteBack.run` (autograd may see them); `late`:
    those after the metadata replay (the input's storage grew). `inputs`: how many inputs the
    call has (the generated code passes them as one list)."""

    writes: tuple[WriteBack, ...]
    inputs: int
    late: bool = False

    def run(self, env: EpilogueEnv) -> None:
        for w in self.writes:
            w.run(env.inputs, env.outs)

    def emit(self, code: Code) -> bool:
        if self.late or any(w.input_index >= self.inputs for w in self.writes):
            return False  # (late ones come with a metadata replay, which is interpreted)
        code(f"    inputs = [{', '.join(f'a{i}' for i in range(self.inputs))}]")
        for w in self.writes:
            code(f"    {code.const(w)}.run(inputs, outs)  # write back input {w.input_index}")
        return True


@dataclass(frozen=True)
class MetadataAfterWrites:
    """The inputs' metadata ops replayed on the caller's tensors after their data is written
    (in the original geometry), then a `detach_()` or `requires_grad_()` where eager's ends so."""

    def run(self, env: EpilogueEnv) -> None:
        for m in env.metadata:
            m.after_write(env.inputs)

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class MarkLeaves:
    """Forward outputs made leaves inside the function (`nn.Parameter(...)`) require grad."""

    outputs: tuple[int, ...]

    def run(self, env: EpilogueEnv) -> None:
        for j in self.outputs:
            env.outs[j].requires_grad_(True)

    def emit(self, code: Code) -> bool:
        for j in self.outputs:
            code(f"    outs[{j}].requires_grad_(True)  # a leaf made inside the function")
        return True


@dataclass(frozen=True)
class RestrideBases:
    """Forward outputs that other outputs view, given eager's strides (`RestrideBase`)."""

    restrides: tuple[RestrideBase, ...]

    def run(self, env: EpilogueEnv) -> None:
        outs = list(env.outs)
        for restride in self.restrides:
            (restride.concrete(env.sizes) if restride.symbolic else restride).run(outs)
        env.outs = outs

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class RebuildOutputs:
    """The user outputs, each from its kind (`RebuildOutput`); written out when each is a
    forward output or an input as it is."""

    outputs: tuple[RebuildOutput, ...]

    def run(self, env: EpilogueEnv) -> None:
        built = env.built
        for step in self.outputs:
            built.append((step.concrete(env.sizes) if step.symbolic else step).run(env.inputs, env.outs, built))

    def emit(self, code: Code) -> bool:
        if not all(o.kind in (OutputKind.FRESH, OutputKind.INPUT) for o in self.outputs):
            return False
        values = [f"outs[{o.index}]" if o.kind is OutputKind.FRESH else f"a{o.index}" for o in self.outputs]
        code(f"    return_values = [{', '.join(values)}]")
        return True


@dataclass(frozen=True)
class ScalarOutputs:
    """Symbolic numbers the function returned, as Python numbers (`.item()` of their 0-d tensors)."""

    outputs: tuple[int, ...]

    def run(self, env: EpilogueEnv) -> None:
        for j in self.outputs:
            env.built[j] = env.built[j].item()

    def emit(self, code: Code) -> bool:
        return False


@dataclass(frozen=True)
class RestoreGradMode:
    """The grad mode the function left (`torch.set_grad_enabled` inside it)."""

    mode: bool

    def run(self, env: EpilogueEnv) -> None:
        torch.set_grad_enabled(self.mode)

    def emit(self, code: Code) -> bool:
        return False


def epilogue_steps(epilogue: Epilogue) -> tuple:
    """The epilogue's steps, in the order they run, only those it needs."""
    e = epilogue
    steps: list = []
    if e.sizes is not None:
        steps.append(BindSizes(e.sizes))
    if e.metadata:
        steps.append(MetadataBeforeWrites(tuple(e.metadata)))
    quiet = tuple((w.input_index, w.slot) for w in e.write_backs if w.quiet)
    if quiet:
        steps.append(WriteTogether(quiet, through_data=False))
    unversioned = tuple((w.input_index, w.slot) for w in e.write_backs if w.unversioned)
    if unversioned:
        steps.append(WriteTogether(unversioned, through_data=True))
    bumped = tuple(w.input_index for w in e.write_backs if w.in_graph and w.bumps_version)
    if bumped:
        steps.append(BumpVersions(bumped))
    loud = tuple(w for w in e.write_backs if not (w.quiet or w.unversioned or w.after_metadata or w.in_graph))
    if loud:
        steps.append(WriteOneByOne(loud, e.num_inputs))
    if e.metadata:
        steps.append(MetadataAfterWrites())
    late = tuple(w for w in e.write_backs if w.after_metadata)
    if late:
        steps.append(WriteOneByOne(late, e.num_inputs, late=True))
    if e.leaf_outputs:
        steps.append(MarkLeaves(tuple(e.leaf_outputs)))
    if e.restrides:
        steps.append(RestrideBases(tuple(e.restrides)))
    steps.append(RebuildOutputs(tuple(e.outputs)))
    if e.scalar_outputs:
        steps.append(ScalarOutputs(tuple(e.scalar_outputs)))
    if e.grad_mode_after is not None:
        steps.append(RestoreGradMode(e.grad_mode_after))
    return tuple(steps)
