"""OpInfo sweep: every op in PyTorch's op_db through aotgrad and through PyTorch's AOTAutograd.

In: PyTorch's OpInfo database (torch.testing._internal.common_methods_invocations.op_db),
CPU, float32, up to --samples sample inputs per op. Out: a markdown table (default
docs/opinfo_sweep.md) with one row per OpInfo (op, variant, aotgrad, pytorch) and a summary:
pass/fail/skip counts of each side, the ops PyTorch's AOTAutograd passes and aotgrad does not,
and -- listed first -- every op where aotgrad failed with an AssertionError (a silent wrong
value under compilation, the worst kind of failure).

The comparison is the one PyTorch's own OpInfo test for AOTAutograd makes
(test/functorch/test_aotdispatch.py, _test_aot_autograd_helper): op.op is called with
[sample.input, *sample.args] and sample.kwargs; tensors become graph inputs; outputs and the
gradients of sum(|out|) are compared to eager with assert_close(equal_nan=True). Ops with
supports_autograd=False are compared forward-only (check_gradients=False).

Each (op, side) runs in a worker process with a wall-clock limit (--timeout, default 60 s);
a worker that runs over, or dies, is killed and replaced, and the op is reported as failed.

    python benchmarks/opinfo_sweep.py --jobs 2
    python benchmarks/opinfo_sweep.py --ops add,nn.functional.conv2d --samples 1 --out /tmp/x.md
    python benchmarks/opinfo_sweep.py --half 0     # every second op (a stratified half)
    python benchmarks/opinfo_sweep.py --dynamic    # symbolic sizes on both sides (dynamic=True)
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import time
import traceback
from multiprocessing.connection import wait

SIDES = ("aotgrad", "pytorch")
MISMATCH_PREFIXES = ("Outputs of the operator are different", "Gradients of the operator are different",
                     "eager raised 'does not require grad'")


# ----------------------------------------------------------------------------- per-op work

def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def first_line(text: str) -> str:
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return ""


def make_assert_equals():
    """assert_close(equal_nan=True), as PyTorch's OpInfo test compares; on a mismatch the
    message keeps the caller's first sentence and adds assert_close's numbers, on one line."""
    import torch

    def assert_equals(actual, expected, msg=None):
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except AssertionError as e:
            head = (msg or "Values differ").split(". ")[0]
            detail = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())
            raise AssertionError(f"{head}. {detail}") from None

    return assert_equals


def uses_autograd(op, torch) -> bool:
    return bool(op.supports_autograd) and torch.float32 in op.supported_backward_dtypes("cpu")


# Ops whose output is uninitialized memory: eager and compiled cannot be compared (PyTorch's
# own OpInfo tests skip these as non-deterministic / "empty is not comparable").
UNCOMPARABLE = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}


def skip_reason(op, torch) -> str | None:
    if torch.float32 not in op.supported_dtypes("cpu"):
        return "does not support float32 on CPU"
    if op.name in UNCOMPARABLE:
        return "output is uninitialized memory, not comparable"
    return None


def nth_sample(op, torch, grad: bool, i: int):
    torch.manual_seed(0)
    for j, sample in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=grad)):
        if j == i:
            return sample
    raise IndexError(i)


def eager_error(op, torch, grad: bool, i: int) -> str | None:
    """What eager itself raises on sample i under the check's protocol (forward, then the
    gradient of sum(|out|)), or None if eager runs: then a failure belongs to the compiler."""
    import torch.utils._pytree as pytree
    from torch.testing._utils import wrapper_set_seed

    try:
        sample = nth_sample(op, torch, grad, i)
        args = [sample.input, *sample.args]
        out = wrapper_set_seed(op.op, *args, **sample.kwargs)
        if grad:
            diff = [t for t in pytree.tree_leaves((args, sample.kwargs))
                    if isinstance(t, torch.Tensor) and t.requires_grad]
            total = 0
            for o in pytree.tree_leaves(out):
                if isinstance(o, torch.Tensor):
                    total = total + o.sum().abs()
            if not isinstance(total, torch.Tensor):
                raise AssertionError("the function returned no tensor")
            torch.autograd.grad(total, diff, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {first_line(e)}"
    return None


def run_side(op, side: str, n_samples: int, dynamic: bool = False) -> dict:
    """Run up to n_samples samples of op through one side's aot_autograd_check (with
    symbolic sizes on both sides if `dynamic`)."""
    import torch

    reason = skip_reason(op, torch)
    if reason:
        return {"status": "skip", "detail": reason}
    grad = uses_autograd(op, torch)
    eq = make_assert_equals()
    if side == "aotgrad":
        from aotgrad.testing import aot_autograd_check as check_aotgrad

        def check(fn, args, kwargs):
            check_aotgrad(fn, args, kwargs, dynamic=dynamic, check_gradients=grad, assert_equals_fn=eq)
    else:
        from torch.testing._internal.optests import aot_autograd_check as check_pytorch

        def check(fn, args, kwargs):
            check_pytorch(fn, args, kwargs, dynamic, assert_equals_fn=eq, check_gradients=grad)

    torch.manual_seed(0)  # same samples on both sides
    try:
        samples = iter(op.sample_inputs("cpu", torch.float32, requires_grad=grad))
    except Exception as e:  # noqa: BLE001
        return {"status": "skip", "detail": f"sample_inputs raised {type(e).__name__}: {first_line(e)}"}
    ran = 0
    for i in range(n_samples):
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001
            return {"status": "skip", "detail": f"sample_inputs raised {type(e).__name__}: {first_line(e)}"}
        args = [sample.input, *sample.args]
        try:
            check(op.op, args, sample.kwargs)
        except Exception as e:  # noqa: BLE001
            eager = eager_error(op, torch, grad, i)
            if eager is not None:
                return {"status": "skip", "detail": f"eager itself raises (sample {i}): {eager}"}
            return {"status": "fail", "error_type": type(e).__name__, "detail": first_line(e),
                    "sample": i,
                    "value_mismatch": isinstance(e, AssertionError) and str(e).startswith(MISMATCH_PREFIXES),
                    "traceback": traceback.format_exc(limit=-6)[-3000:]}
        ran += 1
    if ran == 0:
        return {"status": "skip", "detail": "no sample inputs"}
    return {"status": "pass", "samples": ran}


def worker_main(conn, n_samples: int, dynamic: bool) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)
    from torch.testing._internal.common_methods_invocations import op_db

    import aotgrad  # noqa: F401  (import cost outside the timed region)
    import torch.testing._internal.optests  # noqa: F401

    conn.send(("ready", None, None))
    while True:
        task = conn.recv()
        if task is None:
            return
        index, side = task
        t0 = time.perf_counter()
        try:
            result = run_side(op_db[index], side, n_samples, dynamic)
        except BaseException as e:  # noqa: BLE001
            result = {"status": "fail", "error_type": type(e).__name__, "detail": "sweep: " + first_line(e)}
        result["seconds"] = round(time.perf_counter() - t0, 2)
        conn.send(("done", task, result))


# ----------------------------------------------------------------------------- scheduling

class Worker:
    def __init__(self, ctx, n_samples: int, dynamic: bool):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, n_samples, dynamic), daemon=True)
        self.proc.start()
        child.close()
        self.task = None
        self.started = None
        self.ready = False

    def give(self, task) -> None:
        self.task, self.started = task, time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def run_all(tasks: list, jobs: int, n_samples: int, timeout: float, progress, dynamic: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    pending = collections.deque(tasks)
    results: dict = {}
    workers = [Worker(ctx, n_samples, dynamic) for _ in range(min(jobs, len(tasks)) or 1)]
    try:
        while pending or any(w.task is not None for w in workers):
            for w in workers:
                if w.ready and w.task is None and pending:
                    w.give(pending.popleft())
            ready = wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=1.0)
            for i, w in enumerate(list(workers)):
                msg = None
                if w.conn in ready:
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                if msg is not None and msg[0] == "ready":
                    w.ready = True
                    continue
                if msg is not None and msg[0] == "done":
                    results[tuple(msg[1])] = msg[2]
                    progress(msg[1], msg[2])
                    w.task = None
                    continue
                dead = not w.proc.is_alive()
                over = w.task is not None and time.monotonic() - w.started > timeout
                if dead or over:
                    if w.task is not None:
                        why = (f"timeout after {timeout:.0f} s" if over and not dead
                               else f"worker died (exit code {w.proc.exitcode})")
                        res = {"status": "fail", "error_type": "Timeout" if over and not dead else "Crash",
                               "detail": why, "seconds": round(time.monotonic() - w.started, 2)}
                        results[tuple(w.task)] = res
                        progress(w.task, res)
                    elif not w.ready:
                        raise RuntimeError(f"sweep worker failed to start (exit code {w.proc.exitcode})")
                    w.kill()
                    workers[i] = Worker(ctx, n_samples, dynamic)
    finally:
        for w in workers:
            try:
                if w.proc.is_alive() and w.task is None and w.ready:
                    w.conn.send(None)
                    w.proc.join(5)
            except OSError:
                pass
            w.kill()
    return results


# ----------------------------------------------------------------------------- report

def cell(res: dict | None) -> str:
    if res is None:
        return "not run"
    if res["status"] == "pass":
        return "pass"
    if res["status"] == "skip":
        text = "skip: " + res["detail"]
    else:
        where = f" (sample {res['sample']})" if res.get("sample") is not None else ""
        text = f"FAIL{where}: {res.get('error_type', '')}: {res['detail']}"
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def short_error(res: dict) -> str:
    """Grouping key: the error's type and first clause (numbers of a mismatch left out)."""
    return f"{res.get('error_type', '')}: {res['detail'].split('; ')[0]}"[:160]


def write_report(path: str, rows: list, results: dict, args, elapsed: float, note: str) -> dict:
    counts = {s: collections.Counter() for s in SIDES}
    for ident, _name, _variant in rows:
        for s in SIDES:
            r = results.get((ident, s))
            counts[s][r["status"] if r else "not run"] += 1
    regressions = [(ident, results[(ident, "aotgrad")]) for ident, _, _ in rows
                   if results.get((ident, "pytorch"), {}).get("status") == "pass"
                   and results.get((ident, "aotgrad"), {}).get("status") != "pass"]
    mismatches = [(ident, results[(ident, "aotgrad")]) for ident, _, _ in rows
                  if results.get((ident, "aotgrad"), {}).get("error_type") == "AssertionError"]
    aot_only = [ident for ident, _, _ in rows
                if results.get((ident, "aotgrad"), {}).get("status") == "pass"
                and results.get((ident, "pytorch"), {}).get("status") == "fail"]

    def fmt(c):
        return ", ".join(f"{c[k]} {k}" for k in ("pass", "fail", "skip", "not run") if c[k])

    mode = " (dynamic=True: symbolic sizes)" if args.dynamic else ""
    lines = [f"# OpInfo sweep: aotgrad vs PyTorch AOTAutograd{mode}", ""]
    lines.append(f"CPU, float32, up to {args.samples} samples per OpInfo, per-(op, side) timeout "
                 f"{args.timeout:.0f} s, {args.jobs} workers, {elapsed / 60:.1f} min wall. "
                 f"Generated by `python benchmarks/opinfo_sweep.py {' '.join(sys.argv[1:])}`. {note}")
    lines.append("")
    lines.append("Comparison as in PyTorch's OpInfo AOTAutograd test: `op.op(sample.input, *sample.args, "
                 "**sample.kwargs)` eager vs compiled (nop compilers, min-cut partition), outputs and "
                 "gradients of `sum(|out|)` compared with `assert_close(equal_nan=True)`; ops with "
                 "`supports_autograd=False` forward only. A cell shows the first failing sample.")
    lines.append("")
    lines.append(f"**Summary ({len(rows)} OpInfos):** aotgrad: {fmt(counts['aotgrad'])} | "
                 f"PyTorch AOTAutograd: {fmt(counts['pytorch'])} | "
                 f"PyTorch passes, aotgrad does not: {len(regressions)} | "
                 f"aotgrad AssertionError (silent wrong values): {len(mismatches)} | "
                 f"aotgrad passes, PyTorch fails: {len(aot_only)}")
    lines.append("")
    lines.append(f"## aotgrad AssertionError failures (silent wrong values): {len(mismatches)}")
    lines.append("")
    wrong = [(i, r) for i, r in mismatches if r.get("value_mismatch") and not r["detail"].startswith("eager raised")]
    other = [(i, r) for i, r in mismatches if (i, r) not in wrong]
    if mismatches:
        lines.append(f"Outputs or gradients differ from eager ({len(wrong)}):")
        lines.append("")
        for ident, r in wrong:
            lines.append(f"- **`{ident}`**: {cell(r)} — PyTorch: {cell(results.get((ident, 'pytorch')))}")
        if other:
            lines.append("")
            lines.append(f"Other AssertionErrors (the check's protocol, not a value) ({len(other)}):")
            lines.append("")
            for ident, r in other:
                lines.append(f"- **`{ident}`**: {cell(r)} — PyTorch: {cell(results.get((ident, 'pytorch')))}")
    else:
        lines.append("None.")
    lines.append("")
    lines.append(f"## PyTorch passes, aotgrad does not: {len(regressions)}")
    lines.append("")
    groups = collections.defaultdict(list)
    for ident, r in regressions:
        groups[short_error(r) if r["status"] == "fail" else "skip: " + r["detail"]].append(ident)
    if groups:
        for err, ids in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            err = err.replace("|", "\\|")
            lines.append(f"- `` {err} `` ({len(ids)}): " + ", ".join(f"`{i}`" for i in ids))
    else:
        lines.append("None.")
    lines.append("")
    if aot_only:
        lines.append(f"## aotgrad passes, PyTorch fails: {len(aot_only)}")
        lines.append("")
        lines.append(", ".join(f"`{i}`" for i in aot_only))
        lines.append("")
    lines.append("## All ops")
    lines.append("")
    lines.append("| op | variant | aotgrad | pytorch |")
    lines.append("|---|---|---|---|")
    for ident, name, variant in rows:
        lines.append(f"| `{name}` | {variant or ''} | {cell(results.get((ident, 'aotgrad')))} | "
                     f"{cell(results.get((ident, 'pytorch')))} |")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return {"counts": {s: dict(c) for s, c in counts.items()}, "regressions": [i for i, _ in regressions],
            "mismatches": [i for i, _ in mismatches], "aotgrad_only": aot_only}


def _reused_pytorch(args, results: dict) -> str:
    """Fill PyTorch's side from an earlier run's JSON: PyTorch's results do not change with
    aotgrad's commit, only with torch's version and the mode, which must match."""
    import torch

    with open(args.reuse_pytorch) as f:
        earlier = json.load(f)
    for key in ("dynamic", "samples"):
        if earlier["args"].get(key) != getattr(args, key):
            raise SystemExit(f"--reuse-pytorch: that run had {key}={earlier['args'].get(key)}, this one "
                             f"{getattr(args, key)}")
    if earlier.get("torch", torch.__version__) != torch.__version__:
        raise SystemExit(f"--reuse-pytorch: that run used torch {earlier['torch']}, this is {torch.__version__}")
    reused = 0
    for key, result in earlier["results"].items():
        ident, side = key.rsplit("::", 1)
        if side == "pytorch":
            results[(ident, "pytorch")] = result
            reused += 1
    return f"{reused} results, torch {torch.__version__}"


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="", help="comma-separated op names or ids (name.variant) to run")
    p.add_argument("--limit", type=int, default=0, help="run only the first N selected OpInfos")
    p.add_argument("--samples", type=int, default=3, help="sample inputs per op (default 3)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per (op, side) (default 60)")
    p.add_argument("--sides", default="aotgrad,pytorch", help="which sides to run")
    p.add_argument("--half", type=int, choices=(0, 1), default=None,
                   help="stratified half: every second OpInfo in op_db order, starting at 0 or 1")
    p.add_argument("--dynamic", action="store_true",
                   help="symbolic sizes: dynamic=True on both sides (report: docs/opinfo_sweep_dynamic.md)")
    p.add_argument("--out", default="", help="report path (default docs/opinfo_sweep[_dynamic].md)")
    p.add_argument("--json", default="", help="also write raw per-op results as JSON here")
    p.add_argument("--reuse-pytorch", default="",
                   help="take PyTorch's side from this earlier --json (same torch, same mode) instead of running it")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.out = args.out or os.path.join(here, "docs", "opinfo_sweep_dynamic.md" if args.dynamic else "opinfo_sweep.md")

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = {s.strip() for s in args.ops.split(",") if s.strip()}
    selected = []
    for index, op in enumerate(op_db):
        ident = op_id(op)
        if wanted and ident not in wanted and op.name not in wanted:
            continue
        selected.append((index, ident, op.name, op.variant_test_name))
    note = ""
    if args.half is not None:
        selected = selected[args.half::2]
        note = f"Stratified half {args.half} (every second OpInfo in op_db order)."
    if args.limit:
        selected = selected[:args.limit]
    if wanted:
        missing = wanted - {s[1] for s in selected} - {s[2] for s in selected}
        if missing:
            print(f"unknown ops: {', '.join(sorted(missing))}", file=sys.stderr)
    sides = [s for s in args.sides.split(",") if s in SIDES]
    by_index = {index: ident for index, ident, _, _ in selected}
    tasks = [(index, side) for index, *_ in selected for side in sides]
    total = len(tasks)
    done = [0]
    t0 = time.monotonic()

    def progress(task, res):
        done[0] += 1
        if not args.quiet:
            print(f"[{done[0]}/{total} {time.monotonic() - t0:6.0f}s] {by_index[task[0]]:45s} {task[1]:8s} "
                  f"{cell(res)[:150]} ({res.get('seconds', '?')}s)", flush=True)

    raw = run_all(tasks, args.jobs, args.samples, args.timeout, progress, args.dynamic)
    results = {(by_index[index], side): r for (index, side), r in raw.items()}
    if args.reuse_pytorch:
        note += f" PyTorch's side from `{os.path.basename(args.reuse_pytorch)}` ({_reused_pytorch(args, results)})."
    elapsed = time.monotonic() - t0
    rows = [(ident, name, variant) for _, ident, name, variant in selected]
    summary = write_report(args.out, rows, results, args, elapsed, note)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "torch": torch.__version__, "elapsed_s": elapsed, "summary": summary,
                       "results": {f"{k[0]}::{k[1]}": v for k, v in results.items()}}, f, indent=1)
    print(json.dumps(summary["counts"]), f"elapsed {elapsed / 60:.1f} min", flush=True)
    print(f"PyTorch passes, aotgrad does not ({len(summary['regressions'])}):",
          ", ".join(summary["regressions"]))
    print(f"aotgrad AssertionError ({len(summary['mismatches'])}):", ", ".join(summary["mismatches"]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
