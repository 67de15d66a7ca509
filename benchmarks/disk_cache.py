"""Disk cache: ahead-of-time compile time with an empty cache folder (cold) and a filled one (warm).

On the graph torch.compile captures for each model (compile_and_step.py: its models and
`capture_graph`, static sizes), aotgrad.aot_module_simplified(gm, example_inputs, nop, nop)
inside a TracingContext, as dynamo calls a backend:
  off   aotgrad.config.cache_dir = None: trace and partition, nothing stored
  cold  an empty cache folder: trace and partition, then the entry is stored
  warm  the folder a cold compile filled: the entry is loaded, trace and partition skipped
        (aotgrad keeps no in-memory cache across aot_module_simplified calls, so every warm
        compile reads the disk and rebuilds the graphs)
In one process: medians of --repeats, the three modes taking turns after one untimed round.
With --processes N, also the first compile of a fresh process (N processes per mode; imports,
dynamo's capture and a gc.collect() untimed): what a second training run sees, first-use costs
included. (Without the collect, the full collection that importing torch and capturing leave
pending, ~0.2 s, lands in whichever compile comes first, cold or warm.)

    python benchmarks/disk_cache.py --models mlp,gpt,cnn --repeats 9 --processes 3 --markdown
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import aotgrad
from aotgrad.observe import phases
from aotgrad.persistence import disk_cache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_and_step import MODELS, Capture, capture_graph, make_model  # noqa: E402

MODES = ("off", "cold", "warm")


def compile_once(capture: Capture, cache_dir: str | None) -> tuple[float, str]:
    """Seconds of one aot_module_simplified, and what the disk cache did."""
    from torch._guards import tracing

    aotgrad.config.cache_dir = cache_dir
    with tracing(capture.tracing_context()), phases.watch() as records:
        start = time.perf_counter()
        aotgrad.aot_module_simplified(capture.gm, capture.example_inputs, aotgrad.nop, aotgrad.nop)
        seconds = time.perf_counter() - start
    return seconds, records[0].disk_cache


EXPECTED = {"off": "off", "cold": "stored", "warm": "hit"}


@dataclass
class Result:
    name: str
    description: str
    nodes: str = ""
    entry_kb: float = 0.0
    seconds: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    process_seconds: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})

    def median_ms(self, mode: str, fresh: bool = False) -> float | None:
        values = (self.process_seconds if fresh else self.seconds)[mode]
        return statistics.median(values) * 1e3 if values else None


def time_in_process(capture: Capture, result: Result, repeats: int, work: Path) -> None:
    """Cold, warm and off take turns; round 0 is untimed. Each cold compile gets an empty folder."""
    warm_dir = str(work / "warm")
    compile_once(capture, warm_dir)  # fills the folder warm reads
    [entry] = list(Path(warm_dir).glob("??/*"))
    result.entry_kb = entry.stat().st_size / 1024
    with phases.watch() as records:
        compile_once(capture, None)
    forward, backward = records[0].forward, records[0].backward
    result.nodes = f"{len(forward.graph.nodes)}/{len(backward.graph.nodes) if backward is not None else 0}"
    for repeat in range(repeats + 1):
        for k in range(len(MODES)):
            mode = MODES[(repeat + k) % len(MODES)]
            folder = {"off": None, "cold": str(work / f"cold{repeat}"), "warm": warm_dir}[mode]
            seconds, did = compile_once(capture, folder)
            assert did == EXPECTED[mode], f"{result.name} {mode}: the disk cache says {did!r}"
            if repeat:
                result.seconds[mode].append(seconds)


def time_fresh_processes(name: str, result: Result, processes: int, work: Path) -> None:
    """The first compile of fresh processes: cold ones each with an empty folder, warm ones
    reading a folder a process filled, off ones without a cache."""
    warm_dir = work / "fresh-warm"
    child(name, "cold", warm_dir)  # fills it
    for p in range(processes):
        for k in range(len(MODES)):
            mode = MODES[(p + k) % len(MODES)]
            folder = {"off": None, "cold": work / f"fresh-cold{p}", "warm": warm_dir}[mode]
            result.process_seconds[mode].append(child(name, mode, folder))


def child(name: str, mode: str, folder: Path | None) -> float:
    # the children key their entries with this process's digest of aotgrad's source: an edit
    # to aotgrad while the benchmark runs would otherwise turn a warm child's hit into a miss
    command = [sys.executable, os.path.abspath(__file__), "--child", name, mode, str(folder or ""),
               disk_cache.SOURCE_DIGEST]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def run_child(name: str, mode: str, folder: str, source_digest: str) -> None:
    disk_cache.SOURCE_DIGEST = source_digest
    model, inputs, _ = make_model(name)
    capture = capture_graph(model, inputs)
    gc.collect()  # the full collection the imports and the capture left pending, outside the timing
    seconds, did = compile_once(capture, folder or None)
    assert did == EXPECTED[mode], f"{name} {mode} in a fresh process: the disk cache says {did!r}"
    print(json.dumps({"seconds": seconds}))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.1f}x"


def table(results: list[Result], processes: int) -> tuple[list[str], list[list[str]]]:
    header = ["model", "fw/bw nodes", "entry KB", "off ms", "cold ms", "warm ms", "cold/warm", "off/warm"]
    if processes:
        header += ["fresh process: off ms", "cold ms", "warm ms", "cold/warm"]
    rows = []
    for r in results:
        off, cold, warm = (r.median_ms(m) for m in MODES)
        row = [r.description, r.nodes, f"{r.entry_kb:.0f}", _ms(off), _ms(cold), _ms(warm), _ratio(cold, warm),
               _ratio(off, warm)]
        if processes:
            p_off, p_cold, p_warm = (r.median_ms(m, fresh=True) for m in MODES)
            row += [_ms(p_off), _ms(p_cold), _ms(p_warm), _ratio(p_cold, p_warm)]
        rows.append(row)
    return header, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,gpt,cnn", help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--repeats", type=int, default=9, help="timed compiles per mode in this process")
    parser.add_argument("--processes", type=int, default=0, help="fresh processes per mode (0: none)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "MODE", "FOLDER", "DIGEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        run_child(*args.child)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="aotgrad-disk-cache-bench-") as work:
        for name in args.models.split(","):
            model, inputs, description = make_model(name)
            result = Result(name, description)
            folder = Path(work) / name
            time_in_process(capture_graph(model, inputs), result, args.repeats, folder)
            if args.processes:
                time_fresh_processes(name, result, args.processes, folder)
            results.append(result)
            print(f"{description}: " + ", ".join(f"{m} {_ms(result.median_ms(m))} ms" for m in MODES), flush=True)
    header, rows = table(results, args.processes)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    print(f"\n{command}\ntorch {torch.__version__}, aotgrad {aotgrad.__version__}, {os.cpu_count()} CPUs, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.markdown:
        print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    print(f"\ncounters: {aotgrad.counters['disk_cache']}")


if __name__ == "__main__":
    main()
