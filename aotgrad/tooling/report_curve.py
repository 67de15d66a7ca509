"""The report's memory-vs-recompute curve of one compile: how much the forward could save for
the backward against how much the backward would then compute again.

In: a `phases.CompileRecord` with its joint graph. Out: a `Curve` (the min-cut partitions'
lower hull, the partitions at each memory budget, and this compile's own partition, all in
partition/cost.py's units) and `plot_curve`, a PNG with units on both axes. Saved bytes are
device bytes; recompute cost is cost.py's: bytes a memory-bound op moves, and a
compute-bound op's FLOPs divided by cost.FLOPS_PER_BYTE (the bytes that take as long to move).
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import torch.fx as fx

from aotgrad.observe import phases

# The memory budgets whose min-cut partitions the curve marks (0.0: the fewest bytes).
CURVE_BUDGETS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
# Joint graphs larger than this get no curve (each budget solves a few min-cut problems).
CURVE_MAX_NODES = 20_000

# The one sentence under each curve.
HOW_TO_READ = (
    "Each point is one way to split this graph into forward and backward: further left saves less memory "
    "for the backward and recomputes more; the star is the split this compile used. To move along the "
    "curve, set aotgrad.config.activation_memory_budget to a budget labelled on it (0.5 saves at most "
    "half the bytes saved when nothing is recomputed).")


@dataclass
class Curve:
    """Saved bytes against recompute cost (partition/cost.py's model) for one joint graph."""
    hull: list[tuple[int, int]]                          # the lambda sweep's lower hull
    budgets: list[tuple[float, int, int, int]]           # (budget, bytes, recompute, backward peak)
    chosen: tuple[int, int, int] | None                  # this compile's partition, the same three


def tradeoff_curve(record: phases.CompileRecord) -> Curve | None:
    """The joint graph's min-cut trade-off: the hull of (saved bytes, recompute cost), the
    partitions at CURVE_BUDGETS, and where this compile's own partition lies. Reads the
    joint graph only (split_joint and the cut problem build their own structures)."""
    from aotgrad.partition import min_cut
    from aotgrad.partition.graphs import split_joint

    if record.joint is None or record.forward is None:
        return None
    problem = min_cut.cut_problem(split_joint(record.joint, record.num_forward_outputs))
    if not problem.needed:
        return None
    hull = min_cut.hull_cuts(problem)  # most bytes first
    budgets = []
    for budget in CURVE_BUDGETS:
        try:
            cut = min_cut.choose_cut(problem, budget, None) if budget > 0 else hull[-1]
        except min_cut.MemoryBudgetError:  # no partition saves that little
            continue
        budgets.append((budget, cut.bytes, cut.recompute, problem.schedule(cut.saved).peak))
    saved = _saved_in_joint(record.joint, record.forward)
    chosen = None
    if saved is not None:
        cut = min_cut.score_saved(problem, saved)
        chosen = (cut.bytes, cut.recompute, problem.schedule(cut.saved).peak)
    return Curve([(c.bytes, c.recompute) for c in hull], budgets, chosen)


def _saved_in_joint(joint: fx.GraphModule, forward: fx.GraphModule) -> list[fx.Node] | None:
    """The joint's nodes for the forward's saved outputs (matched by name), or None when
    some have no counterpart (a copy the runtime added)."""
    num_saved = forward.meta.get("num_saved", 0)
    outputs = forward.graph.output_node().args[0]
    by_name = {n.name: n for n in joint.graph.nodes}
    saved = [o for o in outputs[len(outputs) - num_saved:] if isinstance(o, fx.Node)]
    if any(o.name not in by_name for o in saved):
        return None
    return [by_name[o.name] for o in saved]


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit that shows `largest` bytes as a number from 1 to 1024: ("KiB", 1024)."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if largest >= scale:
            return unit, scale
    return "bytes", 1


def axis_labels(curve: Curve) -> tuple[str, str, int, int]:
    """(x label, y label, x scale, y scale): each axis in the unit that suits its largest value."""
    from aotgrad.partition.cost import FLOPS_PER_BYTE

    points = curve.hull + [(b, r) for _, b, r, _ in curve.budgets] + ([curve.chosen[:2]] if curve.chosen else [])
    x_unit, x_scale = byte_unit(max((b for b, _ in points), default=0))
    y_unit, y_scale = byte_unit(max((r for _, r in points), default=0))
    return (f"saved for backward ({x_unit})",
            f"recompute cost ({y_unit} moved;\nFLOPs count as FLOPs / {FLOPS_PER_BYTE})", x_scale, y_scale)


def plot_curve(curve: Curve, title: str) -> bytes:
    """The curve as a PNG (matplotlib's Agg canvas; pyplot and its global state untouched)."""
    buffer = io.BytesIO()
    curve_figure(curve, title).savefig(buffer, format="png")
    return buffer.getvalue()


def curve_figure(curve: Curve, title: str):
    """The curve as a matplotlib Figure: the hull, a square per budget (labelled), a star for this compile."""
    from matplotlib.figure import Figure

    x_label, y_label, x_scale, y_scale = axis_labels(curve)
    fig = Figure(figsize=(6.4, 3.8), dpi=100)
    ax = fig.add_subplot()
    hull = sorted(curve.hull)
    ax.plot([b / x_scale for b, _ in hull], [c / y_scale for _, c in hull], "-o", color="#4c72b0", markersize=4,
            label="min-cut hull (price sweep)")
    labels: dict[tuple[int, int], list[str]] = {}  # budgets that got the same partition share a label
    for budget, nbytes, recompute, _ in curve.budgets:
        labels.setdefault((nbytes, recompute), []).append(f"{budget:g}")
    if labels:
        ax.scatter([b / x_scale for b, _ in labels], [c / y_scale for _, c in labels], marker="s", s=30,
                   color="#55a868", zorder=3, label="activation_memory_budget")
        for (nbytes, recompute), names in labels.items():
            ax.annotate(", ".join(names), (nbytes / x_scale, recompute / y_scale), textcoords="offset points",
                        xytext=(5, 5), fontsize=7)
    if curve.chosen is not None:
        ax.scatter([curve.chosen[0] / x_scale], [curve.chosen[1] / y_scale], marker="*", s=220, color="#c44e52",
                   zorder=4, label="this compile's partition")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label, fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
