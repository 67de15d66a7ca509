"""aot_module_simplified: compile the FX graph torch.compile hands a backend.

In: a GraphModule (parameters lifted as inputs, or still attributes), or any nn.Module,
and example inputs (fake tensors of torch.compile's fake mode, maybe ints). Out: a callable over
the same flat inputs. The graph is run node by node under the recorder so every aten
op keeps the user's source line and module path. Graphs with symbolic sizes compile once
for every size dynamo's guards admit (see compile_graph_module).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch._guards import TracingContext
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _get_current_dispatch_mode

from aotgrad.front.functions import AotFunction
from aotgrad.front.synthetic_base import size_carrier
from aotgrad.persistence import disk_cache
from aotgrad.pipeline import Options
from aotgrad.trace import GraphRecorder, UserGraphRunner


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return False


class _ModuleAsFunction:
    """Calls module(*inputs) with its parameters and buffers replaced by the leading
    values (lifted as graph inputs). Under the recorder a GraphModule is run node by
    node, so its aten ops keep the user's source lines; any other module just runs."""

    def __init__(self, module: torch.nn.Module, attr_names: list[str], size_inputs: dict[int, Any] | None = None,
                 carried_sizes: frozenset[int] = frozenset()):
        self.module, self.attr_names = module, attr_names
        self.size_inputs = size_inputs or {}  # position -> the SymInt torch.compile passed there
        self.carried_sizes = carried_sizes    # positions of sizes passed as a SizeCarrier tensor
        self.__name__ = "torch.compile graph" if isinstance(module, fx.GraphModule) else type(module).__name__

    def __call__(self, *values):
        attrs = dict(zip(self.attr_names, values[: len(self.attr_names)]))
        inputs = list(values[len(self.attr_names):])
        for position in sorted(self.size_inputs):  # traced from the tensors' sizes (see below)
            inputs.insert(position, self.size_inputs[position])
        for position in self.carried_sizes:
            inputs[position] = inputs[position].shape[0]
        recorder = _get_current_dispatch_mode()
        if isinstance(self.module, fx.GraphModule) and isinstance(recorder, GraphRecorder):
            return UserGraphRunner(self.module, recorder, attrs).run(*inputs)
        with torch.nn.utils.stateless._reparametrize_module(self.module, attrs):
            return self.module(*inputs)


def symbolic_examples(gm: torch.nn.Module, example_inputs: Sequence[Any]) -> list:
    """The example inputs, with each real tensor replaced by its fake with the symbolic sizes
    torch.compile traced it with (dynamo hands the backend real example tensors and keeps
    each one's symbolic context in the TracingContext), where those sizes are symbolic."""
    examples = list(example_inputs)
    context = TracingContext.try_get()
    if context is None or context.fake_mode is None:
        return examples
    placeholders = gm.graph.find_nodes(op="placeholder") if isinstance(gm, fx.GraphModule) else []
    traced = [node.meta.get("example_value") for node in placeholders] if len(placeholders) == len(examples) \
        else [None] * len(examples)
    for i, value in enumerate(examples):
        symbolic_context = context.tensor_to_context.get(value) if isinstance(value, torch.Tensor) else None
        if symbolic_context is None or isinstance(value, FakeTensor):
            continue
        memo = getattr(traced[i], "item_memo", None)
        if traced[i] is not None and not _is_symbolic(traced[i]) and memo is None:
            continue  # static in dynamo's trace: keep the real example (no fake, no new symbols)
        # dynamo's source for the tensor: its symbols are then the ones dynamo's graph uses,
        # also when dynamo traced these tensors before (a fresh source would make new ones)
        fake = context.fake_mode.from_tensor(value, symbolic_context=symbolic_context,
                                             source=getattr(symbolic_context, "tensor_source", None))
        # a Python float dynamo turned into a 0-d tensor input (dynamic=True): the graph reads it
        # with `.item()`, whose value dynamo recorded on its own fake
        if memo is not None:
            fake.item_memo = memo
        if _is_symbolic(fake) or memo is not None:
            examples[i] = fake
    if not any(_is_symbolic(v) for v in examples):
        return list(example_inputs)  # a static graph: the real examples, as before
    return examples


def compile_graph_module(gm: torch.nn.Module, example_inputs: Sequence[Any], options: Options):
    """aot_module_simplified's work: `gm` is usually torch.compile's GraphModule, but any
    nn.Module is accepted, as in PyTorch (a backend may wrap the graph it was handed);
    its parameters and buffers become leading inputs so their grads reach `.grad`."""
    state = {**dict(gm.named_parameters(remove_duplicate=False)),
             **dict(gm.named_buffers(remove_duplicate=False))}
    names = list(state)
    params = list(state.values())
    examples = symbolic_examples(gm, example_inputs)
    if not any(_is_symbolic(v) for v in examples):
        compiled = AotFunction(_ModuleAsFunction(gm, names), options)
        _describe_inputs(compiled, gm, names)
        compiled.disk_key = disk_cache.graph_key(gm, options)
        compiled.precompile(*params, *examples)
        return _runner(compiled, params)
    # Symbolic sizes (torch.compile(dynamic=True), or automatic dynamic after a second size):
    # one graph for every size dynamo's guards admit. A SymInt input whose symbol some tensor
    # input's size has is not a graph input: the graph reads it from that tensor
    # (trace/symbolic.py). One no tensor has (an int argument, an `.item()` from an earlier
    # graph) is passed as the size of a tensor that holds no memory.
    sizes = {i: v for i, v in enumerate(examples) if isinstance(v, (torch.SymInt, int))}
    carried = _uncarried_sizes(examples, sizes)
    for i in carried:  # a size no tensor input has (an int argument): passed as a tensor of that size
        examples[i] = size_carrier(sizes.pop(i), TracingContext.get().fake_mode)
    compiled = AotFunction(_ModuleAsFunction(gm, names, sizes, frozenset(carried)),
                           dataclasses.replace(options, dynamic=True))
    compiled.disk_key = disk_cache.graph_key(gm, compiled.options)  # (not stored: the record says why)
    _describe_inputs(compiled, gm, names, skip=set(sizes))
    compiled.precompile(*params, *[v for i, v in enumerate(examples) if i not in sizes])
    return _runner(compiled, params, skip=set(sizes), carried=carried)


def _describe_inputs(compiled: AotFunction, gm: torch.nn.Module, names: list[str], skip: set[int] = frozenset()) -> None:
    """What `compiled` knows of its inputs (the module's own parameters and buffers `names`,
    then the graph's placeholders less those at `skip`): their names, for the recompiles log
    (dynamo's: L_x_, L_self_modules_fc_parameters_weight_), and which keep their memory from
    call to call (`static_positions`): the module's own, and the inputs dynamo marks static (a
    module's parameters and buffers: `_dynamo_static_input_type`), as PyTorch's AOTAutograd
    reads them."""
    compiled.static_positions = frozenset(range(len(names)))
    if not isinstance(gm, fx.GraphModule):
        return
    inputs = [node for i, node in enumerate(gm.graph.find_nodes(op="placeholder")) if i not in skip]
    compiled.input_names = names + [node.target for node in inputs]
    compiled.static_positions |= {len(names) + k for k, node in enumerate(inputs)
                                  if node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")}


def _uncarried_sizes(examples: list, sizes: dict[int, Any]) -> list[int]:
    """Positions of SymInt inputs whose symbol no tensor input's size, stride or offset has."""
    symbols = set()
    for v in examples:
        if isinstance(v, torch.Tensor):
            for s in (*v.shape, *v.stride(), v.storage_offset()):
                if isinstance(s, torch.SymInt):
                    symbols |= s.node.expr.free_symbols
    return [i for i, v in sizes.items()
            if isinstance(v, torch.SymInt) and not v.node.expr.free_symbols <= symbols]


def _runner(compiled: AotFunction, params: list, skip: set[int] = frozenset(), carried: Sequence[int] = ()):
    """The backend's callable: compiled(*params, *args), leaving out the args at `skip` and
    passing those at `carried` as size carriers."""
    if carried:
        def run(*args):
            args = list(args)
            for i in carried:
                args[i] = size_carrier(args[i])
            return compiled(*params, *[a for i, a in enumerate(args) if i not in skip])
    elif skip:
        def run(*args):
            return compiled(*params, *[a for i, a in enumerate(args) if i not in skip])
    else:
        def run(*args):
            return compiled(*params, *args)
    run.compiled = compiled
    return run
