"""aot_export_joint: the functional joint graph of a function or module, and its signature.

In: a function or nn.Module and example inputs. Out: a flat GraphModule
`gm(*primals, *tangents) -> (*outputs, *mutated_input_values, *grads)` (no tangents
and no grads with trace_joint=False) and a `JointSignature` that names every input
and output. Modules are traced with their parameters and buffers as the first inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from aotgrad import joint as joint_tracing
from aotgrad.functionalize import functionalize
from aotgrad.trace import fake_mode_for, to_fake


@dataclass
class JointSignature:
    input_kinds: list[str]                  # per primal: "parameter", "buffer" or "user_input"
    input_names: list[str]
    user_outputs: list[int]                 # graph output positions of fn's tensor outputs
    mutated_inputs: dict[int, int] = field(default_factory=dict)  # output position -> primal index
    grads: dict[int, int] = field(default_factory=dict)           # output position -> primal index
    num_tangents: int = 0
    out_spec: Any = None

    def __str__(self) -> str:
        lines = ["inputs:"] + [f"  {i}: {k} {n}" for i, (k, n) in enumerate(zip(self.input_kinds, self.input_names))]
        lines.append(f"user outputs at {self.user_outputs}")
        lines += [f"output {o}: new value of input {i}" for o, i in self.mutated_inputs.items()]
        lines += [f"output {o}: grad of input {i}" for o, i in self.grads.items()]
        return "\n".join(lines)


def aot_export_joint(fn_or_module: Callable, args: Sequence[Any], *, trace_joint: bool = True,
                     decompositions: dict | None = None) -> tuple[fx.GraphModule, JointSignature]:
    """Export the functional joint graph.

        gm, sig = aot_export_joint(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
        # gm(weight, bias, x, tangents_1) -> (out, grad_weight, grad_bias)
    """
    kinds, names, state = [], [], []
    fn = fn_or_module
    if isinstance(fn_or_module, torch.nn.Module):
        module = fn_or_module
        for kind, items in (("parameter", module.named_parameters(remove_duplicate=False)),
                            ("buffer", module.named_buffers(remove_duplicate=False))):
            for name, value in items:
                kinds.append(kind), names.append(name), state.append(value)
        n_state = len(state)
        state_names = list(names)

        def fn(*values):
            with torch.nn.utils.stateless._reparametrize_module(module, dict(zip(state_names, values[:n_state]))):
                return module(*values[n_state:])

    flat_args, in_spec = pytree.tree_flatten(list(args))
    kinds += ["user_input"] * len(flat_args)
    names += [f"arg{i}" for i in range(len(flat_args))]
    primals = state + flat_args
    out_spec: list = [None]

    def flat_fn(*values):
        user = pytree.tree_unflatten(list(values[len(state):]), in_spec)
        out = fn(*values[: len(state)], *user) if state else fn(*user)
        leaves, out_spec[0] = pytree.tree_flatten(out)
        return leaves

    fake_mode = fake_mode_for(primals)
    fakes = [to_fake(fake_mode, p) for p in primals]
    traced = joint_tracing.trace_joint(flat_fn, fakes, fake_mode=fake_mode,
                         trace_backward=trace_joint and any(f.requires_grad for f in fakes),
                         decompositions=decompositions, outputs_as_returned=True)
    gm, _ = functionalize(traced.gm)
    n_user = len(traced.analysis.forward_outputs)
    mutated = traced.analysis.mutated_inputs
    signature = JointSignature(kinds, names, list(range(n_user)),
                               {n_user + k: info.index for k, info in enumerate(mutated)},
                               {traced.num_forward_outputs + k: i for k, i in enumerate(traced.grad_inputs)},
                               len(traced.tangent_sources), out_spec[0])
    gm.meta["signature"] = signature
    return gm, signature
