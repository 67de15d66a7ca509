"""`aotgrad.explain(fn_or_module, *args)`: what aotgrad makes of a function, for people.

In: a function or `nn.Module` and example inputs (nothing runs: the compile traces fake
copies). Out: an `Explanation`, the `CompileRecord` (phases.py) of that compile put into
words; `print(explanation)` shows, in order:

    header              the function and its inputs (placeholder, name, shape, requires grad)
    forward graph       readable Python, each line with the user's source line
    backward graph      the same, each line also naming the forward op it differentiates
    saved, recomputed   the values the backward reads (shape, dtype, bytes) and ops run again
    input mutations     which input is written, and how the new value is written back
    output aliases      which output views which input or output, and how it is rebuilt
    compile time        per phase, ms and share

The attributes (`forward_graph`, `saved`, `mutations`, `phases`, ...) hold the same facts.
`aotgrad explain SCRIPT.py [args]` (`main`) runs a script with aotgrad's backends, as
`aotgrad report` does, and prints the explanation of every compile it made.
"""
from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from aotgrad.analysis import ForwardAnalysis, OutputKind
from aotgrad.observe import phases as _phases
from aotgrad.observe.printing import annotation, format_graph
from aotgrad.partition.inspection import PartitionReport, RecomputedOp, SavedValue, report


@dataclass(frozen=True)
class ExplainedInput:
    """One input of the compiled graphs, as the caller knows it."""

    placeholder: str        # primals_1 ...
    name: str               # the argument's name (`x`, `batch['a']`), or the parameter's (`fc.weight`)
    kind: str               # "input", "parameter", "buffer", or "leaf made inside"
    value: str              # 'f32[4, 3]'
    requires_grad: bool
    mutated: bool


@dataclass(frozen=True)
class InputMutation:
    """Input `index` is written in place; the forward returns its new value, the epilogue copies it in."""

    index: int
    input: str              # its name
    new_value: str          # the forward graph's node holding the new value
    how: str                # e.g. 'x.copy_(add) under no_grad (autograd does not see it)'


@dataclass(frozen=True)
class OutputAlias:
    """User output `output` is an input, another output, or a view of one; rebuilt after the graph runs."""

    output: int
    kind: OutputKind
    of: str                 # 'input x', 'output 0', 'mul (returned by the forward for it)'
    rebuilt: str            # 'aten.view.default(x, [-1])'


@dataclass
class Explanation:
    """What aotgrad made of one function for one set of inputs; `print()` it."""

    fn_name: str
    records: list                       # every CompileRecord made while explaining; `record` is the last
    inputs: list[ExplainedInput]
    forward_graph: str                  # the forward graph (the inference graph without backward) as Python
    backward_graph: str | None          # None: no backward (inference)
    partition: PartitionReport | None   # saved values and recomputed ops; None without backward
    mutations: list[InputMutation] = field(default_factory=list)
    aliases: list[OutputAlias] = field(default_factory=list)
    no_backward_reason: str = ""

    @property
    def record(self):
        return self.records[-1]

    @property
    def phases(self) -> dict[str, float]:
        """Phase name -> seconds, in the order run."""
        return dict(self.record.phases)

    @property
    def saved(self) -> list[SavedValue]:
        return list(self.partition.saved) if self.partition else []

    @property
    def saved_bytes(self) -> int:
        return self.partition.saved_bytes if self.partition else 0

    @property
    def recomputed(self) -> list[RecomputedOp]:
        return list(self.partition.recomputed) if self.partition else []

    def sections(self) -> dict[str, str]:
        """Section title -> its text, in print order."""
        backward = f"backward graph: none ({self.no_backward_reason})" if self.backward_graph is None \
            else "backward graph:\n" + self.backward_graph
        return {
            "header": _header(self),
            "forward": ("forward graph:\n" if self.backward_graph is not None
                        else "forward graph (inference, no backward):\n") + self.forward_graph,
            "backward": backward,
            "saved": str(self.partition) if self.partition else "saved for backward: nothing (no backward)",
            "mutations": _mutations_text(self.mutations),
            "aliases": _aliases_text(self.aliases),
            "compile time": _phases_text(self.record),
        }

    def __str__(self) -> str:
        return "\n\n".join(self.sections().values())

    __repr__ = __str__  # so that `aotgrad.explain(f, x)` at a prompt prints the report


def explain(fn_or_module: Callable, *args, partition_fn: Callable | None = None,
            decompositions: dict | None = None, dynamic: bool = False, **kwargs) -> Explanation:
    """Compile `fn_or_module(*args, **kwargs)` with aotgrad (graphs not compiled further,
    nothing run) and say what came out.

        def f(x, w):
            return (x * w).sin()
        print(aotgrad.explain(f, torch.randn(4, 3), torch.randn(3, requires_grad=True)))

    `partition_fn`, `decompositions` and `dynamic` are aot_function's; other keyword
    arguments are the function's. Inputs are traced as fakes, so none is changed.
    """
    from aotgrad.api import aot_function, aot_module, nop

    options = dict(partition_fn=partition_fn, decompositions=decompositions, dynamic=dynamic)
    with _phases.watch() as records:
        if isinstance(fn_or_module, torch.nn.Module):
            compiled = aot_module(fn_or_module, nop, **options)
            compiled.compiled.precompile(_module_state(fn_or_module), args, kwargs)
        else:
            aot_function(fn_or_module, nop, **options).precompile(*args, **kwargs)
    if not records:
        raise RuntimeError(f"aotgrad.explain: compiling {_name(fn_or_module)} recorded no compile")
    return _explanation(records, _input_names(fn_or_module, args, kwargs))


# -- from a record to an Explanation ------------------------------------------

def _explanation(records: list, names: list[tuple[str, str]]) -> Explanation:
    record = records[-1]
    analysis: ForwardAnalysis | None = record.analysis
    fw, bw = record.forward, record.backward
    primals = [n for n in fw.graph.nodes if n.op == "placeholder"]
    names = _names_for(primals, names)
    input_names = [name for name, _ in names]
    forward_roles = _forward_output_roles(fw, analysis, input_names, bw is not None)
    forward_graph = format_graph(fw, "forward")
    if forward_roles is not None:
        forward_graph += "\n" + _forward_legend(fw, forward_roles, bw is not None)
    backward_graph = partition = None
    if bw is not None:
        backward_graph = format_graph(bw, "backward")
        legend = _backward_legend(fw, bw, record, input_names, forward_roles)
        backward_graph += "\n" + legend if legend else ""
        partition = report(fw, bw)
    mutated = {info.index for info in analysis.mutated_inputs} if analysis else set()
    inputs = []
    for k, (node, (name, kind)) in enumerate(zip(primals, names)):
        info = analysis.inputs[k] if analysis and k < len(analysis.inputs) else None
        inputs.append(ExplainedInput(node.name, name, kind, annotation(node.meta.get("val")),
                                     bool(info and info.requires_grad), k in mutated))
    reason = "" if bw is not None else (
        "grad mode is off" if not torch.is_grad_enabled() else "no input requires grad")
    return Explanation(record.fn_name, list(records), inputs, forward_graph, backward_graph, partition,
                       _mutations(fw, record, analysis, input_names), _aliases(fw, analysis, input_names),
                       reason)


def _module_state(module: torch.nn.Module) -> dict:
    """The state aot_module passes its compiled function (AotModule.forward's first argument)."""
    return {**dict(module.named_parameters(remove_duplicate=False)),
            **dict(module.named_buffers(remove_duplicate=False))}


def _name(fn) -> str:
    return type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "fn")


def _input_names(fn, args: tuple, kwargs: dict) -> list[tuple[str, str]]:
    """(name, kind) of each distinct input tensor, in the order the compiled graphs take them."""
    if isinstance(fn, torch.nn.Module):
        parameters = {name for name, _ in fn.named_parameters(remove_duplicate=False)}
        state = _module_state(fn)
        leaves, _ = pytree.tree_flatten_with_path(((state, args, kwargs), {}))
        signature_of = fn.forward

        def name_of(path) -> tuple[str, str]:
            where, rest = path[1].idx, path[2:]
            if where == 0:
                key = rest[0].key
                return key, "parameter" if key in parameters else "buffer"
            return _argument_name(signature_of, where == 1, rest), "input"
    else:
        leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
        signature_of = fn

        def name_of(path) -> tuple[str, str]:
            return _argument_name(signature_of, path[0].idx == 0, path[1:]), "input"

    names: dict[int, list] = {}
    for path, value in leaves:
        if isinstance(value, torch.Tensor):
            name, kind = name_of(path)
            names.setdefault(id(value), [[], kind])[0].append(name)
    return [(" = ".join(n), kind) for n, kind in names.values()]


def _argument_name(fn, positional: bool, path: tuple) -> str:
    """`x`, `x[0]`, `batch['a']`, `args[2]` for the leaf at `path` under the call's args or kwargs."""
    rest = pytree.keystr(path[1:])
    if not positional:
        return f"{path[0].key}{rest}"
    i = path[0].idx
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return f"args[{i}]{rest}"
    positional_params = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if i < len(positional_params):
        return positional_params[i].name + rest
    star = next((p.name for p in parameters if p.kind is p.VAR_POSITIONAL), "args")
    return f"{star}[{i - len(positional_params)}]{rest}"


def _names_for(primals: list[fx.Node], names: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The caller's names for the graphs' placeholders, when they line up with the distinct
    input tensors (a synthetic base for aliased mutated inputs makes them not: then the
    placeholders' own names). Primals past the caller's inputs are leaves made inside."""
    lined_up = len(primals) >= len(names)
    names = list(names) if lined_up else []
    return names + [(node.name, "leaf made inside" if lined_up else "input") for node in primals[len(names):]]


def _forward_output_roles(fw: fx.GraphModule, analysis: ForwardAnalysis | None, input_names: list[str],
                          training: bool) -> list[str] | None:
    """What each forward output is for: 'output 0', 'base of output 1', 'new value of x', 'saved'.
    None when the outputs do not line up with the analysis (then no legend is printed)."""
    if analysis is None:
        return None
    outs = _outputs(fw)
    roles = []
    fresh = {info.index: k for k, info in enumerate(analysis.outputs) if info.kind is OutputKind.FRESH}
    viewed: dict[int, list[int]] = {}
    for k, info in enumerate(analysis.outputs):
        if info.kind is OutputKind.ALIAS_OF_OUTPUT:
            viewed.setdefault(info.index, []).append(k)
    sizes = set(analysis.symbol_outputs.values())
    for j in range(len(analysis.forward_outputs)):
        if j in fresh:
            roles.append(f"output {fresh[j]}")
        elif j in viewed:
            roles.append("base of " + ", ".join(f"output {k}" for k in viewed[j]))
        else:
            roles.append("a size" if j in sizes else "an intermediate")
    roles += [f"new value of {_input(input_names, info.index)}" for info in analysis.mutated_inputs]
    num_saved = fw.meta.get("num_saved", 0) if training else 0
    if len(outs) != len(roles) + num_saved:
        return None
    return roles + ["saved"] * num_saved


def _forward_legend(fw: fx.GraphModule, roles: list[str], training: bool) -> str:
    outs = _outputs(fw)
    returned = [f"{_arg(o)} = {role}" for o, role in zip(outs, roles) if role != "saved"]
    saved = [_arg(o) for o, role in zip(outs, roles) if role == "saved"]
    text = "# returns: " + (", ".join(returned) or "nothing for the caller")
    if training:
        text += "; then saved for backward: " + (", ".join(saved) or "nothing")
    return text


def _backward_legend(fw: fx.GraphModule, bw: fx.GraphModule, record, input_names: list[str],
                     forward_roles: list[str] | None) -> str:
    """'# tangents_1 = grad of sin (output 0)' and '# returns: view_2 = grad of w', where known."""
    lines = []
    tangents = [n.name for n in bw.graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    sources = record.tangent_sources
    if forward_roles is not None and sources is not None and len(sources) == len(tangents) and tangents:
        outs = _outputs(fw)
        lines.append("# " + ", ".join(f"{t} = grad of {_arg(outs[j])} ({forward_roles[j]})"
                                      for t, j in zip(tangents, sources)))
    grads = _outputs(bw)
    grad_inputs = record.grad_inputs
    if grad_inputs is not None and len(grad_inputs) == len(grads):
        returned = [f"{_arg(g)} = grad of {_input(input_names, i)}" for g, i in zip(grads, grad_inputs)
                    if g is not None]
        lines.append("# returns: " + (", ".join(returned) or "no grads"))
    return "\n".join(lines)


def _mutations(fw: fx.GraphModule, record, analysis: ForwardAnalysis | None,
               input_names: list[str]) -> list[InputMutation]:
    epilogue = record.epilogue
    if epilogue is None:
        return []
    outs = _outputs(fw)
    result = []
    for step in epilogue.write_backs:
        name = _input(input_names, step.input_index)
        new = _arg(outs[step.slot]) if step.slot < len(outs) else f"forward output {step.slot}"
        if not step.bumps_version:
            how = f"{name}.data.copy_({new}) (no version bump, as eager wrote it through .data)"
        elif step.visible_to_autograd:
            how = f"{name}.copy_({new}), recorded by autograd"
        else:
            how = f"{name}.copy_({new}) under no_grad (autograd does not see it)"
        result.append(InputMutation(step.input_index, name, new, how))
    for info in analysis.inputs if analysis else ():
        if info.mutates_metadata and not info.mutates_data:
            name = _input(input_names, info.index)
            result.append(InputMutation(info.index, name, "",
                                        "sizes, strides or requires_grad changed in place, not its data"))
    return result


def _aliases(fw: fx.GraphModule, analysis: ForwardAnalysis | None, input_names: list[str]) -> list[OutputAlias]:
    if analysis is None:
        return []
    outs = _outputs(fw)
    fresh = {info.index: k for k, info in enumerate(analysis.outputs) if info.kind is OutputKind.FRESH}
    result = []
    for k, info in enumerate(analysis.outputs):
        if info.kind is OutputKind.INPUT:
            name = _input(input_names, info.index)
            result.append(OutputAlias(k, info.kind, f"input {name}", f"{name} itself"))
        elif info.kind is OutputKind.SAME_AS_OUTPUT:
            result.append(OutputAlias(k, info.kind, f"output {info.index}", f"output {info.index} itself"))
        elif info.kind is OutputKind.ALIAS_OF_INPUT:
            name = _input(input_names, info.index)
            result.append(OutputAlias(k, info.kind, f"input {name}", _rebuilt(info, name)))
        elif info.kind is OutputKind.ALIAS_OF_OUTPUT:
            base = _arg(outs[info.index]) if info.index < len(outs) else f"forward output {info.index}"
            of = f"output {fresh[info.index]} ({base})" if info.index in fresh \
                else f"{base} (returned by the forward for it)"
            result.append(OutputAlias(k, info.kind, of, _rebuilt(info, base)))
    return result


def _rebuilt(info, base: str) -> str:
    """The view ops replayed on the real base, as a call: 'aten.view.default(x, [-1])'."""
    if info.replay is None:
        return f"as_strided({base}, {list(info.size)}, {list(info.stride)}, {info.storage_offset})"
    text = base
    for step in info.replay:
        text = repr(step).replace("(_", f"({text}", 1)
    return text


def _outputs(gm: fx.GraphModule) -> list:
    return list(next(iter(gm.graph.find_nodes(op="output"))).args[0])


def _arg(node: Any) -> str:
    return node.name if isinstance(node, fx.Node) else repr(node)


def _input(input_names: list[str], index: int) -> str:
    return input_names[index] if index < len(input_names) else f"input {index}"


# -- text ----------------------------------------------------------------------

def _header(e: Explanation) -> str:
    compiles = f" ({len(e.records)} compiles; the last shown)" if len(e.records) > 1 else ""
    lines = [f"aotgrad.explain: {e.fn_name}{compiles}", "inputs:"]
    rows = []
    for i in e.inputs:
        notes = [i.kind] if i.kind != "input" else []
        notes += ["requires grad"] * i.requires_grad + ["mutated"] * i.mutated
        rows.append((i.placeholder, i.name, i.value, ", ".join(notes)))
    lines += _table(rows) or ["  none"]
    return "\n".join(lines)


def _mutations_text(mutations: list[InputMutation]) -> str:
    if not mutations:
        return "input mutations: none"
    return "\n".join([f"input mutations: {len(mutations)}"] + _table([(m.input, m.how) for m in mutations]))


def _aliases_text(aliases: list[OutputAlias]) -> str:
    if not aliases:
        return "output aliases: none"
    rows = [(f"output {a.output}", ("is " if a.kind in (OutputKind.INPUT, OutputKind.SAME_AS_OUTPUT) else "views ")
             + a.of, "" if a.kind in (OutputKind.INPUT, OutputKind.SAME_AS_OUTPUT) else f"rebuilt as {a.rebuilt}")
            for a in aliases]
    return "\n".join([f"output aliases: {len(aliases)}"] + _table(rows))


def _phases_text(record) -> str:
    total = record.total
    cache = f" (disk cache: {record.disk_cache})" if record.disk_cache != "off" else ""
    rows = [(name, f"{seconds * 1e3:.1f} ms", f"{100 * seconds / total:.0f}%" if total else "-")
            for name, seconds in record.phases.items()]
    return "\n".join([f"compile time: {total * 1e3:.1f} ms{cache}"] + _table(rows, right=(1, 2)))


def _table(rows: list[tuple], right: tuple[int, ...] = ()) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  " + "  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                             for c, (cell, w) in enumerate(zip(row, widths))).rstrip() for row in rows]


# -- the command line: `aotgrad explain SCRIPT.py [args]` -----------------------------

def main(argv: list[str] | None = None) -> int:
    """Run a script (or `-m` module) as `__main__` with aotgrad's backends in place of the
    ones it asks torch.compile for (report.py's `substitute`, disk cache off so every graph
    is traced), then print each compile's explanation; exit with the script's status."""
    from aotgrad import config
    from aotgrad.tooling import report

    parser = argparse.ArgumentParser(
        prog="aotgrad explain",
        usage="aotgrad explain [--backend CHOICE] (SCRIPT.py | -m MODULE) [args ...]",
        description="Run a script with aotgrad's backends and print what each compile made of it: "
                    "forward and backward graphs, saved values, input mutations, output aliases.")
    parser.add_argument("--backend", choices=("auto", "aotgrad", "aotgrad_inductor"), default="auto",
                        help="auto (default): torch.compile's inductor (or no backend) runs as aotgrad_inductor "
                             "and aot_eager as aotgrad; aotgrad or aotgrad_inductor: every backend named by a "
                             "string runs as that one")
    own, command = report.split_command_line(sys.argv[1:] if argv is None else argv)
    options = parser.parse_args(own)
    if not command or command == ["-m"]:
        parser.error("name a script to run (SCRIPT.py [args]) or a module (-m MODULE [args])")
    if command[0] != "-m" and not os.path.isfile(command[0]):
        parser.error(f"no such script: {command[0]}")
    seen: list[tuple] = []
    with config.patch(cache_dir=None), report.substitute(options.backend, Counter()), \
            _phases.watch(lambda record: seen.append((record, _dynamo_input_names()))):
        status, _ = report.run_as_main(command)
    for k, (record, names) in enumerate(seen, 1):
        print(f"\n== compile {k} of {len(seen)}: {record.origin}\n")
        print(_explanation([record], names))
    if not seen:
        print("aotgrad explain: the script compiled nothing with aotgrad's backends", file=sys.stderr)
    return status


def _dynamo_input_names() -> list[tuple[str, str]]:
    """(name, kind) of the placeholders of the graph torch.compile is compiling now, named
    after Dynamo's sources (`L['x']` -> `x`, `G['model']._modules['0']._parameters['weight']`
    -> `model.0.weight`); [] when no Dynamo compile is running (then the placeholders keep
    their own names)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        placeholders = InstructionTranslator.current_tx().output.graph.find_nodes(op="placeholder")
    except (AttributeError, IndexError, AssertionError, RuntimeError):
        return []
    names = []
    for node in placeholders:
        arg = node.meta.get("grapharg")
        source = getattr(arg, "source", None)
        name = source.name() if callable(getattr(source, "name", None)) else getattr(source, "name", node.name)
        name = re.sub(r"\._(?:modules|parameters|buffers)\['([^']*)'\]", r".\1", name)
        name = re.sub(r"^[LG]\['([^']*)'\]", r"\1", name)
        kind = "parameter" if isinstance(getattr(arg, "example", None), torch.nn.Parameter) else "input"
        names.append((name, kind))
    return names
