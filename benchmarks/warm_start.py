"""Cold and warm start of a zoo model's first training step, each in a fresh process.

What a second training run sees: for each backend, a fresh pair of cache folders (Inductor's
TORCHINDUCTOR_CACHE_DIR and aotgrad's AOTGRAD_CACHE_DIR, both empty), then --processes fresh
processes one after another, each building the model and timing its first step (dynamo's
capture, the compile, one forward and backward; wall clock):
  cold  the first process: every cache empty
  warm  the later ones: Inductor's FX graph cache and PyTorch's AOTAutograd cache filled for
        `inductor`; Inductor's FX graph cache and aotgrad's disk cache for `aotgrad_inductor`
Imports (Inductor's compile_fx included, which `inductor` imports at torch.compile() and
`aotgrad_inductor` at its first compile) and building the model are not timed. The backends'
processes take turns (warm rows are medians, and the median of each round's ratio), so load
drifts hit both.

    python benchmarks/warm_start.py --models gpt2,resnet18 --processes 4 --markdown
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("inductor", "aotgrad_inductor")
VERBOSE = "--verbose" in sys.argv


def child(model: str, backend: str, threads: int) -> None:
    """In a fresh process: the model's first step under `backend`; prints seconds as JSON."""
    sys.path.insert(0, HERE)
    import torch
    import zoo
    import torch._inductor.compile_fx  # noqa: F401  (both backends import it; not timed)
    if backend.startswith("aotgrad"):
        import aotgrad  # noqa: F401  (registers the backend)
    torch.set_num_threads(threads)
    module, batch = zoo.build(model)
    run = zoo.make_run(module, batch, backend)
    from torch._dynamo.utils import counters
    start = time.perf_counter()
    zoo.train_step(run, autocast=False)
    seconds = time.perf_counter() - start
    caches = {k: v for k, v in counters["inductor"].items() if k.startswith(("fxgraph_cache", "autograd_cache"))}
    caches.update({k: v for k, v in counters["aotgrad"].items()})
    print(json.dumps({"seconds": seconds, "caches": caches}))


def first_step(model: str, backend: str, threads: int, inductor_dir: str, aotgrad_dir: str) -> float:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=inductor_dir, AOTGRAD_CACHE_DIR=aotgrad_dir)
    command = [sys.executable, os.path.abspath(__file__), "--child", model, backend, str(threads)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{model} under {backend} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if VERBOSE:
        print(f"    {model} {backend}: caches {result['caches']}", flush=True)
    return result["seconds"]


def measure(model: str, processes: int, threads: int) -> dict[str, list[float]]:
    """Each backend's first-step seconds, cold first, in `processes` processes per backend."""
    times = {b: [] for b in BACKENDS}
    with tempfile.TemporaryDirectory() as root:
        dirs = {b: (os.path.join(root, b, "inductor"), os.path.join(root, b, "aotgrad")) for b in BACKENDS}
        for b in BACKENDS:
            for d in dirs[b]:
                os.makedirs(d, mode=0o700)
        for i in range(processes):
            order = BACKENDS if i % 2 == 0 else BACKENDS[::-1]
            for b in order:
                times[b].append(first_step(model, b, threads, *dirs[b]))
                print(f"{model} {b} {'cold' if i == 0 else 'warm'}: {times[b][-1]:.2f} s", flush=True)
    return times


def summarize(times: dict[str, list[float]]) -> tuple[dict, dict, float]:
    """From each backend's first-step seconds (cold first): the cold seconds, the warm medians,
    and the median of the rounds' warm ratios aotgrad_inductor / inductor (each round's two
    processes ran back to back, so their ratio cancels slow drifts in the machine's load)."""
    cold = {b: times[b][0] for b in BACKENDS}
    warm = {b: statistics.median(times[b][1:]) for b in BACKENDS}
    paired = statistics.median(a / i for a, i in zip(times["aotgrad_inductor"][1:], times["inductor"][1:]))
    return cold, warm, paired


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,bert,resnet18")
    parser.add_argument("--processes", type=int, default=4, help="per backend; the first is cold")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="each process's cache counters")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "BACKEND", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    if args.processes < 2:
        parser.error("--processes must be at least 2 (one cold, then warm)")
    rows = []
    for model in args.models.split(","):
        t = measure(model, args.processes, args.threads)
        rows.append((model, *summarize(t)))
    if args.markdown:
        print("\n| model | cold: inductor, aotgrad_inductor, ratio | warm: inductor, aotgrad_inductor (medians), "
              "ratio | warm: median of the rounds' ratios |")
        print("|---|---|---|---|")
        for model, c, w, paired in rows:
            print(f"| {model} | {c['inductor']:.1f} s, {c['aotgrad_inductor']:.1f} s, "
                  f"{c['aotgrad_inductor'] / c['inductor']:.2f} | {w['inductor']:.2f} s, "
                  f"{w['aotgrad_inductor']:.2f} s, {w['aotgrad_inductor'] / w['inductor']:.2f} | {paired:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
