"""`python -m aotgrad report SCRIPT.py [args]`: one HTML page of everything a script compiled.

In: a script (or `-m module`) and its arguments. It runs as `__main__` with aotgrad's
backends in place of the ones it asks torch.compile for (`substitute`), while three
watchers listen: `phases.watch()` (every ahead-of-time compile's `CompileRecord`), the
compiled-autograd capture watchers (each captured backward and why the cache missed),
Dynamo's `graph_breaks` log (every graph break, with its reason and line) and Dynamo's
compilation metrics (each frame compiled, and why it recompiled).
Out: one self-contained HTML file (inline CSS, PNGs as data URIs, no scripts): a summary,
the graph breaks, then per graph (named after its frame and modules) its phase timings,
saved-for-backward table (parameters by name, other values by the op and module that made
them), memory-vs-recompute curve (report_curve.py) and forward and backward graphs, then the
captures, the recompile reasons and the timings; report_words.py words them. A script that
raises still gets its page, with the traceback, and the command exits non-zero.
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import html
import logging
import os
import runpy
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.fx as fx

from aotgrad import phases, report_words
from aotgrad.printing import format_graph
from aotgrad.report_curve import CURVE_MAX_NODES, HOW_TO_READ, axis_labels, plot_curve, tradeoff_curve
from aotgrad.report_words import GraphBreak

# --backend auto: what each torch.compile backend name runs as (other names are kept).
AUTO_BACKENDS = {"inductor": "aotgrad_inductor", "aot_eager": "aotgrad"}
BACKEND_CHOICES = ("auto", "aotgrad", "aotgrad_inductor", "keep")
# The modules whose Dynamo logs graph breaks to its `graph_breaks` artifact log (torch 2.11 to 2.14).
GRAPH_BREAK_LOGGERS = ("torch._dynamo.symbolic_convert", "torch._dynamo.convert_frame", "torch._dynamo.exc")


# -- what a run collects ----------------------------------------------------------------

@dataclass
class Frame:
    """One Dynamo frame compile (torch._dynamo.utils.get_compilation_metrics())."""
    compile_id: str
    name: str
    where: str                  # file:line of the compiled function
    seconds: float
    recompile_reason: str | None
    failure: str | None


@dataclass
class Graph:
    """One ahead-of-time compile, and the Dynamo frame compile it was part of."""
    record: phases.CompileRecord
    compile_id: str | None
    frame: Frame | None = None


@dataclass
class Capture:
    """One compiled-autograd capture: the graph as captured, and why the cache missed."""
    text: str
    reasons: list[str]
    nodes: int


@dataclass
class Run:
    command: list[str]                 # what ran: ["script.py", *args] or ["-m", "module", *args]
    backend: str
    graphs: list[Graph] = field(default_factory=list)
    captures: list[Capture] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    substitutions: Counter = field(default_factory=Counter)   # (asked, given, dropped options) -> calls
    graph_breaks: list[GraphBreak] = field(default_factory=list)   # as Dynamo logged them, merged
    compiled_autograd: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    exit_status: int = 0
    traceback: str = ""


# -- the command line -------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aotgrad report",
        usage="aotgrad report [--out PATH] [--backend CHOICE] (SCRIPT.py | -m MODULE) [args ...]",
        description="Run a script with aotgrad's backends and write one HTML page of every graph it compiled.")
    parser.add_argument("--out", default="aotgrad_report.html", help="the page to write (default %(default)s)")
    parser.add_argument("--backend", choices=BACKEND_CHOICES, default="auto",
                        help="auto (default): torch.compile's inductor (or no backend) runs as aotgrad_inductor "
                             "and aot_eager as aotgrad; aotgrad or aotgrad_inductor: every backend named by a "
                             "string runs as that one; keep: the script's choice")
    return parser


def split_command_line(argv: list[str]) -> tuple[list[str], list[str]]:
    """The report's own options, and what to run: the script (or `-m`, module) and its
    arguments, which may look like options themselves.

        ["--out", "r.html", "-m", "aotgrad", "demo", "--steps", "3"]
        -> (["--out", "r.html"], ["-m", "aotgrad", "demo", "--steps", "3"])
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" or not arg.startswith("-"):
            return argv[:i], argv[i:]
        i += 2 if arg in ("--out", "--backend") else 1
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    own, command = split_command_line(argv)
    options = parser.parse_args(own)
    if not command or command == ["-m"]:
        parser.error("name a script to run (SCRIPT.py [args]) or a module (-m MODULE [args])")
    if command[0] != "-m" and not os.path.isfile(command[0]):
        parser.error(f"no such script: {command[0]}")
    out = os.path.abspath(options.out)  # before the script runs: it may change directory
    run = run_with_report(command, options.backend)
    started = time.perf_counter()
    page = render(run)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"aotgrad report: wrote {out} (graphs: {len(run.graphs)}, compiled-autograd captures: "
          f"{len(run.captures)}, Dynamo frame compiles: {len(run.frames)}; page made in "
          f"{time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return run.exit_status


# -- running the script -----------------------------------------------------------------

def run_with_report(command: list[str], backend: str = "auto") -> Run:
    """Run `command` (as `python` would, minus the interpreter) and collect what it compiled.
    aotgrad's disk cache is a new, empty folder for the run, deleted after: every graph is
    traced (a graph loaded from the cache has no joint graph to draw the memory-vs-recompute
    curve from), and each record says whether its graphs could be stored, or why not."""
    import aotgrad  # registers the backends

    run = Run(command, backend)
    started = time.perf_counter()
    cache_dir = aotgrad.config.cache_dir
    try:
        with tempfile.TemporaryDirectory(prefix="aotgrad-report-") as folder:
            aotgrad.config.cache_dir = folder
            with substitute(backend, run.substitutions), watching(run):
                run.exit_status, run.traceback = run_as_main(command)
    finally:
        aotgrad.config.cache_dir = cache_dir
    run.wall_seconds = time.perf_counter() - started
    return run


def run_as_main(command: list[str]) -> tuple[int, str]:
    """Run a script or `-m` module as __main__ with sys.argv set; (exit status, traceback)."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if command[0] == "-m":
            sys.argv = [command[1], *command[2:]]
            runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        else:
            script = command[0]
            sys.argv = list(command)
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            runpy.run_path(script, run_name="__main__")
        return 0, ""
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return 0, ""
        status = e.code if isinstance(e.code, int) else 1
        return status, f"SystemExit: {e.code}"
    except BaseException as e:  # noqa: BLE001 - the page is written whatever the script raised
        text = _user_traceback(e)
        print(text, file=sys.stderr, end="")
        return 1, text
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _user_traceback(e: BaseException) -> str:
    """The traceback from the script's first frame on (runpy's and ours left out)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in (__name__, "runpy"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


@contextlib.contextmanager
def substitute(choice: str, substitutions: Counter) -> Iterator[None]:
    """torch.compile with aotgrad's backends for the block (`--backend`); restored after.
    `mode` and `options` (Inductor's) go to `aotgrad_inductor`, which reads them as Inductor
    does; a call substituted by `aotgrad`, which takes none, drops them."""
    if choice == "keep":
        yield
        return
    original = torch.compile

    @functools.wraps(original)
    def compile(model=None, **kwargs):
        asked = kwargs.get("backend", "inductor")
        given = _substitute(asked, choice)
        if given != asked:
            dropped = () if given == "aotgrad_inductor" else tuple(
                k for k in ("mode", "options") if kwargs.pop(k, None) is not None)
            kwargs["backend"] = given
            substitutions[(asked, given, dropped)] += 1
        return original(model, **kwargs)

    torch.compile = compile
    try:
        yield
    finally:
        torch.compile = original


def _substitute(asked, choice: str):
    if not isinstance(asked, str):  # the script's own compiler function
        return asked
    return AUTO_BACKENDS.get(asked, asked) if choice == "auto" else choice


@contextlib.contextmanager
def watching(run: Run) -> Iterator[None]:
    """Collect compile records, compiled-autograd captures and Dynamo's frame metrics."""
    from torch._dynamo import utils as dynamo_utils

    from aotgrad.counting import counters
    from aotgrad.compiled_autograd import engine as ca_engine

    def on_record(record: phases.CompileRecord) -> None:
        compile_id = torch._guards.CompileContext.current_compile_id()
        run.graphs.append(Graph(record, None if compile_id is None else str(compile_id)))

    def on_capture(gm: fx.GraphModule, reasons: list[str]) -> None:
        nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        run.captures.append(Capture(format_graph(gm, "compiled_autograd_graph"), list(reasons), nodes))

    dynamo_utils.clear_compilation_metrics()
    dynamo_utils.set_compilation_metrics_limit(100_000)
    ca_before = Counter(counters["compiled_autograd"])
    breaks_before = Counter(dynamo_utils.counters["graph_break"])
    ca_engine.capture_watchers.append(on_capture)
    try:
        with phases.watch(on_record), graph_breaks_logged() as breaks:
            yield
    finally:
        ca_engine.capture_watchers.remove(on_capture)
        run.frames = [_frame(m) for m in dynamo_utils.get_compilation_metrics() if m.compile_id is not None]
        dynamo_utils.set_compilation_metrics_limit(dynamo_utils.DEFAULT_COMPILATION_METRICS_LIMIT)
        run.graph_breaks = report_words.merge_breaks(breaks) or _counted_breaks(
            Counter(dynamo_utils.counters["graph_break"]) - breaks_before)
        run.compiled_autograd = {k: v - ca_before[k] for k, v in counters["compiled_autograd"].items()}
        _match_frames(run)


class _BreakHandler(logging.Handler):
    def __init__(self, breaks: list[GraphBreak]):
        super().__init__(logging.DEBUG)
        self.breaks = breaks

    def emit(self, record: logging.LogRecord) -> None:
        exception = record.exc_info[1] if record.exc_info else None
        self.breaks.append(report_words.graph_break_from_log(record.getMessage(), exception))


@contextlib.contextmanager
def graph_breaks_logged() -> Iterator[list[GraphBreak]]:
    """Every graph break Dynamo logs in the block, with its reason and the user's line.

    Dynamo writes each break (the data-dependent `if` too, which counters["graph_break"]
    misses) to its `graph_breaks` artifact log, which is off unless TORCH_LOGS asks for it. For
    the block it is on at DEBUG for our handler only: records do not reach torch's handlers
    (stderr) unless the user turned the artifact on, in which case it is left as it was."""
    breaks: list[GraphBreak] = []
    handler = _BreakHandler(breaks)
    loggers = [torch._logging.getArtifactLogger(name, "graph_breaks") for name in GRAPH_BREAK_LOGGERS]
    saved = [(log, log.level, log.propagate, log.isEnabledFor(logging.DEBUG)) for log in loggers]
    for log, _, _, enabled in saved:
        if not enabled:
            log.setLevel(logging.DEBUG)
            log.propagate = False
        log.addHandler(handler)
    try:
        yield breaks
    finally:
        for log, level, propagate, _ in saved:
            log.removeHandler(handler)
            log.setLevel(level)
            log.propagate = propagate


def _counted_breaks(reasons: Counter) -> list[GraphBreak]:
    """Breaks from counters["graph_break"], when Dynamo logged none (a torch whose log we cannot read)."""
    return [GraphBreak("", 0, "", reason.strip().splitlines()[0] if reason.strip() else "?", "", reason, n)
            for reason, n in reasons.items() if n > 0]


def _frame(metrics) -> Frame:
    where = f"{os.path.basename(metrics.co_filename or '?')}:{metrics.co_firstlineno}"
    failure = f"{metrics.fail_type}: {metrics.fail_reason}" if metrics.fail_type else None
    return Frame(str(metrics.compile_id), metrics.co_name or "?", where, metrics.entire_frame_compile_time_s or 0.0,
                 metrics.recompile_reason, failure)


def _match_frames(run: Run) -> None:
    """Each graph's frame: the next frame compile with its compile id (ids restart after
    torch._dynamo.reset(), so in order, not by id alone)."""
    j = 0
    for graph in run.graphs:
        k = next((k for k in range(j, len(run.frames)) if run.frames[k].compile_id == graph.compile_id), None)
        if k is not None:
            graph.frame, j = run.frames[k], k


# -- the page ---------------------------------------------------------------------------

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
