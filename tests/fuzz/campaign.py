"""A fuzz campaign: many programs, every failure kept, each shrunk to plain Python.

    python -m tests.fuzz.campaign --examples 2000 --seed 3 [--backends default,min_cut,compile]

Unlike the pytest run (which stops at the first failure and lets hypothesis shrink it),
this keeps going: each failure is shrunk by `shrink.py`, grouped by what differs and on
which backend, and printed as a runnable program with its symptom. Ends with the counts
(programs run, discarded because eager rejects them, accepted with aotgrad's clear error).

The pieces are shared with `benchmarks/fuzz.py`, which runs long campaigns in worker
processes and sets PyTorch's own AOTAutograd beside aotgrad:
`each_program` (the programs of one seed), `check_one` (one program through the oracle,
never raising: a `ProgramResult`), `Tally` (the counts), `run_chunk` and `shrink_jobs`
(the entry points of a worker process).
"""
from __future__ import annotations

import argparse
import collections
import gc
import linecache
import logging
import signal
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz.known import known_bugs, which_known
from tests.fuzz.oracle import EagerRejected, FuzzFailure, check_program, failure_type
from tests.fuzz.program import Program, programs
from tests.fuzz.shrink import fails_like, shrink

logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
TIMEOUT_S = 120
STATUSES = ("discarded", "passed", "clear", "known", "failure", "harness_error")


def _hang(signum, frame):
    raise failure_type("hang")(f"[any] the program ran for more than {TIMEOUT_S} s (all backends)")


# -- one program ------------------------------------------------------------------------

@dataclass
class ProgramResult:
    """What one program did; small and picklable (it crosses from worker to parent).

    status: "discarded" (eager rejects it), "passed", "clear" (an aotgrad backend raised
    aotgrad's clear error; `clear_errors` has them), "known" (a known bug's failure; `detail`
    names it), "failure" (a new mismatch: `category` and `detail` are the FuzzFailure's),
    "harness_error" (the fuzz code itself raised; `detail` is the traceback).
    `pytorch`: one pytorch_oracle.Verdict per PyTorch backend, when those were asked for."""

    source: str
    status: str = ""
    detail: str = ""
    category: str = ""
    clear_errors: dict = field(default_factory=dict)
    pytorch: list = field(default_factory=list)
    seconds: float = 0.0

    def failure(self) -> FuzzFailure:
        """The FuzzFailure again (type and message, which is all `shrink.fails_like` reads)."""
        return failure_type(self.category)(self.detail)


def _check_aotgrad(p: Program, result: ProgramResult, backends: tuple[str, ...], bugs: dict) -> None:
    f, make_inputs = p.compile()
    signal.signal(signal.SIGALRM, _hang)
    signal.alarm(TIMEOUT_S)
    try:
        report = check_program(f, make_inputs, backends)
    except EagerRejected as e:
        result.status, result.detail = "discarded", str(e)[:300]
        return
    except FuzzFailure as e:
        known = which_known(e, make_inputs, bugs, result.source)
        if known is not None:
            result.status, result.detail = "known", known
        else:
            result.status, result.category, result.detail = "failure", e.category, str(e)
        return
    finally:
        signal.alarm(0)
    result.clear_errors = dict(report.clear_errors)
    result.status = "clear" if report.clear_errors else "passed"


def lose_verdicts(result: ProgramResult, backends: tuple[str, ...], why: str) -> None:
    """The PyTorch backend in flight gets an "error" verdict `why` (it hung, its process
    died), the ones after it "not run", so that every backend has a verdict."""
    from tests.fuzz.pytorch_oracle import Verdict

    done = {v.backend for v in result.pytorch}
    rest = [b for b in backends if b not in done]
    for k, name in enumerate(rest):
        what = why if k == 0 else f"not run: {rest[0]} {why.split(' (')[0]}"
        result.pytorch.append(Verdict(name, "error", what, f"[{name}] {what}"))


def _check_pytorch(p: Program, result: ProgramResult, backends: tuple[str, ...], on_stage: Callable) -> None:
    from tests.fuzz import oracle, pytorch_oracle

    f, make_inputs = p.compile()
    signal.signal(signal.SIGALRM, pytorch_oracle.raise_hang)
    signal.alarm(TIMEOUT_S)
    try:
        eager = oracle.run_eager(f, make_inputs)
        for name in backends:
            on_stage(name, result)
            result.pytorch.append(pytorch_oracle.run_pytorch_backend(name, f, make_inputs, eager))
    except pytorch_oracle.PyTorchHang:
        signal.alarm(0)
        lose_verdicts(result, backends, f"hang (ran past {TIMEOUT_S} s)")
        try:
            oracle._check_global_state("pytorch")
        except FuzzFailure:
            pass
    finally:
        signal.alarm(0)


def check_one(p: Program, backends: tuple[str, ...], bugs: dict, pytorch_backends: tuple[str, ...] = (),
              on_stage: Callable = lambda stage, result: None) -> ProgramResult:
    """One program through aotgrad's oracle, then (if eager accepts it) through PyTorch's
    backends. Never raises: a fuzz-code error becomes status "harness_error". `on_stage` is
    called before each stage ("aotgrad", then each PyTorch backend) with the result so far."""
    start = time.perf_counter()
    result = ProgramResult(p.to_source())
    try:
        on_stage("aotgrad", result)
        _check_aotgrad(p, result, backends, bugs)
        if pytorch_backends and result.status != "discarded":
            _check_pytorch(p, result, pytorch_backends, on_stage)
    except Exception:  # noqa: BLE001 - one program's trouble must not end the campaign
        result.detail = (result.detail + "\n" if result.status else "") + traceback.format_exc(limit=-8)
        result.status = "harness_error"
    result.seconds = round(time.perf_counter() - start, 3)
    return result


# -- many programs ----------------------------------------------------------------------

def each_program(examples: int, seed_value: int, max_statements: int, visit: Callable[[int, Program], None]) -> int:
    """Call visit(index, program) for the `examples` programs hypothesis draws from this seed.
    Generation depends only on the seed (outcomes are not reported back to hypothesis), so
    the same seed gives the same programs in the same order. Returns how many were drawn."""
    drawn = [0]

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(max_statements=max_statements))
    def one(p: Program):
        drawn[0] += 1
        visit(drawn[0] - 1, p)

    if examples > 0:
        one()
    return drawn[0]


@dataclass
class Tally:
    """The counts of a campaign, added to one ProgramResult at a time."""

    programs: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    known: collections.Counter = field(default_factory=collections.Counter)
    clear_errors: collections.Counter = field(default_factory=collections.Counter)   # message -> programs
    failures: list = field(default_factory=list)           # ProgramResults with status "failure"
    harness_errors: list = field(default_factory=list)
    pytorch: collections.Counter = field(default_factory=collections.Counter)        # (backend, kind) -> n
    pytorch_errors: collections.Counter = field(default_factory=collections.Counter)  # (backend, kind) -> n
    pytorch_silent: list = field(default_factory=list)     # ProgramResults with a "silent" verdict
    pytorch_raising: int = 0                               # programs where a PyTorch backend raised
    # (aotgrad's status, PyTorch's: "all right" | "silently wrong" (any backend) | "raises" (else any)) -> n
    side_by_side: collections.Counter = field(default_factory=collections.Counter)
    examples: dict = field(default_factory=dict)           # an error kind -> the first program showing it
    # (aotgrad's clear error, PyTorch's outcome as in side_by_side) -> n; and up to 5 programs per
    # clear error that PyTorch's AOTAutograd gets all right (what aotgrad refuses and PyTorch supports)
    clear_vs_pytorch: collections.Counter = field(default_factory=collections.Counter)
    pytorch_supports: dict = field(default_factory=dict)
    seconds: float = 0.0                                   # time in check_one, summed

    def add(self, result: ProgramResult) -> None:
        self.programs += 1
        self.seconds += result.seconds
        self.statuses[result.status] += 1
        if result.status == "known":
            self.known[result.detail] += 1
        elif result.status == "failure":
            self.failures.append(result)
        elif result.status == "harness_error":
            self.harness_errors.append(result)
        for message in set(result.clear_errors.values()):
            self.clear_errors[message[:160]] += 1
            self.examples.setdefault(("aotgrad", message[:160]), result.source)
        for v in result.pytorch:
            self.pytorch[v.backend, v.kind] += 1
            if v.kind == "error":
                self.pytorch_errors[v.backend, v.what] += 1
                self.examples.setdefault(("pytorch", v.what), result.source)
        kinds = {v.kind for v in result.pytorch}
        if "silent" in kinds:
            self.pytorch_silent.append(result)
        self.pytorch_raising += "error" in kinds
        if kinds:
            pytorch = "silently wrong" if "silent" in kinds else "raises" if "error" in kinds else "all right"
            self.side_by_side[result.status, pytorch] += 1
            for message in set(result.clear_errors.values()):
                self.clear_vs_pytorch[message[:160], pytorch] += 1
                if pytorch == "all right" and len(self.pytorch_supports.setdefault(message[:160], [])) < 5:
                    self.pytorch_supports[message[:160]].append(result.source)

    def counts(self) -> dict:
        """The campaign's counts as `python -m tests.fuzz.campaign` prints them."""
        counts = {"programs": self.programs, "passed": self.statuses["passed"],
                  "discarded (eager rejects)": self.statuses["discarded"],
                  "clear aotgrad errors": self.statuses["clear"], "failures": self.statuses["failure"],
                  "harness errors": self.statuses["harness_error"]}
        counts.update({f"known: {name}": n for name, n in self.known.items()})
        return {k: v for k, v in counts.items() if v or k in ("programs", "passed")}


def _tidy() -> None:
    """Between programs: drop what a long run would otherwise pile up (dynamo's caches, the
    printed programs' linecache entries)."""
    import torch

    torch._dynamo.reset()
    for name in [n for n in linecache.cache if n.startswith("<fuzz-program-")]:
        del linecache.cache[name]
    gc.collect()


def run(examples: int, seed_value: int, backends: tuple[str, ...], max_statements: int = 8,
        skip_known: bool = True, pytorch_backends: tuple[str, ...] = ()) -> Tally:
    """A campaign in this process: every program of one seed, tallied."""
    bugs = known_bugs() if skip_known else {}
    tally = Tally()

    def visit(index: int, p: Program) -> None:
        tally.add(check_one(p, backends, bugs, pytorch_backends))
        if index % 100 == 99:
            _tidy()

    each_program(examples, seed_value, max_statements, visit)
    return tally


# -- worker processes (benchmarks/fuzz.py) -------------------------------------------------

@dataclass(frozen=True)
class Chunk:
    """A slice of a campaign that one worker process runs: the programs of one seed,
    from `skip` on (a chunk resumed after its process died skips what was done)."""

    index: int
    seed: int
    programs: int
    backends: tuple[str, ...]
    pytorch_backends: tuple[str, ...] = ()
    max_statements: int = 8
    skip_known: bool = True
    skip: int = 0


def _quiet_worker() -> None:
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)


def rss_mib() -> int:
    """This process's resident memory now (Linux), in MiB."""
    try:
        with open("/proc/self/statm") as statm:
            import os
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
    except OSError:
        return 0


def run_chunk(conn, chunk: Chunk, tidy_every: int = 50) -> None:
    """A worker process's entry point: run a chunk, sending ("ready",), then per program
    ("begin", index, source), ("stage", index, name, result so far) and ("end", index,
    result, rss MiB), and at last ("done", programs drawn)."""
    _quiet_worker()
    bugs = known_bugs() if chunk.skip_known else {}
    conn.send(("ready",))

    def visit(index: int, p: Program) -> None:
        if index < chunk.skip:
            return
        conn.send(("begin", index, p.to_source()))
        result = check_one(p, chunk.backends, bugs, chunk.pytorch_backends,
                           on_stage=lambda stage, partial: conn.send(("stage", index, stage, partial)))
        if index % tidy_every == tidy_every - 1:
            _tidy()
        conn.send(("end", index, result, rss_mib()))

    drawn = each_program(chunk.programs, chunk.seed, chunk.max_statements, visit)
    conn.send(("done", drawn))


@dataclass(frozen=True)
class ShrinkJob:
    """One program to shrink: an aotgrad failure (side "aotgrad": `what` is the category,
    `message` the failure) or a PyTorch backend silently wrong (side "pytorch": `what` the
    category, `backend` the backend)."""

    key: str
    source: str
    side: str
    backend: str
    what: str
    message: str


def shrink_failure(p: Program, failure: FuzzFailure, budget_s: float = 1e9) -> tuple[Program, str]:
    """The smallest program that still fails like `failure` on its backend, and its message."""
    deadline = time.monotonic() + budget_s
    still_fails = fails_like(failure, (failure.backend,))
    small = shrink(p, lambda q: time.monotonic() < deadline and still_fails(q))
    f, make_inputs = small.compile()
    try:
        check_program(f, make_inputs, (failure.backend,))
        return small, "(shrunk program passes?)"
    except Exception as err:  # noqa: BLE001
        return small, str(err)


def _shrink_one(job: ShrinkJob, budget_s: float, pytorch_backends: tuple[str, ...]) -> dict:
    from tests.fuzz import pytorch_oracle

    p = Program.from_source(job.source)
    if job.side == "aotgrad":
        small, message = shrink_failure(p, failure_type(job.what)(job.message), budget_s)
        return {"source": small.to_source(), "message": message}
    verdict = pytorch_oracle.Verdict(job.backend, "silent", job.what, job.message)
    deadline = time.monotonic() + budget_s
    still_silent = pytorch_oracle.silent_like(verdict)
    small = shrink(p, lambda q: time.monotonic() < deadline and still_silent(q))
    f, make_inputs = small.compile()
    verdicts = pytorch_oracle.check_pytorch(f, make_inputs, pytorch_backends)
    aotgrad = check_one(small, ("default", "min_cut", "compile"), known_bugs())
    return {"source": small.to_source(), "pytorch": verdicts, "aotgrad": in_words(aotgrad)}


def in_words(result: ProgramResult) -> str:
    """aotgrad's outcome on a program, for a report."""
    first = result.detail.splitlines()[0][:200] if result.detail else ""
    return {"discarded": f"eager rejects it ({first})", "passed": "right",
            "clear": "its clear error: " + "; ".join(sorted(set(result.clear_errors.values())))[:200],
            "known": f"known bug {first}", "failure": f"MISMATCH ({result.category}): {first}",
            "harness_error": "the fuzz code raised"}[result.status]


def shrink_jobs(conn, jobs: list[ShrinkJob], budget_s: float, pytorch_backends: tuple[str, ...]) -> None:
    """A worker process's entry point: shrink each job, sending ("shrunk", key, result)."""
    _quiet_worker()
    conn.send(("ready",))
    for job in jobs:
        conn.send(("begin", job.key, job.source))
        try:
            result = _shrink_one(job, budget_s, pytorch_backends)
        except Exception:  # noqa: BLE001
            result = {"source": job.source, "error": traceback.format_exc(limit=-6)}
        conn.send(("shrunk", job.key, result))
    conn.send(("done", len(jobs)))


# -- the command line ---------------------------------------------------------------------

def report_failures(failures, shrink_limit: int = 40) -> dict:
    """Shrink failures (first few per kind) and group them by kind and shrunk source."""
    groups: dict = {}
    per_kind: collections.Counter = collections.Counter()
    for p, e in failures:
        kind = (type(e).__name__, e.backend)
        per_kind[kind] += 1
        if per_kind[kind] > shrink_limit or e.category == "hang":
            groups.setdefault((kind, p.to_source()), [0, str(e)])[0] += 1
            continue
        small, message = shrink_failure(p, e)
        groups.setdefault((kind, small.to_source()), [0, message])[0] += 1
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--backends", default="default,min_cut,compile")
    parser.add_argument("--max-statements", type=int, default=8)
    parser.add_argument("--all", action="store_true", help="report known bugs too")
    parser.add_argument("--save", help="write each failing program (before shrinking) to this file")
    args = parser.parse_args()
    start = time.time()
    tally = run(args.examples, args.seed, tuple(args.backends.split(",")), args.max_statements,
                skip_known=not args.all)
    failures = [(Program.from_source(r.source), r.failure()) for r in tally.failures]
    if args.save:
        with open(args.save, "w") as out:
            out.writelines(f"# {type(e).__name__}: {str(e).splitlines()[0][:200]}\n{p.to_source()}\n"
                           for p, e in failures)
    groups = report_failures(failures)
    for ((kind, backend), source), (n, message) in sorted(groups.items(), key=lambda g: (g[0][0], len(g[0][1]))):
        print(f"=== {kind} on {backend} ({n} found) ===\n{source}# {message[:600]}\n")
    for r in tally.harness_errors:
        print(f"=== the fuzz code raised ===\n{r.source}# {r.detail[-1500:]}\n")
    print("clear errors:")
    for message, n in tally.clear_errors.most_common():
        print(f"  {n:5d}  {message}")
    print("counts:", {**tally.counts(), "seconds": round(time.time() - start)})


if __name__ == "__main__":
    main()
