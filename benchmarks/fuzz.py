"""Long fuzz campaigns: aotgrad against eager, PyTorch's own AOTAutograd side by side.

    python benchmarks/fuzz.py --programs 20000 --jobs 2 --pytorch --out fuzz.json
    python benchmarks/fuzz.py --programs 300 --seed 1 --backends default,min_cut

The programs are tests/fuzz's random programs (docs/fuzzing.md), checked by its oracle
against eager on aotgrad's backends (`--backends`) and, with `--pytorch`, on PyTorch's:
`aot_function` with a no-op compiler and the default or the min-cut partitioner, and
`torch.compile(backend="aot_eager")` (tests/fuzz/pytorch_oracle.py).

The campaign is cut into chunks of `--chunk-size` programs; chunk c draws the programs of
hypothesis seed `seed * 100000 + c`, so a campaign depends only on --seed, --programs and the
chunk size, not on --jobs. Each chunk runs in a fresh worker process (`--jobs` at once): memory
cannot pile up over a long run, and no chunk's results depend on what ran before it. A program
that runs past 120 s is a hang; one that kills its process (or stalls it past the watchdog) is
recorded with its source and the chunk resumes after it. Progress goes to stderr every
--progress-every programs; at the end a few programs per kind of aotgrad mismatch and of PyTorch
silently wrong are shrunk (`--shrink-limit`), and the report is printed as markdown
(and written as JSON with every program's details by `--out`).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import multiprocessing as mp
import os
import pickle
import subprocess
import sys
import time
from multiprocessing.connection import wait

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fuzz.campaign import (TIMEOUT_S, Chunk, ProgramResult, ShrinkJob, Tally,  # noqa: E402
                                 in_words, lose_verdicts, run_chunk, shrink_jobs)

AOTGRAD_BACKENDS = ("default", "min_cut", "compile")
PYTORCH_BACKENDS = ("pytorch_default", "pytorch_min_cut", "aot_eager")
STALL_S = TIMEOUT_S * 2 + 60    # no word from a worker for this long: it is killed


def chunk_seed(seed: int, index: int) -> int:
    return seed * 100_000 + index


def plan_chunks(programs: int, seed: int, chunk_size: int, **chunk_args) -> list[Chunk]:
    sizes = [min(chunk_size, programs - start) for start in range(0, programs, chunk_size)]
    return [Chunk(index=k, seed=chunk_seed(seed, k), programs=n, **chunk_args) for k, n in enumerate(sizes)]


# -- worker processes -----------------------------------------------------------------------

@dataclasses.dataclass
class Worker:
    """One spawned process running one task (a Chunk, or a list of ShrinkJobs)."""

    task: object
    proc: object
    conn: object
    heard: float
    ready: bool = False
    finished: bool = False
    in_flight: tuple | None = None       # (index or key, source) of the program being checked
    last_done: int | None = None          # index of the last program whose result came in
    stage: str = ""
    partial: ProgramResult | None = None  # the result so far, from the last "stage" message


def _start(ctx, target, task, *args) -> Worker:
    conn, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(child, task, *args), daemon=True)
    proc.start()
    child.close()
    return Worker(task, proc, conn, time.monotonic())


def _kill(w: Worker) -> None:
    if w.proc.is_alive():
        w.proc.kill()
    w.proc.join(10)
    w.conn.close()


def drive(target, tasks: list, jobs: int, on_message, on_lost, extra_args=(), stall_s: float = STALL_S) -> None:
    """Run each task in a fresh process of `target`, `jobs` at once. on_message(worker, msg)
    sees every message; on_lost(worker, why) is called when a process dies or stalls before
    its "done" and returns a task to run instead (the rest of the chunk) or None."""
    ctx = mp.get_context("spawn")
    pending = collections.deque(tasks)
    running: list[Worker] = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                running.append(_start(ctx, target, pending.popleft(), *extra_args))
            wait([w.conn for w in running] + [w.proc.sentinel for w in running], timeout=1.0)
            for w in list(running):
                dead = not w.proc.is_alive()
                _read_messages(w, on_message)   # for a dead one: what it sent before it died
                if w.finished:   # all its results are in: no need to wait for its teardown
                    w.proc.join(1)
                    _kill(w)
                    running.remove(w)
                    continue
                if dead or time.monotonic() - w.heard > stall_s:
                    why = (f"process died (exit code {w.proc.exitcode})" if dead
                           else f"hang (no word for {stall_s:.0f} s; killed)")
                    _kill(w)
                    running.remove(w)
                    again = on_lost(w, why)
                    if again is not None:
                        pending.appendleft(again)
    finally:
        for w in running:
            _kill(w)


def _read_messages(w: Worker, on_message) -> None:
    while not w.finished:
        try:
            if not w.conn.poll():
                return
            msg = w.conn.recv()
        except (EOFError, OSError):
            return
        w.heard = time.monotonic()
        if msg[0] == "ready":
            w.ready = True
        elif msg[0] == "begin":
            w.in_flight, w.stage, w.partial = (msg[1], msg[2]), "", None
        elif msg[0] == "stage":
            w.stage, w.partial = msg[2], msg[3]
        elif msg[0] == "done":
            w.finished = True
        on_message(w, msg)


# -- the campaign ---------------------------------------------------------------------------

class Campaign:
    """The parent's side: tallies what the chunk workers send, prints progress, and turns a
    lost worker into a recorded program and a resumed chunk."""

    def __init__(self, total: int, pytorch_backends: tuple[str, ...], progress_every: int, log):
        self.total, self.pytorch_backends = total, pytorch_backends
        self.progress_every, self.log = progress_every, log
        self.tally = Tally()
        self.results: list[ProgramResult] = []   # every program's, for --save-results / --merge
        self.start = time.monotonic()
        self.max_rss_mib = 0
        self.drawn: dict[int, int] = {}
        self.chunk_errors: list[dict] = []
        self.retried: set[tuple[int, int]] = set()

    def on_message(self, w: Worker, msg: tuple) -> None:
        if msg[0] == "end":
            w.in_flight, w.last_done = None, msg[1]
            self.max_rss_mib = max(self.max_rss_mib, msg[3])
            self.add(msg[2])
        elif msg[0] == "done":
            self.drawn[w.task.index] = msg[1]

    def add(self, result: ProgramResult) -> None:
        self.tally.add(result)
        self.results.append(result)
        if self.progress_every and self.tally.programs % self.progress_every == 0:
            self.print_progress()

    def print_progress(self) -> None:
        t = self.tally
        elapsed = time.monotonic() - self.start
        rate = t.programs / max(elapsed, 1e-9)
        eta = (self.total - t.programs) / rate if rate else float("inf")
        pytorch = f"PyTorch silently wrong {len(t.pytorch_silent)}  " if self.pytorch_backends else ""
        print(f"[fuzz] {t.programs}/{self.total} programs  {_clock(elapsed)}  {rate:.2f}/s  ETA {_clock(eta)}  "
              f"aotgrad mismatches {t.statuses['failure']}  known {t.statuses['known']}  {pytorch}"
              f"harness errors {t.statuses['harness_error']}  max rss {self.max_rss_mib} MiB",
              file=self.log, flush=True)

    def on_lost(self, w: Worker, why: str) -> Chunk | None:
        chunk: Chunk = w.task
        if w.in_flight is None:   # at start-up, or between programs: resume once, after the last one done
            resume = chunk.skip if w.last_done is None else w.last_done + 1
            if resume >= chunk.programs:
                return None
            if (chunk.index, resume) not in self.retried:
                self.retried.add((chunk.index, resume))
                print(f"[fuzz] chunk {chunk.index}: {why} between programs; retrying from program {resume}",
                      file=self.log, flush=True)
                return dataclasses.replace(chunk, skip=resume)
            self.chunk_errors.append({"chunk": chunk.index, "seed": chunk.seed, "why": why,
                                      "note": f"lost twice before program {resume}; the rest of the chunk is not run"})
            print(f"[fuzz] chunk {chunk.index}: {why} again; the rest of the chunk is skipped",
                  file=self.log, flush=True)
            return None
        index, source = w.in_flight
        self.add(_lost_program(source, w.stage, w.partial, self.pytorch_backends, why))
        print(f"[fuzz] chunk {chunk.index} program {index}: {why} in stage {w.stage!r}; resuming after it",
              file=self.log, flush=True)
        return dataclasses.replace(chunk, skip=index + 1) if index + 1 < chunk.programs else None


def _lost_program(source: str, stage: str, partial: ProgramResult | None, pytorch_backends, why: str):
    """The result of a program whose process died or stalled: in aotgrad's stage it is an
    aotgrad failure; in a PyTorch backend's, that backend's error."""
    if stage in ("", "aotgrad") or partial is None:
        category = "hang" if why.startswith("hang") else "process_died"
        return ProgramResult(source, status="failure", category=category,
                             detail=f"[any] {why} while checking aotgrad's backends")
    result = dataclasses.replace(partial, pytorch=list(partial.pytorch))
    lose_verdicts(result, pytorch_backends, why)
    return result


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# -- shrinking ------------------------------------------------------------------------------

def _shrink_plan(tally: Tally, limit: int) -> list[ShrinkJob]:
    """The first `limit` programs of each kind: aotgrad failures by (category, backend),
    PyTorch silently wrong by (backend, category)."""
    jobs, seen = [], collections.Counter()
    for k, r in enumerate(tally.failures):
        backend = r.failure().backend
        kind = ("aotgrad", r.category, backend)
        if r.category in ("hang", "process_died") or seen[kind] >= limit:
            continue
        seen[kind] += 1
        jobs.append(ShrinkJob(f"aotgrad/{k}", r.source, "aotgrad", backend, r.category, r.detail))
    for k, r in enumerate(tally.pytorch_silent):
        silent = [v for v in r.pytorch if v.kind == "silent"]
        wanted = [v for v in silent if seen["pytorch", v.what, v.backend] < limit]
        if not wanted:
            continue
        v = wanted[0]   # one shrink per program: the other backends usually stay wrong with it
        for u in silent:
            if u.what == v.what:
                seen["pytorch", u.what, u.backend] += 1
        jobs.append(ShrinkJob(f"pytorch/{k}/{v.backend}", r.source, "pytorch", v.backend, v.what, v.message))
    return jobs


def shrink_all(jobs_to_shrink: list[ShrinkJob], jobs: int, budget_s: float, pytorch_backends, log) -> dict:
    """Shrink in `jobs` fresh processes; returns key -> shrink result."""
    if not jobs_to_shrink:
        return {}
    print(f"[fuzz] shrinking {len(jobs_to_shrink)} programs", file=log, flush=True)
    shrunk: dict = {}
    parts = [jobs_to_shrink[k::jobs] for k in range(jobs)]

    def on_message(w, msg):
        if msg[0] == "shrunk":
            shrunk[msg[1]] = msg[2]
            w.in_flight = None

    def on_lost(w, why):
        if w.in_flight is not None:
            shrunk[w.in_flight[0]] = {"source": w.in_flight[1], "error": why}
        rest = [j for j in w.task if j.key not in shrunk]
        return rest or None

    drive(shrink_jobs, [p for p in parts if p], jobs, on_message, on_lost,
          extra_args=(budget_s, pytorch_backends), stall_s=budget_s + 3 * TIMEOUT_S + 60)
    return shrunk


# -- the entry point ---------------------------------------------------------------------------

def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_campaign(programs: int, seed: int = 0, jobs: int = 2, backends: tuple[str, ...] = AOTGRAD_BACKENDS,
                 pytorch: bool = False, chunk_size: int = 250, max_statements: int = 8, skip_known: bool = True,
                 progress_every: int = 100, shrink_limit: int = 3, shrink_budget_s: float = 120,
                 log=sys.stderr, chunk_range: tuple[int, int] | None = None, save_results: str | None = None) -> dict:
    """Run a campaign; returns the summary (see `summarize`) that `markdown` prints.

    chunk_range=(a, b) runs only chunks a..b-1 of the campaign's plan, so a long campaign
    can be run in parts (sessions) and the parts' `save_results` files merged (`merge`)."""
    if programs < chunk_size * jobs:   # a small campaign is spread over the jobs evenly
        chunk_size = max(1, math.ceil(programs / max(jobs, 1)))
    pytorch_backends = PYTORCH_BACKENDS if pytorch else ()
    chunks = plan_chunks(programs, seed, chunk_size, backends=tuple(backends), pytorch_backends=pytorch_backends,
                         max_statements=max_statements, skip_known=skip_known)
    if chunk_range is not None:
        chunks = chunks[chunk_range[0]:chunk_range[1]]
    campaign = Campaign(sum(c.programs for c in chunks), pytorch_backends, progress_every, log)
    drive(run_chunk, chunks, jobs, campaign.on_message, campaign.on_lost)
    wall = time.monotonic() - campaign.start
    if progress_every and campaign.tally.programs % progress_every:
        campaign.print_progress()
    shrunk = shrink_all(_shrink_plan(campaign.tally, shrink_limit), jobs, shrink_budget_s, pytorch_backends, log)
    args = {"programs": programs, "seed": seed, "jobs": jobs, "backends": list(backends),
            "pytorch": pytorch, "chunk_size": chunk_size, "max_statements": max_statements,
            "skip_known": skip_known, "chunks": list(chunk_range) if chunk_range else None,
            "commit": _commit()}
    chunk_rows = [{"chunk": c.index, "seed": c.seed, "programs": c.programs,
                   "drawn": campaign.drawn.get(c.index)} for c in chunks]
    if save_results:
        with open(save_results, "wb") as f:
            pickle.dump({"args": args, "wall": wall, "chunk_rows": chunk_rows, "results": campaign.results,
                         "chunk_errors": campaign.chunk_errors, "max_rss_mib": campaign.max_rss_mib}, f)
    return summarize(campaign, shrunk, wall, args, chunk_rows)


def merge(paths: list[str], jobs: int = 2, shrink_limit: int = 3, shrink_budget_s: float = 120,
          log=sys.stderr) -> dict:
    """One summary of a campaign run in parts (`--chunks a:b --save-results part.pkl` each)."""
    parts = []
    for path in paths:
        with open(path, "rb") as f:
            parts.append(pickle.load(f))
    args = dict(parts[0]["args"])
    campaign = Campaign(0, PYTORCH_BACKENDS if args["pytorch"] else (), 0, log)
    rows = []
    for part in parts:
        for result in part["results"]:
            campaign.add(result)
        campaign.chunk_errors += part["chunk_errors"]
        campaign.max_rss_mib = max(campaign.max_rss_mib, part["max_rss_mib"])
        rows += part["chunk_rows"]
    indices = [row["chunk"] for row in rows]
    if len(set(indices)) != len(indices):
        raise SystemExit(f"fuzz: the parts overlap (chunks {sorted(indices)})")
    args["programs"] = sum(row["programs"] for row in rows)
    args["parts"] = len(parts)
    shrunk = shrink_all(_shrink_plan(campaign.tally, shrink_limit), jobs, shrink_budget_s,
                        PYTORCH_BACKENDS if args["pytorch"] else (), log)
    rows.sort(key=lambda row: row["chunk"])
    return summarize(campaign, shrunk, sum(part["wall"] for part in parts), args, rows)


def _verdicts(verdicts) -> list[dict]:
    return [dataclasses.asdict(v) for v in verdicts]


def summarize(campaign: Campaign, shrunk: dict, wall: float, args: dict, chunk_rows: list) -> dict:
    """The campaign as plain data (the JSON of --out; `markdown` prints it)."""
    t = campaign.tally
    backends = [b for b in PYTORCH_BACKENDS if any(key[0] == b for key in t.pytorch)]
    counts = {
        "programs run": t.programs,
        "discarded (eager rejects)": t.statuses["discarded"],
        "passed": t.statuses["passed"],
        "aotgrad clear errors": t.statuses["clear"],
        "aotgrad mismatches": t.statuses["failure"],
        "aotgrad known bugs": t.statuses["known"],
        "harness errors": t.statuses["harness_error"],
        "PyTorch silently wrong": len(t.pytorch_silent),
        "PyTorch errors": t.pytorch_raising,
    }
    side_by_side: dict = collections.defaultdict(dict)
    for (status, column), n in sorted(t.side_by_side.items()):
        side_by_side[status][column] = n
    failures = []
    for k, r in enumerate(t.failures):
        res = shrunk.get(f"aotgrad/{k}", {})
        failures.append({"source": r.source, "category": r.category, "message": r.detail[:3000],
                         "shrunk": res.get("source"), "shrunk message": res.get("message") or res.get("error")})
    return {
        "args": args,
        "wall_s": round(wall, 1),
        "programs_per_s": round(t.programs / max(wall, 1e-9), 3),
        "seconds_in_checks": round(t.seconds, 1),
        "max_rss_mib": campaign.max_rss_mib,
        "counts": counts,
        "known": dict(t.known.most_common()),
        "clear_errors": [{"error": m, "programs": n, "example": t.examples.get(("aotgrad", m)),
                          **({"pytorch": {c: t.clear_vs_pytorch[m, c] for c in ("all right", "silently wrong", "raises")},
                              "pytorch_supports": t.pytorch_supports.get(m, [])} if backends else {})}
                         for m, n in t.clear_errors.most_common()],
        "pytorch": {b: {kind: t.pytorch[b, kind] for kind in ("right", "silent", "error")} for b in backends},
        "pytorch_errors": _pytorch_error_rows(t, backends),
        "pytorch_silent_by_symptom": _silent_by_symptom(t, backends),
        "side_by_side": dict(side_by_side),
        "aotgrad_failures": failures,
        "pytorch_silent": [{"source": r.source, "aotgrad": in_words(r), "verdicts": _verdicts(r.pytorch)}
                           for r in t.pytorch_silent],
        "pytorch_silent_shrunk": _silent_groups(t, shrunk),
        "harness_errors": [{"source": r.source, "traceback": r.detail} for r in t.harness_errors],
        "chunk_errors": campaign.chunk_errors,
        "chunks": chunk_rows,
    }


def _pytorch_error_rows(t: Tally, backends: list[str]) -> list[dict]:
    kinds = collections.Counter()
    for (backend, kind), n in t.pytorch_errors.items():
        kinds[kind] += n
    return [{"error": kind, **{b: t.pytorch_errors[b, kind] for b in backends},
             "example": t.examples.get(("pytorch", kind))} for kind, _ in kinds.most_common()]


def _silent_groups(t: Tally, shrunk: dict) -> list[dict]:
    """The shrunk PyTorch-silently-wrong programs, one entry per distinct shrunk source."""
    groups: dict = {}
    for key, res in shrunk.items():
        if not key.startswith("pytorch/"):
            continue
        _, k, backend = key.split("/")
        original = t.pytorch_silent[int(k)]
        (v,) = [v for v in original.pytorch if v.backend == backend]
        now = [u for u in res.get("pytorch", []) if u.backend == backend and u.kind == "silent"]
        group = groups.setdefault(res["source"], {
            "source": res["source"], "found as": set(), "programs": 0, "symptom": (now[0] if now else v).message,
            "pytorch": _verdicts(res.get("pytorch", [])), "aotgrad": res.get("aotgrad", res.get("error", ""))})
        group["programs"] += 1
        group["found as"].update(f"{u.backend}: {u.what}" for u in original.pytorch if u.kind == "silent")
    for group in groups.values():
        group["found as"] = sorted(group["found as"])
    return sorted(groups.values(), key=lambda g: len(g["source"]))


def _silent_by_symptom(t: Tally, backends: list[str]) -> list[dict]:
    counts = collections.Counter((v.what, v.backend) for r in t.pytorch_silent for v in r.pytorch if v.kind == "silent")
    whats = sorted({what for what, _ in counts}, key=lambda w: -sum(counts[w, b] for b in backends))
    return [{"symptom": what, **{b: counts[what, b] for b in backends}} for what in whats]


# -- the report ----------------------------------------------------------------------------

def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(summary: dict) -> str:
    """The summary as markdown: the counts, the PyTorch side, and the programs to look at."""
    a, c = summary["args"], summary["counts"]
    out = [f"## Fuzz campaign: {a['programs']} programs, seed {a['seed']}, {a['jobs']} jobs, "
           f"aotgrad backends {','.join(a['backends'])}" + (", PyTorch side by side" if a["pytorch"] else ""), ""]
    header = [*c, "wall time", "programs/s"]
    if not a["pytorch"]:
        header = [h for h in header if not h.startswith("PyTorch")]
    row = [c[h] for h in header[:-2]] + [_clock(summary["wall_s"]), f"{summary['programs_per_s']:.2f}"]
    out += [_table(header, [row]), ""]
    if summary["pytorch"]:
        out += ["PyTorch's backends, on the programs eager runs:", "",
                _table(["backend", "right", "silently wrong", "raises"],
                       [[b, r["right"], r["silent"], r["error"]] for b, r in summary["pytorch"].items()]), ""]
        columns = ["all right", "silently wrong", "raises"]
        out += ["Side by side (programs; a row is aotgrad's outcome, a column PyTorch's worst over its backends):",
                "", _table(["aotgrad \\ PyTorch", *columns],
                           [[s, *(row.get(k, 0) for k in columns)] for s, row in summary["side_by_side"].items()]), ""]
    if summary["known"]:
        out += ["aotgrad known bugs (tests/fuzz/regressions):", "",
                _table(["bug", "programs"], list(summary["known"].items())), ""]
    if summary["clear_errors"]:
        out += ["aotgrad clear errors:", "",
                _table(["programs", "error"], [[e["programs"], e["error"]] for e in summary["clear_errors"]]), ""]
        if any("pytorch" in e for e in summary["clear_errors"]):
            columns = ["all right", "silently wrong", "raises"]
            out += ["aotgrad's clear errors against PyTorch's AOTAutograd (programs; PyTorch's worst over its backends):", "",
                    _table(["error", *columns], [[e["error"], *(e["pytorch"][c] for c in columns)]
                                                 for e in summary["clear_errors"]]), ""]
    if summary["pytorch_errors"]:
        backends = list(summary["pytorch"])
        out += ["PyTorch errors where eager runs:", "",
                _table(["error", *backends], [[e["error"], *(e[b] for b in backends)]
                                              for e in summary["pytorch_errors"]]), ""]
    for f in summary["aotgrad_failures"]:
        out += [f"### aotgrad mismatch: {f['category']}", "", "```python", (f["shrunk"] or f["source"]).rstrip(),
                *(f"# {line}" for line in (f["shrunk message"] or f["message"]).splitlines()[:8]), "```", ""]
    if summary["pytorch_silent"]:
        backends = list(summary["pytorch"])
        out += [f"### PyTorch silently wrong: {len(summary['pytorch_silent'])} programs", "",
                "By what differs from eager (the oracle's FuzzFailure categories):", "",
                _table(["symptom", *backends], [[r["symptom"], *(r[b] for b in backends)]
                                                for r in summary["pytorch_silent_by_symptom"]]), ""]
        out += _silent_listing(summary)
    for h in summary["harness_errors"]:
        out += ["### the fuzz code raised", "", "```python", h["source"].rstrip(),
                *(f"# {line}" for line in h["traceback"].splitlines()[-8:]), "```", ""]
    for e in summary["chunk_errors"]:
        out += [f"chunk {e['chunk']} (seed {e['seed']}): {e['why']}; {e['note']}", ""]
    return "\n".join(out)


def _silent_listing(summary: dict) -> list[str]:
    """The shrunk programs (or, without shrinking, the first few as found), with symptoms."""
    out = []
    groups = summary["pytorch_silent_shrunk"]
    if not groups:
        groups = [{"source": s["source"], "programs": 1,
                   "found as": [f"{v['backend']}: {v['what']}" for v in s["verdicts"] if v["kind"] == "silent"],
                   "symptom": next(v["message"] for v in s["verdicts"] if v["kind"] == "silent"),
                   "pytorch": s["verdicts"], "aotgrad": s["aotgrad"]} for s in summary["pytorch_silent"][:10]]
        out += ["The first programs found (not shrunk):", ""]
    for g in groups:
        wrong = [f"{v['backend']} ({v['what']})" for v in g["pytorch"] if v["kind"] != "right"]
        out += [f"- found as {', '.join(g['found as'])} ({g['programs']} shrunk to this); on this program "
                f"PyTorch: {', '.join(wrong) or 'right'}; aotgrad: {g['aotgrad']}", "", "```python",
                g["source"].rstrip(), *(f"# {line}" for line in g["symptom"].splitlines()[:6]), "```", ""]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--backends", default=",".join(AOTGRAD_BACKENDS), help="aotgrad's backends")
    parser.add_argument("--pytorch", action="store_true", help="also PyTorch's AOTAutograd, side by side")
    parser.add_argument("--out", help="write the summary and every program's details as JSON here")
    parser.add_argument("--chunk-size", type=int, default=250, help="programs per worker process")
    parser.add_argument("--max-statements", type=int, default=8)
    parser.add_argument("--all", action="store_true", help="count known bugs as mismatches")
    parser.add_argument("--progress-every", type=int, default=100)
    parser.add_argument("--shrink-limit", type=int, default=3, help="programs shrunk per kind (0: none)")
    parser.add_argument("--shrink-budget", type=float, default=120, help="seconds of shrinking per program")
    parser.add_argument("--chunks", help="A:B runs only chunks A..B-1 of the campaign (a part of it)")
    parser.add_argument("--save-results", help="pickle every program's result here (for --merge)")
    parser.add_argument("--merge", nargs="+", metavar="PART", help="report on parts saved with --save-results")
    args = parser.parse_args(argv)
    if args.merge:
        summary = merge(args.merge, args.jobs, args.shrink_limit, args.shrink_budget)
    else:
        chunk_range = tuple(int(x) for x in args.chunks.split(":")) if args.chunks else None
        summary = run_campaign(args.programs, args.seed, args.jobs, tuple(args.backends.split(",")), args.pytorch,
                               args.chunk_size, args.max_statements, not args.all, args.progress_every,
                               args.shrink_limit, args.shrink_budget, chunk_range=chunk_range,
                               save_results=args.save_results)
    print(markdown(summary))
    if args.out:
        with open(args.out, "w") as out:
            json.dump(summary, out, indent=1)
    return 1 if summary["counts"]["aotgrad mismatches"] or summary["counts"]["harness errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
