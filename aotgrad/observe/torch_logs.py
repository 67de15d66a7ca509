"""aotgrad's graphs in PyTorch's own logs: the TORCH_LOGS artifacts and the TORCH_TRACE trace.

    TORCH_LOGS=aot_graphs python train.py        # forward and backward (or inference) graphs
    TORCH_LOGS=aot_joint_graph python train.py   # the joint graph, before the partitioner splits it
    TORCH_TRACE=/tmp/trace python train.py       # then: tlparse /tmp/trace/*.log

PyTorch's AOTAutograd logs its graphs under the artifacts `aot_graphs` and `aot_joint_graph`
and traces them (torch._logging.trace_structured) as `aot_joint_graph`, `aot_forward_graph`,
`aot_backward_graph` and `aot_inference_graph`. aotgrad logs its own graphs under the same
names, printed by printing.py (each node with its source line), so TORCH_LOGS,
torch._logging.set_logs and tlparse show them as they do for backend="aot_eager". A graph
is printed only when a log or the trace will show it. Nothing is registered with PyTorch's
logging at import (that would change PyTorch): the loggers are made at the first compile.
"""
from __future__ import annotations

import functools
import logging
from typing import Callable

import torch
import torch.fx as fx

from aotgrad.observe.printing import format_graph

# what aotgrad makes -> (TORCH_LOGS artifact, title, TORCH_TRACE name): PyTorch's names
GRAPHS = {
    "joint": ("aot_joint_graph", "Joint graph", "aot_joint_graph"),
    "forward": ("aot_graphs", "Forward graph", "aot_forward_graph"),
    "backward": ("aot_graphs", "Backward graph", "aot_backward_graph"),
    "inference": ("aot_graphs", "Inference graph", "aot_inference_graph"),
}


@functools.cache
def artifact_log(artifact: str) -> logging.Logger:
    """PyTorch's logger of the (registered) artifact `artifact` for aotgrad, made at first use.

    Its parent is a logger of PyTorch's `aot` log (TORCH_LOGS=aot; `torch` if that is gone):
    PyTorch's handlers sit on the loggers its log names, so a logger outside `torch.` would
    reach none of them and TORCH_LOGS=aot_graphs would print nothing; and `aot` then shows
    aotgrad's graphs as it shows AOTAutograd's. (The name shows nowhere: the lines name the
    file that logged them, aotgrad/observe/torch_logs.py.)"""
    from torch._logging._internal import log_registry

    parents = log_registry.log_alias_to_log_qnames.get("aot") or ["torch"]
    return torch._logging.getArtifactLogger(f"{parents[0]}.aotgrad", artifact)


def log_graph(kind: str, gm: fx.GraphModule, origin, *, variant: str = "") -> None:
    """Log `gm`, aotgrad's `kind` graph ("joint", "forward", "backward", "inference") of the
    compile `origin` (phases.Origin), to the TORCH_LOGS artifact and the TORCH_TRACE trace.
    `variant` ("without tangents_1"): a backward compiled later for calls where some outputs
    get no gradient, traced as an artifact of its own (PyTorch has no name for it).

        TRACED GRAPH
         ===== aotgrad: Forward graph of step at /x/train.py:3 (torch.compile frame 0/0) =====
        def forward(self, primals_1: "f32[4, 3]", primals_2: "f32[3, 2]"):
            mm: "f32[4, 2]" = aten.mm.default(primals_1, primals_2)  # train.py:4  y = (x @ w).relu()
    """
    artifact, title, trace_name = GRAPHS[kind]
    title = f"{title} {variant}" if variant else title
    log = artifact_log(artifact)
    if log.isEnabledFor(logging.INFO):
        log.info("TRACED GRAPH\n ===== aotgrad: %s of %s =====\n%s\n", title, origin, format_graph(gm, kind))
    if variant:
        name = f"{trace_name}_{variant.replace(' ', '_').replace(',', '')}"
        torch._logging.trace_structured(
            "artifact", metadata_fn=lambda: {"name": name, "encoding": "string"},
            payload_fn=lambda: format_graph(gm, kind), compile_id=origin.compile_id)
    else:
        # (trace_structured calls payload_fn only when the trace is on: TORCH_TRACE)
        torch._logging.trace_structured(trace_name, payload_fn=lambda: format_graph(gm, kind),
                                        compile_id=origin.compile_id)


def log_recompile(origin, changes: Callable[[], list[str]]) -> None:
    """Say under TORCH_LOGS=recompiles that aotgrad compiles `origin` (phases.Origin) again for
    inputs none of its entries fits, and why (`changes()`, called only when shown), as Dynamo
    says why it recompiles a frame. Under torch.compile Dynamo's guards catch most changes
    first; what they leave to aotgrad (an input's storage offset) shows here.

        Recompiling step at /x/train.py:3 (torch.compile frame 0/0) in aotgrad, for inputs its
        compiled entries do not fit:
            - input 1 (L_x_): storage offset 1, now 0
    """
    log = artifact_log("recompiles")
    if log.isEnabledFor(logging.DEBUG):  # (Dynamo logs recompiles at debug level too)
        log.debug("Recompiling %s in aotgrad, for inputs its compiled entries do not fit:\n%s", origin,
                  "\n".join(f"    - {change}" for change in changes()))
