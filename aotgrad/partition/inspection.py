"""What a partition keeps for the backward and what it runs twice, for people.

In: the forward and backward graphs a partitioner made. Out: a `PartitionReport`, whose
`str()` is a table:

    saved for backward: 3 values, 8.0 KiB (1 view, free)
      name       shape     dtype  bytes  made by           at
      primals_1  [32, 64]  f32    0      input
      t          [64, 32]  f32    0      aten.t.default    model.py:12  x @ w
      cos        [32, 64]  f32    8,192  aten.cos.default  model.py:11  x.sin().cos()
    recomputed in backward: 1 op
      sin        [32, 64]  aten.sin.default  model.py:11  x.sin()

Inputs cost nothing (the caller keeps them alive anyway), nor does a saved value that
views an input or another saved value.
"Recomputed" are the backward's nodes traced in the forward (a forward op run again);
nodes of the backward proper are not listed. `api.compile_flat` logs the report at debug
level on each compile (`aotgrad.config.log_level = "debug"`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.fx as fx

from aotgrad.observe.printing import annotation, source_line
from aotgrad.partition.graphs import tensor_bytes


@dataclass(frozen=True)
class SavedValue:
    name: str
    shape: tuple
    dtype: torch.dtype | None
    bytes: int          # 0 for a view of another saved value or of an input
    made_by: str        # the forward op, or "input"
    source: str         # 'file.py:12  code', or ''


@dataclass(frozen=True)
class RecomputedOp:
    name: str
    op: str
    shape: tuple
    source: str


@dataclass
class PartitionReport:
    saved: list[SavedValue] = field(default_factory=list)
    recomputed: list[RecomputedOp] = field(default_factory=list)

    @property
    def saved_bytes(self) -> int:
        return sum(s.bytes for s in self.saved)

    def __str__(self) -> str:
        views = sum(1 for s in self.saved if s.bytes == 0 and s.made_by != "input")
        lines = [f"saved for backward: {_count(len(self.saved), 'value')}, {_size(self.saved_bytes)}"
                 + (f" ({_count(views, 'view')}, free)" if views else "")]
        rows = [(s.name, _shape(s.shape), _dtype(s.dtype), f"{s.bytes:,}", s.made_by, s.source) for s in self.saved]
        lines += _table(("name", "shape", "dtype", "bytes", "made by", "at"), rows)
        lines.append(f"recomputed in backward: {_count(len(self.recomputed), 'op')}")
        lines += _table(("name", "shape", "op", "at"),
                        [(r.name, _shape(r.shape), r.op, r.source) for r in self.recomputed], header=False)
        return "\n".join(lines)


def report(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule) -> PartitionReport:
    """The saved values (from the forward's trailing outputs) and the recomputed ops of a
    partition made by `default_partition` or `min_cut_rematerialization_partition`."""
    num_saved = fw_gm.meta.get("num_saved", 0)
    outputs = next(n for n in fw_gm.graph.nodes if n.op == "output").args[0]
    saved_nodes = [o for o in outputs[len(outputs) - num_saved:] if isinstance(o, fx.Node)]
    saved = []
    counted: set = set()  # storages already paid for: inputs and earlier saved values
    for node in fw_gm.graph.nodes:
        if node.op == "placeholder":
            counted.add(_storage_of(node))
    for node in saved_nodes:
        val = node.meta.get("val")
        storage = _storage_of(node)
        cost = 0 if storage in counted else tensor_bytes(val)
        counted.add(storage)
        made_by = "input" if node.op == "placeholder" else _op_name(node)
        saved.append(SavedValue(node.name, _shape_of(val), getattr(val, "dtype", None), cost, made_by,
                                source_line(node)))
    recomputed = [RecomputedOp(n.name, _op_name(n), _shape_of(n.meta.get("val")), source_line(n))
                  for n in bw_gm.graph.nodes if n.op == "call_function" and not n.meta.get("is_backward")]
    return PartitionReport(saved, recomputed)


def _storage_of(node: fx.Node) -> fx.Node:
    """The node whose memory `node`'s value lives in: walk back through view ops."""
    while node.op == "call_function" and getattr(node.target, "is_view", False) and node.args \
            and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def _op_name(node: fx.Node) -> str:
    return str(node.target) if hasattr(node.target, "_schema") else getattr(node.target, "__name__", str(node.target))


def _shape_of(val) -> tuple:
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _dtype(dtype) -> str:
    return annotation(torch.empty(0, dtype=dtype)).split("[")[0] if dtype is not None else "-"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _table(headers: tuple, rows: list[tuple], header: bool = True) -> list[str]:
    if not rows:
        return []
    all_rows = ([headers] if header else []) + rows
    widths = [max(len(str(r[i])) for r in all_rows) for i in range(len(headers))]
    return ["  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in all_rows]
