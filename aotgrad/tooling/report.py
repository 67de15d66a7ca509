"""`python -m aotgrad report SCRIPT.py [args]`: one HTML page of everything a script compiled.

In: a script (or `-m module`) and its arguments. It runs as `__main__` with aotgrad's
backends in place of the ones it asks torch.compile for (`substitute`), while three
watchers listen: `phases.watch()` (every ahead-of-time compile's `CompileRecord`), the
compiled-autograd capture watchers (each captured backward and why the cache missed),
Dynamo's `graph_breaks` log (every graph break, with its reason and line) and Dynamo's
compilation metrics (each frame compiled, and why it recompiled).
Out: one self-contained HTML file (inline CSS, PNGs as data URIs, no scripts), written by
report_page.py: a summary, the graph breaks, then per graph (named after its frame and
modules) its phase timings, saved-for-backward table (parameters by name, other values by the
op and module that made them), memory-vs-recompute curve and forward and backward graphs, then
the captures, the recompile reasons and the timings. A script that raises still gets its page,
with the traceback, and the command exits non-zero.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
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

from aotgrad import config
from aotgrad.observe import phases
from aotgrad.observe.printing import format_graph
from aotgrad.tooling import report_words
from aotgrad.tooling.report_page import render
from aotgrad.tooling.report_words import GraphBreak

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
    run = Run(command, backend)
    started = time.perf_counter()
    cache_dir = config.cache_dir
    try:
        with tempfile.TemporaryDirectory(prefix="aotgrad-report-") as folder:
            config.cache_dir = folder
            with substitute(backend, run.substitutions), watching(run):
                run.exit_status, run.traceback = run_as_main(command)
    finally:
        config.cache_dir = cache_dir
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

    from aotgrad.observe.counting import counters
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
