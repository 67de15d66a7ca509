"""Disk cache load: the garbage collector's pauses inside `disk_cache.load`.

The graph torch.compile captures for a GPT (compile_and_step.py's, --blocks blocks) is
compiled once into an empty cache folder; then `disk_cache.load` reads that entry --loads
times in a row, each into a new fake mode, nothing collected in between: the graphs of the
earlier loads become garbage (FX graphs are reference cycles, so only the collector frees
them), as when a process compiles many graphs or the disk cache benchmark repeats warm
compiles. That is done twice, taking turns:
  enabled   the collector as the caller left it (on)
  disabled  the caller turns it off around each call (no collection inside: the lower bound)
Reported per mode: the median and slowest load, the milliseconds the collector ran inside the
loads (gc.callbacks' start and stop events), and how many full collections ran inside them;
and for the whole loop (both modes, and between the loads), the collector's milliseconds and
full collections.

    python benchmarks/disk_cache_gc.py --blocks 4 --loads 60
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch._guards import tracing
from torch._subclasses.fake_tensor import FakeTensorMode

import aotgrad
from aotgrad.persistence import disk_cache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_and_step import GPT, SIZES, capture_graph, make_inputs  # noqa: E402

MODES = ("enabled", "disabled")


class CollectorClock:
    """The collector's runs so far (gc.callbacks): seconds, and how many were full collections."""

    def __init__(self):
        self.seconds, self.full, self._started = 0.0, 0, 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._started
        self.full += info["generation"] == 2


def stored_entry(blocks: int) -> Path:
    """The entry of the GPT's graph, in a new cache folder."""
    aotgrad.config.cache_dir = tempfile.mkdtemp(prefix="aotgrad-gc-")
    torch.manual_seed(0)
    capture = capture_graph(GPT(blocks=blocks), make_inputs("gpt", SIZES["gpt"]))
    with tracing(capture.tracing_context()):
        aotgrad.aot_module_simplified(capture.gm, capture.example_inputs, aotgrad.nop, aotgrad.nop)
    [path] = Path(aotgrad.config.cache_dir).glob("??/*")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--loads", type=int, default=60)
    args = parser.parse_args()
    path = stored_entry(args.blocks)
    key, clock = disk_cache.stored_key(path), CollectorClock()
    gc.callbacks.append(clock)
    seconds = {mode: [] for mode in MODES}
    collector = {mode: [0.0, 0] for mode in MODES}
    loop_seconds, loop_full = clock.seconds, clock.full
    for n in range(args.loads * len(MODES)):
        mode = MODES[n % len(MODES)]
        fake_mode = FakeTensorMode()
        if mode == "disabled":
            gc.disable()
        before, full_before, start = clock.seconds, clock.full, time.perf_counter()
        loaded = disk_cache.load(key, fake_mode)
        seconds[mode].append(time.perf_counter() - start)
        collector[mode][0] += clock.seconds - before
        collector[mode][1] += clock.full - full_before
        gc.enable()
        assert loaded is not None
    loop_seconds, loop_full = clock.seconds - loop_seconds, clock.full - loop_full
    print(f"GPT {args.blocks} blocks, entry {path.stat().st_size / 1024:.0f} KB, {args.loads} loads per mode; "
          f"in the whole loop the collector ran {loop_seconds * 1e3:.0f} ms, {loop_full} full collections")
    for mode in MODES:
        print(f"  collector {mode:<8}: median {statistics.median(seconds[mode]) * 1e3:.1f} ms, slowest "
              f"{max(seconds[mode]) * 1e3:.1f} ms; the collector ran {collector[mode][0] * 1e3:.0f} ms inside "
              f"the loads, {collector[mode][1]} full collections")


if __name__ == "__main__":
    main()
