"""PyTorch's own autograd test suite, run stock and with aotgrad, compared test by test.

Points at a folder of PyTorch's tests (default: the copy in ../shared/upstream; aim it at your
own checkout with --tests) and runs one test file (default test_autograd.py) under pytest with
upstream_plugin.py, once per mode:
  stock      as PyTorch ships (the reference)
  imported   `import aotgrad`, nothing enabled: must fail exactly what stock fails
  identity   every test inside aotgrad.compiled_autograd.enable(lambda gm: gm)
  eager      ... enable(lambda gm: torch.compile(gm, backend="eager"))
  eager-full ... torch.compile(gm, backend="eager", fullgraph=True, dynamic=True)
Each mode's tests are split over --jobs processes. Printed: per mode passed/failed/skipped, then
per test class how many of stock's passing tests pass, and every test stock passes that the mode
fails, with its error's first line; "wrong" marks the failures that compare values
(AssertionError from assertEqual: a result differed), the rest are errors. --json writes it all.

    python benchmarks/upstream_autograd.py --modes stock,imported,identity,eager --jobs 2
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TESTS = os.path.join(HERE, "..", "..", "shared", "upstream", "pytorch-b411238", "test")
WRONG_MARKS = ("Tensor-likes are not", "Scalars are not", "Tensor-likes are not close", "are not equal",
               "not close", "False is not true", "True is not false", "!=")


def run_mode(mode: str, tests: str, test_file: str, jobs: int, timeout: int, select: str | None,
             subset: tuple[int, int] = (0, 1)) -> dict:
    """{test id: {"outcome", "error", "counters"}} for one mode; `subset` (i, n): only every
    n-th test from the i-th (split further over the jobs)."""
    folder = tempfile.mkdtemp(prefix=f"upstream-{mode}-")
    processes = []
    first, every = subset
    for shard in range(jobs):
        env = dict(os.environ, AOTGRAD_UPSTREAM_MODE=mode,
                   AOTGRAD_UPSTREAM_SHARD=f"{first + shard * every}/{jobs * every}",
                   AOTGRAD_UPSTREAM_RESULTS=os.path.join(folder, f"{shard}.jsonl"),
                   AOTGRAD_UPSTREAM_TIMEOUT=str(timeout),
                   PYTHONPATH=os.pathsep.join([HERE, os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "upstream_plugin", "-p", "no:cacheprovider",
                   test_file]
        if select:
            command += ["-k", select]
        log = open(os.path.join(folder, f"{shard}.log"), "w")
        processes.append((subprocess.Popen(command, cwd=tests, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for process, log in processes:
        process.wait()
        log.close()
    results = {}
    for shard in range(jobs):
        path = os.path.join(folder, f"{shard}.jsonl")
        if os.path.exists(path):
            for line in open(path):
                entry = json.loads(line)
                results[entry["id"]] = entry
    if not results:
        raise SystemExit(f"{mode}: no test ran; see the logs in {folder}")
    return results


def is_wrong(error: str) -> bool:
    """A failure that compared values (assertEqual and friends), not an exception raised."""
    return error.startswith("AssertionError") and any(mark in error for mark in WRONG_MARKS)


def compare(stock: dict, results: dict) -> dict:
    counts = collections.Counter(entry["outcome"] for entry in results.values())
    lost = {test: results.get(test, {"outcome": "missing", "error": "did not run"})
            for test, entry in stock.items() if entry["outcome"] == "passed"
            and results.get(test, {}).get("outcome") != "passed"}
    gained = [test for test, entry in results.items() if entry["outcome"] == "passed"
              and stock.get(test, {}).get("outcome") != "passed"]
    per_class: dict = collections.defaultdict(lambda: [0, 0])
    for test, entry in stock.items():
        if entry["outcome"] == "passed":
            name = test.split("::")[1] if "::" in test else test
            per_class[name][1] += 1
            if test not in lost:
                per_class[name][0] += 1
    return {"passed": counts["passed"], "failed": counts["failed"], "skipped": counts["skipped"],
            "stock_failures_same": sorted(t for t, e in results.items() if e["outcome"] == "failed") ==
            sorted(t for t, e in stock.items() if e["outcome"] == "failed"),
            "lost": lost, "gained": gained, "wrong": sorted(t for t, e in lost.items() if is_wrong(e["error"])),
            "per_class": {k: tuple(v) for k, v in sorted(per_class.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", default=DEFAULT_TESTS, help="a folder of PyTorch's tests")
    parser.add_argument("--file", default="test_autograd.py")
    parser.add_argument("--modes", default="stock,imported,identity,eager")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per test")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression")
    parser.add_argument("--json", default=None, help="write every result here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if modes[0] != "stock":
        modes.insert(0, "stock")
    everything = {}
    for mode in modes:
        start = time.perf_counter()
        everything[mode] = run_mode(mode, os.path.abspath(args.tests), args.file, args.jobs, args.timeout,
                                    args.select)
        print(f"{mode}: ran in {time.perf_counter() - start:.0f} s", flush=True)
    stock = everything["stock"]
    summary = {}
    print(f"\n{'mode':<12} {'passed':>7} {'failed':>7} {'skipped':>8} {'of stock passing':>17} {'wrong':>6}")
    for mode in modes:
        report = summary[mode] = compare(stock, everything[mode])
        kept = sum(1 for e in stock.values() if e["outcome"] == "passed") - len(report["lost"])
        print(f"{mode:<12} {report['passed']:>7} {report['failed']:>7} {report['skipped']:>8} {kept:>17} "
              f"{len(report['wrong']):>6}")
    for mode in modes[1:]:
        report = summary[mode]
        print(f"\n## {mode}: per class, stock's passing tests that pass")
        for name, (kept, total) in report["per_class"].items():
            print(f"  {name:<48} {kept:>4} / {total}")
        print(f"  same failures as stock: {report['stock_failures_same']}")
        print(f"## {mode}: stock passes, {mode} fails ({len(report['lost'])})")
        for test, entry in sorted(report["lost"].items()):
            mark = "WRONG " if test in report["wrong"] else ""
            print(f"  {mark}{test.split('::', 1)[-1][:90]} | {entry['error'][:160]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": everything, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
