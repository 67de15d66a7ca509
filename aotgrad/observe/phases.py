"""What one compile did, phase by phase: timings, the graphs it made, where they came from.

`compile_flat` times each phase of a compile (trace, functionalize, partition, compile)
with a `Phases`, which logs each phase's time at debug level and, at info level, one line
per compile: which graphs, where from (`Origin`: the function or torch.compile's frame),
how long (`log_compiled`). It ends with a `CompileRecord`: the graphs, the epilogue, the
phase times and whether the disk cache served it. Records go to whoever is watching
(`watch()`: `aotgrad.explain`, `python -m aotgrad report`); nobody keeps them otherwise.

    aotgrad: compiled forward (backward at its first call) of step at /home/me/train.py:12 (torch.compile
    frame 0/0) in 77.7 ms (trace 47.6, functionalize 18.9, partition 10.8, compile 0.3)

    with phases.watch() as records:
        compiled(x)                       # compiles
    records[0].phases                     # {"trace": 0.012, "functionalize": 0.002, ...}

A compile still running after `PROGRESS_AFTER_S` seconds says so on stderr, when stderr
is a terminal, and from then on names each phase as it starts:

    aotgrad: compiling step — trace (2.0 s)
    aotgrad: compiling step — partition (3.1 s)
    aotgrad: compiled step in 3.4 s
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch.fx as fx

from aotgrad.observe.logs import apply_log_level

log = logging.getLogger("aotgrad")

_watchers: list[Callable[["CompileRecord"], None]] = []

# A compile running longer than this shows its progress on a terminal (stderr).
PROGRESS_AFTER_S = 2.0


@dataclass(frozen=True)
class Origin:
    """Where a compile came from, for people: the function (under torch.compile, the frame
    Dynamo compiles), the file and line where its code starts, and Dynamo's compile id
    ("0/1": frame 0, its second compile), if any. str(): "step at /x/train.py:12 (torch.compile
    frame 0/1)"."""

    name: str
    location: str = ""      # "/x/train.py:12", or "" when unknown
    compile_id: Any = None  # torch._guards.CompileId under torch.compile, else None

    def __str__(self) -> str:
        text = self.name + (f" at {self.location}" if self.location else "")
        return text + (f" (torch.compile frame {self.compile_id})" if self.compile_id is not None else "")


def origin_of(fn_name: str, source: Callable | None = None) -> Origin:
    """The Origin of a compile starting now: the frame Dynamo is compiling, if it is (the first
    code its trace entered), else `source`'s code (the user's function: aot_function's `fn`,
    aot_module's module's `forward`), else just `fn_name`."""
    from torch._guards import CompileContext, TracingContext

    context = TracingContext.try_get()
    compile_id = CompileContext.current_compile_id()
    if context is not None and context.traced_code:
        code = context.traced_code[0]
        # (Model.forward; a function defined in another is named as itself: f, not g.<locals>.f)
        name = getattr(code, "co_qualname", code.co_name).rsplit(".<locals>.", 1)[-1]
        return Origin(name, _location(code), compile_id)
    code = getattr(inspect.unwrap(source), "__code__", None) if source is not None else None
    return Origin(fn_name, _location(code) if code is not None else "", compile_id)


def _location(code) -> str:
    if code.co_filename.startswith("<"):  # generated code (an FX graph's "<eval_with_key>.3")
        return ""
    return f"{code.co_filename}:{code.co_firstlineno}"


def log_compiled(what: str, origin: Origin, seconds: float, detail: str = "") -> None:
    """The info line of one compile: "aotgrad: compiled <what> of <origin> in 12.3 ms (<detail>)"."""
    log.info("aotgrad: compiled %s of %s in %.1f ms%s", what, origin, seconds * 1e3, f" ({detail})" if detail else "")


@dataclass
class CompileRecord:
    """One compile of one function for one input signature."""

    fn_name: str
    origin: Origin | None = None             # where the compile came from (None: fn_name only)
    phases: dict[str, float] = field(default_factory=dict)  # phase -> seconds, in the order run
    joint: fx.GraphModule | None = None      # the functional joint graph the partitioner split
    num_forward_outputs: int = 0             # of `joint`: its first outputs are the forward's
    forward: fx.GraphModule | None = None    # the forward graph (the inference graph without backward)
    backward: fx.GraphModule | None = None
    epilogue: Any = None                     # runtime.Epilogue: write-backs, rebuilt aliases
    analysis: Any = None                     # analysis.ForwardAnalysis (None when loaded from disk)
    disk_cache: str = "off"                  # "off", "hit", "stored", or why it was not stored
    wrapper: str = ""                        # the generated runtime wrapper's source
    # the caller's name of each distinct input, in the order of the forward's first placeholders
    # (under torch.compile, Dynamo's: L_x_, L_self_modules_fc_parameters_weight_); None: unknown
    input_names: list[str] | None = None
    # forward output index of each backward tangent, and input index of each backward output
    # (None: not recorded; `aotgrad.explain` then works them out from `analysis`)
    tangent_sources: list[int] | None = None
    grad_inputs: list[int] | None = None
    # the backward is compiled at its first call (config.lazy_backward), its time then added to
    # `phases` as "backward compile"
    backward_at_first_call: bool = False

    @property
    def total(self) -> float:
        return sum(self.phases.values())


class Phases:
    """Times the phases of one compile: `with phases("trace"): ...`.

    Also applies `config.log_level` (logs.py) and, when `stream` (default: stderr) is a
    terminal, shows progress once the compile has run `progress_after` seconds (default
    PROGRESS_AFTER_S); `Progress` below."""

    def __init__(self, fn_name: str, *, origin: Origin | None = None, stream=None,
                 progress_after: float | None = None):
        apply_log_level()
        self.record = CompileRecord(fn_name, origin or Origin(fn_name))
        stream = sys.stderr if stream is None else stream
        self.progress = Progress(fn_name, stream, PROGRESS_AFTER_S if progress_after is None else progress_after) \
            if _is_terminal(stream) else None

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.progress is not None:
            self.progress.phase(name)
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            if self.progress is not None:
                self.progress.stop()  # the compile failed: no "compiled" line, no late timer
            raise
        finally:
            seconds = time.perf_counter() - start
            self.record.phases[name] = self.record.phases.get(name, 0.0) + seconds
            log.debug("aotgrad %s: %s %.1f ms", self.record.fn_name, name, seconds * 1e3)

    def finish(self) -> CompileRecord:
        record = self.record
        if self.progress is not None:
            self.progress.done()
        what = "inference graph" if record.backward is None else \
            "forward (backward at its first call)" if record.backward_at_first_call else "forward and backward"
        if record.disk_cache == "hit":
            what += " (from the disk cache)"
        log_compiled(what, record.origin, record.total,
                     ", ".join(f"{name} {s * 1e3:.1f}" for name, s in record.phases.items()))
        for watcher in list(_watchers):
            watcher(record)
        return record


class Progress:
    """Progress lines for one long compile on a terminal.

    Quiet for the first `after` seconds; then (a timer fires, or a phase starts late) one
    line for the phase running, one per phase started after, and one at the end. Fast
    compiles print nothing and cost one timer thread."""

    def __init__(self, fn_name: str, stream, after: float):
        self.fn_name, self.stream, self.after = fn_name, stream, after
        self.start = time.perf_counter()
        self.current: str | None = None
        self.shown: str | None = None  # the phase whose line was printed last
        self.loud = False
        self.stopped = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(after, self._wake)
        self.timer.daemon = True
        self.timer.start()

    def phase(self, name: str) -> None:
        with self.lock:
            self.current = name
            if not self.loud and time.perf_counter() - self.start >= self.after:
                self.loud = True
            self._show()

    def done(self) -> None:
        with self.lock:
            self.timer.cancel()
            if self.loud and not self.stopped:
                self._print(f"aotgrad: compiled {self.fn_name} in {self._elapsed():.1f} s")
            self.stopped = True

    def stop(self) -> None:
        with self.lock:
            self.timer.cancel()
            self.stopped = True

    def _wake(self) -> None:
        with self.lock:
            self.loud = True
            self._show()

    def _show(self) -> None:
        if self.loud and not self.stopped and self.current is not None and self.current != self.shown:
            self.shown = self.current
            self._print(f"aotgrad: compiling {self.fn_name} — {self.current} ({self._elapsed():.1f} s)")

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _print(self, line: str) -> None:
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken terminal: progress is not worth an error
            self.stopped = True


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def watch(callback: Callable[[CompileRecord], None] | None = None) -> Iterator[list[CompileRecord]]:
    """Collect the record of every compile that finishes inside the block; `callback(record)`
    also sees each as it arrives."""
    records: list[CompileRecord] = []

    def arrived(record: CompileRecord) -> None:
        records.append(record)
        if callback is not None:
            callback(record)
    _watchers.append(arrived)
    try:
        yield records
    finally:
        _watchers.remove(arrived)
