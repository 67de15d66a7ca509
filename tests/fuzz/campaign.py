"""A fuzz campaign: many programs, every failure kept, each shrunk to plain Python.

    python -m tests.fuzz.campaign --examples 2000 --seed 3 [--backends default,min_cut,compile]

Unlike the pytest run (which stops at the first failure and lets hypothesis shrink it),
this keeps going: each failure is shrunk by `shrink.py`, grouped by what differs and on
which backend, and printed as a runnable program with its symptom. Ends with the counts
(programs run, discarded because eager rejects them, accepted with aotgrad's clear error).
"""
from __future__ import annotations

import argparse
import collections
import logging
import signal
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.fuzz.known import known_bugs, which_known
from tests.fuzz.oracle import EagerRejected, FuzzFailure, check_program, failure_type
from tests.fuzz.program import Program, programs
from tests.fuzz.shrink import fails_like, shrink

logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
TIMEOUT_S = 120


def _hang(signum, frame):
    raise failure_type("hang")(f"[any] the program ran for more than {TIMEOUT_S} s (all backends)")


def run(examples: int, seed_value: int, backends: tuple[str, ...], max_statements: int = 8,
        skip_known: bool = True):
    bugs = known_bugs() if skip_known else {}
    counts: collections.Counter = collections.Counter()
    clear_errors: collections.Counter = collections.Counter()
    failures: list[tuple[Program, FuzzFailure]] = []

    @seed(seed_value)
    @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(max_statements=max_statements))
    def one(p: Program):
        counts["programs"] += 1
        f, make_inputs = p.compile()
        signal.signal(signal.SIGALRM, _hang)
        signal.alarm(TIMEOUT_S)
        try:
            report = check_program(f, make_inputs, backends)
        except EagerRejected:
            counts["discarded (eager rejects)"] += 1
            return
        except FuzzFailure as e:
            known = which_known(e, make_inputs, bugs, p.to_source())
            if known is not None:
                counts[f"known: {known}"] += 1
                return
            counts["failures"] += 1
            failures.append((p, e))
            return
        finally:
            signal.alarm(0)
        if report.clear_errors:
            counts["clear aotgrad errors"] += 1
            for message in set(report.clear_errors.values()):
                clear_errors[message[:160]] += 1
        else:
            counts["passed"] += 1

    start = time.time()
    one()
    counts["seconds"] = round(time.time() - start)
    return counts, clear_errors, failures


def report_failures(failures, shrink_limit: int = 40) -> dict:
    """Shrink failures (first few per kind) and group them by kind and shrunk source."""
    groups: dict = {}
    per_kind: collections.Counter = collections.Counter()
    for p, e in failures:
        backend = str(e).split("]")[0].lstrip("[")
        kind = (type(e).__name__, backend)
        per_kind[kind] += 1
        if per_kind[kind] > shrink_limit or e.category == "hang":
            groups.setdefault((kind, p.to_source()), [0, str(e)])[0] += 1
            continue
        small = shrink(p, fails_like(e, (backend,)))
        f, make_inputs = small.compile()
        try:
            check_program(f, make_inputs, (backend,))
            message = "(shrunk program passes?)"
        except Exception as err:  # noqa: BLE001
            message = str(err)
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
    counts, clear_errors, failures = run(args.examples, args.seed, tuple(args.backends.split(",")),
                                         args.max_statements, skip_known=not args.all)
    if args.save:
        with open(args.save, "w") as out:
            out.writelines(f"# {type(e).__name__}: {str(e).splitlines()[0][:200]}\n{p.to_source()}\n"
                           for p, e in failures)
    groups = report_failures(failures)
    for ((kind, backend), source), (n, message) in sorted(groups.items(), key=lambda g: (g[0][0], len(g[0][1]))):
        print(f"=== {kind} on {backend} ({n} found) ===\n{source}# {message[:600]}\n")
    print("clear errors:")
    for message, n in clear_errors.most_common():
        print(f"  {n:5d}  {message}")
    print("counts:", dict(counts))


if __name__ == "__main__":
    main()
