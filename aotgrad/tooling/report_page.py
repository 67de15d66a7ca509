"""The page of `python -m aotgrad report`: a run's record (report.py's `Run`) as one
self-contained HTML file.

In: a `Run`. Out: the page's text (`render`): inline CSS, PNGs as data URIs, no scripts; a
summary, the graph breaks, then per graph its phase timings, saved-for-backward table,
memory-vs-recompute curve (report_curve.py) and forward and backward graphs, then the
captures, the recompile reasons and the timings, worded by report_words.py.
"""
from __future__ import annotations

import base64
import html
from typing import TYPE_CHECKING

import torch.fx as fx

from aotgrad.observe.printing import format_graph
from aotgrad.tooling import report_words
from aotgrad.tooling.report_curve import CURVE_MAX_NODES, HOW_TO_READ, axis_labels, plot_curve, tradeoff_curve

if TYPE_CHECKING:
    from aotgrad.observe import phases
    from aotgrad.tooling.report import Graph, Run

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1150px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; overflow-wrap: anywhere; }
h2 { border-bottom: 2px solid #4c72b0; padding-bottom: .2em; margin-top: 1.8em; }
h3 { margin-bottom: .3em; } article { border: 1px solid #ddd; border-radius: 6px; padding: .2em 1em 1em;
  margin: 1em 0; }
table { border-collapse: collapse; font-size: 13px; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; vertical-align: top; overflow-wrap: break-word; }
th { background: #f0f3f8; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.saved td:is(:nth-child(1), :nth-child(3), :nth-child(4), :nth-child(5)),
  table.recomputed td:nth-child(-n+3) { white-space: nowrap; }
table.saved td:last-child, table.recomputed td:last-child { overflow-wrap: anywhere; min-width: 12em; }
nav ul { margin: .3em 0; } nav li { font-size: 14px; }
pre { background: #f6f8fa; border: 1px solid #e4e7eb; padding: .6em; font-size: 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; }
pre.fx .line { display: block; padding-left: 6ch; text-indent: -6ch; }
pre.traceback, .failed { background: #fdecec; border-color: #e8b4b4; }
summary { cursor: pointer; font-weight: 600; margin: .4em 0; }
img.curve { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 13px; }
.frame { color: #444; font-size: 13px; margin: 0 0 .6em; overflow-wrap: anywhere; }
code { background: #f6f8fa; padding: 0 .2em; }
"""


def render(run: Run) -> str:
    """The whole page, every text escaped."""
    sections = [_summary(run)]
    if run.traceback:
        sections.append(f'<section id="error"><h2>The script failed</h2>'
                        f'<pre class="traceback">{_e(run.traceback)}</pre></section>')
    sections += [_graph_breaks(run), _graphs(run), _captures(run), _recompiles(run), _timings(run)]
    title = f"aotgrad report: {' '.join(run.command)}"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<style>{_CSS}</style></head>\n<body>\n<h1>{_e(title)}</h1>\n' + "\n".join(sections)
            + "\n</body></html>\n")


def _summary(run: Run) -> str:
    status = "ok" if run.exit_status == 0 else f"failed (exit status {run.exit_status})"
    compile_seconds = sum(g.record.total for g in run.graphs)
    rows = [("command", " ".join(run.command)), ("exit", status), ("wall time", _seconds(run.wall_seconds)),
            ("graphs compiled ahead of time", len(run.graphs)),
            ("graph breaks", sum(b.count for b in run.graph_breaks)),
            ("aotgrad compile time (all graphs)", _seconds(compile_seconds)),
            ("Dynamo frame compiles", len(run.frames)),
            ("Dynamo compile time (includes aotgrad's)", _seconds(sum(f.seconds for f in run.frames))),
            ("compiled-autograd captures", len(run.captures)),
            ("recompiles", sum(1 for f in run.frames if f.recompile_reason) + _capture_misses(run)),
            ("backends (--backend)", run.backend)]
    for (asked, given, dropped), calls in run.substitutions.items():
        note = f"; dropped {', '.join(dropped)}" if dropped else ""
        rows.append(("substituted", f"torch.compile(backend={asked!r}) ran as {given!r} ({calls} calls{note})"))
    return (f'<section id="summary"><h2>Summary</h2>{_table(("", ""), rows, "summary", header=False)}'
            f'{_contents(run)}</section>')


def _contents(run: Run) -> str:
    """Links to the parts of the page (fragment links only: the page stays self-contained)."""
    graphs = "".join(f'<li><a href="#graph-{i}">Graph {i + 1}: {_e(graph_name(g))}</a>'
                     + (f" (frame {_e(g.compile_id)})" if g.compile_id else "") + "</li>"
                     for i, g in enumerate(run.graphs))
    items = [f'<a href="#graph-breaks">Graph breaks ({sum(b.count for b in run.graph_breaks)})</a>',
             f'<a href="#graphs">Compiled graphs ({len(run.graphs)})</a><ul>{graphs}</ul>',
             f'<a href="#compiled-autograd">Compiled-autograd captures ({len(run.captures)})</a>',
             '<a href="#recompiles">Recompile reasons</a>', '<a href="#timings">Timings</a>']
    return '<nav id="contents"><ul>' + "".join(f"<li>{item}</li>" for item in items) + "</ul></nav>"


def _capture_misses(run: Run) -> int:
    return max(len(run.captures) - 1, 0) if run.captures else 0


def _graph_breaks(run: Run) -> str:
    """Each place Dynamo broke the graph: where, the line, why (Dynamo's words), how often."""
    parts = ['<section id="graph-breaks"><h2>Graph breaks</h2>']
    if not run.graph_breaks:
        parts.append('<p class="note">No graph breaks: Dynamo compiled every frame it traced whole.</p>')
    else:
        parts.append('<p class="note">At each break Dynamo ends the graph, runs that line in Python and starts '
                     'a new graph after it (a frame it cannot resume runs in Python whole). A count is how often '
                     'Dynamo met the break while tracing (again after each restart or recompile), not how often '
                     'it ran.</p>')
    for b in run.graph_breaks:
        where = f"{b.where}, in {b.function}" if b.function else b.where
        times = f" ({b.count} times)" if b.count > 1 else ""
        code = f'<pre class="code">{_e(b.code)}</pre>' if b.code else ""
        explanation = f"<p>{_e(b.explanation)}</p>" if b.explanation else ""
        parts.append(f'<article class="graph-break"><h3>{_e(b.kind)}{_e(times)}</h3>'
                     f'<p class="where">at {_e(where)}</p>{code}{explanation}'
                     f'<details><summary>Dynamo\'s full reason</summary><pre class="reason">{_e(b.reason)}</pre>'
                     '</details></article>')
    return "\n".join(parts) + "</section>"


def _graphs(run: Run) -> str:
    parts = ['<section id="graphs"><h2>Compiled graphs</h2>']
    if not run.graphs:
        parts.append('<p class="note">No graph was compiled ahead of time.</p>')
    parts += [_graph(i, graph, len(run.graphs)) for i, graph in enumerate(run.graphs)]
    return "\n".join(parts) + "</section>"


def _disk_cache_text(disk_cache: str) -> str:
    """The record's `disk_cache` for people: "disk cache: stored", or why the graphs were not."""
    if disk_cache.startswith("not stored: "):
        return "not stored in the disk cache: " + disk_cache.removeprefix("not stored: ")
    return f"disk cache: {disk_cache}"


def graph_name(graph: Graph) -> str:
    """'GPT.forward (model.py:40)': the frame the graph came from (the compiled function outside torch.compile)."""
    origin = graph.record.origin
    if origin is not None and origin.location:
        return report_words.graph_title(origin.name, origin.location)
    if graph.frame is not None:
        return report_words.graph_title(graph.frame.name, graph.frame.where)
    return report_words.frame_name(origin.name if origin is not None else graph.record.fn_name)


def _graph(i: int, graph: Graph, count: int) -> str:
    record = graph.record
    parts = [f'<article class="graph" id="graph-{i}"><h3>Graph {i + 1} of {count}: {_e(graph_name(graph))}</h3>']
    parts.append(f'<p class="frame">{_e(_graph_details(graph))}</p>')
    if graph.frame is not None and graph.frame.recompile_reason:
        parts.append(f'<p class="why-recompiled">recompiled because: {_e(graph.frame.recompile_reason)}</p>')
    phase_rows = [(name, _seconds(s)) for name, s in record.phases.items()] + [("total", _seconds(record.total))]
    parts.append(_table(("phase", "time"), phase_rows, "phases"))
    parts.append(f'<p class="note">{_e(_disk_cache_text(record.disk_cache))}</p>')
    if record.forward is not None and record.backward is not None:
        parts.append(_saved_table(record))
        parts.append(_curve_figure(i, record, graph_name(graph)))
    if record.forward is not None:
        name = "forward" if record.backward is not None else "inference"
        parts.append(_graph_text(name, record.forward))
    if record.backward is not None:
        parts.append(_graph_text("backward", record.backward))
    return "\n".join(parts) + "</article>"


def _graph_details(graph: Graph) -> str:
    """The line under a graph's name: its compile id, its modules, where its code is."""
    origin = graph.record.origin
    details = []
    compile_id = origin.compile_id if origin is not None and origin.compile_id is not None else graph.compile_id
    if compile_id is not None:
        details.append(f"torch.compile frame {compile_id}")
    modules = report_words.modules_of(graph.record.forward) if graph.record.forward is not None else []
    if modules:
        details.append("modules: " + ", ".join(modules))
    if origin is not None and origin.location:
        details.append(origin.location)
    return " · ".join(details)


def _graph_text(name: str, gm: fx.GraphModule) -> str:
    nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    return (f'<details class="{name}"><summary>{name} graph ({nodes} ops)</summary>'
            f'<pre class="fx {name}">{_lines(format_graph(gm, name))}</pre></details>')


def _lines(text: str) -> str:
    """Each line of a printed graph in its own span: a long line wraps under itself, indented."""
    return "".join(f'<span class="line">{_e(line)}\n</span>' for line in text.split("\n"))


def _saved_table(record: phases.CompileRecord) -> str:
    from aotgrad.partition.inspection import report

    partition = report(record.forward, record.backward)
    nodes = {n.name: n for n in record.forward.graph.nodes}
    saved = [(s.name, report_words.saved_value(nodes[s.name], record.input_names), _shape(s.shape),
              _dtype(s.dtype), f"{s.bytes:,}", s.source) for s in partition.saved]
    backward_nodes = {n.name: n for n in record.backward.graph.nodes}
    recomputed = [(r.name, _shape(r.shape), r.op, report_words.innermost_module(backward_nodes[r.name]), r.source)
                  for r in partition.recomputed]
    text = (f"<h4>Saved for backward: {len(saved)} values, {partition.saved_bytes:,} bytes</h4>"
            + _table(("name", "what", "shape", "dtype", "bytes", "at"), saved, "saved"))
    text += f"<h4>Recomputed in backward: {len(recomputed)} ops</h4>"
    if recomputed:
        text += _table(("name", "shape", "op", "module", "at"), recomputed, "recomputed")
    return text


def _curve_figure(i: int, record: phases.CompileRecord, title: str) -> str:
    if record.joint is None:
        return '<p class="note">No memory-vs-recompute curve: no joint graph (loaded from the disk cache).</p>'
    if len(record.joint.graph.nodes) > CURVE_MAX_NODES:
        return f'<p class="note">No memory-vs-recompute curve: the joint graph has over {CURVE_MAX_NODES} nodes.</p>'
    try:
        curve = tradeoff_curve(record)
        if curve is None:
            return '<p class="note">No memory-vs-recompute curve: the backward reads nothing from the forward.</p>'
        png = plot_curve(curve, f"graph {i + 1}: {title}")
    except ImportError as e:
        return f'<p class="note">No memory-vs-recompute curve: {_e(e)} (pip install matplotlib).</p>'
    except Exception as e:  # noqa: BLE001 - a curve that cannot be drawn must not lose the page
        return f'<p class="note failed">No memory-vs-recompute curve: {_e(type(e).__name__)}: {_e(e)}</p>'
    rows = [(f"{b:g}", f"{nbytes:,}", f"{recompute:,}", f"{peak:,}") for b, nbytes, recompute, peak in curve.budgets]
    if curve.chosen is not None:
        rows.append(("this compile", *(f"{v:,}" for v in curve.chosen)))
    x_label, y_label = (label.replace("\n", " ") for label in axis_labels(curve)[:2])
    source = base64.b64encode(png).decode("ascii")
    return (f'<figure class="curve" id="curve-{i}"><img class="curve" alt="memory vs recompute, graph {i + 1}: '
            f'{_e(x_label)} against {_e(y_label)}" src="data:image/png;base64,{source}">'
            f'<figcaption class="how-to-read">{_e(HOW_TO_READ)}</figcaption></figure>'
            + _table(("activation_memory_budget", "saved bytes", "recompute cost (bytes moved)",
                      "backward peak bytes"), rows, "budgets"))


def _captures(run: Run) -> str:
    parts = ['<section id="compiled-autograd"><h2>Compiled-autograd captures</h2>',
             f'<p class="cache-miss-means">{_e(report_words.CACHE_MISS_MEANS)}</p>']
    if run.compiled_autograd and any(run.compiled_autograd.values()):
        parts.append(f'<p class="note">counters: {_e(", ".join(f"{k} {v}" for k, v in run.compiled_autograd.items()))}'
                     '</p>')
    if not run.captures:
        parts.append('<p class="note">No backward was captured by aotgrad.compiled_autograd.</p>')
    for i, capture in enumerate(run.captures):
        reasons = "".join(f'<li class="reason">{_e(report_words.miss_in_words(r))}<br><span class="note">'
                          f'({_e(r)})</span></li>' for r in capture.reasons)
        parts.append(f'<article class="capture" id="capture-{i}"><h3>Capture {i} ({capture.nodes} ops)</h3>'
                     f'<p>cache miss because:</p><ul class="reasons">{reasons}</ul>'
                     f'<details><summary>captured graph</summary><pre class="fx capture">{_lines(capture.text)}'
                     '</pre></details></article>')
    return "\n".join(parts) + "</section>"


def _recompiles(run: Run) -> str:
    items = [f'<li class="recompile-reason">Dynamo recompiled {_e(f.name)} ({_e(f.where)}, compile '
             f'{_e(f.compile_id)}): {_e(f.recompile_reason)}</li>' for f in run.frames if f.recompile_reason]
    items += [f'<li class="recompile-reason">compiled autograd captured again (capture {i}):<ul>'
              + "".join(f"<li>{_e(report_words.miss_in_words(r))} ({_e(r)})</li>" for r in c.reasons) + "</ul></li>"
              for i, c in enumerate(run.captures) if i > 0]
    body = f'<ul>{"".join(items)}</ul>' if items else '<p class="note">No recompiles.</p>'
    return f'<section id="recompiles"><h2>Recompile reasons</h2>{body}</section>'


def _timings(run: Run) -> str:
    names = list(dict.fromkeys(name for g in run.graphs for name in g.record.phases))
    rows = [(f"graph {i + 1}", *(_seconds(g.record.phases[n]) if n in g.record.phases else "" for n in names),
             _seconds(g.record.total)) for i, g in enumerate(run.graphs)]
    graphs = _table(("graph", *names, "total"), rows, "graph-timings") if rows else ""
    frames = [(f.compile_id, report_words.frame_name(f.name), f.where, _seconds(f.seconds), f.failure or "")
              for f in run.frames]
    frame_table = _table(("compile", "frame", "at", "compile time", "failure"), frames, "frame-timings") \
        if frames else '<p class="note">No Dynamo frame was compiled.</p>'
    return (f'<section id="timings"><h2>Timings</h2><p>script wall time {_seconds(run.wall_seconds)}</p>'
            f'<h3>aotgrad, per graph and phase</h3>{graphs}<h3>Dynamo frame compiles</h3>{frame_table}</section>')


def _table(headers: tuple, rows: list[tuple], cls: str, header: bool = True) -> str:
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}">{head}{body}</table>'


def _cell(value) -> str:
    text = str(value)
    numeric = text.replace(",", "").replace(" ms", "").replace(" s", "").replace(".", "", 1).isdigit()
    return f'<td class="num">{_e(text)}</td>' if numeric else f"<td>{_e(text)}</td>"


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _seconds(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _dtype(dtype) -> str:
    return "size" if dtype is None else str(dtype).replace("torch.", "")  # (None: a SymInt the backward reads)


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"
