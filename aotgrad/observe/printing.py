"""One printer for logs, errors and golden tests: FX-like Python with shape annotations.

    def forward(self, primals_1: "f32[4, 3]", primals_2: "f32[3]"):
        mul: "f32[4, 3]" = aten.mul.Tensor(primals_1, primals_2)  # demo.py:3  (x * w).sin()
        ...
In a backward graph each line also names the forward op it differentiates
(`<- aten.mul.Tensor`). Names are deterministic; no addresses.
"""
from __future__ import annotations

import re

import torch
import torch.fx as fx

_DTYPE_ABBREVIATIONS = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}


def annotation(val) -> str:
    if isinstance(val, torch.Tensor):
        return f"{_DTYPE_ABBREVIATIONS.get(val.dtype, str(val.dtype))}{list(val.shape)}"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(annotation(v) for v in val) + ")"
    return type(val).__name__ if val is not None else "None"


def _arg(a) -> str:
    if isinstance(a, fx.Node):
        return a.name
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    return repr(a)


def _target(node: fx.Node) -> str:
    target = node.target
    if node.op == "get_attr":
        return f"self.{target}"
    text = str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))
    return re.sub(r"^aten::", "aten.", text)


def source_line(node: fx.Node) -> str:
    """'file.py:12  code' from the innermost frame of node.meta["stack_trace"], or ''."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    if not frames:
        return ""
    path, line, code = frames[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}  {code.strip()}"


def format_graph(gm: fx.GraphModule | fx.Graph, name: str = "forward", *, sources: bool = True) -> str:
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    params = ", ".join(f'{p.name}: "{annotation(p.meta.get("val"))}"' for p in placeholders)
    lines = [f"def {name}(self, {params}):" if params else f"def {name}(self):"]
    for node in graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            lines.append(f"    return {_arg(node.args[0])}")
            continue
        args = [_arg(a) for a in node.args] + [f"{k}={_arg(v)}" for k, v in node.kwargs.items()]
        text = f'    {node.name}: "{annotation(node.meta.get("val"))}" = {_target(node)}({", ".join(args)})'
        notes = []
        if sources and source_line(node):
            notes.append(source_line(node))
        if node.meta.get("forward_op"):
            notes.append(f"<- {node.meta['forward_op']}")
        elif node.meta.get("autograd_node"):  # compiled autograd: the node of the backward it runs
            notes.append(node.meta["autograd_node"])
        lines.append(text + (f"  # {'  '.join(notes)}" if notes else ""))
    return "\n".join(lines)
