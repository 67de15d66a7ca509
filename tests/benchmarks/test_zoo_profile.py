"""benchmarks/zoo_profile.py's per-step counters, on a profile of known calls (no model, no
compile): aten calls, host-device synchronisations (`.item()` here) and their per-step means."""
from __future__ import annotations

import importlib
from pathlib import Path

import torch


def _zoo_profile(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    return importlib.import_module("zoo_profile")


def test_counters_are_per_step_and_count_the_syncs(monkeypatch):
    zoo_profile = _zoo_profile(monkeypatch)
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(2):  # two "steps": 3 mm, 1 item each
            (x @ x @ x @ x).sum().item()
    facts = zoo_profile.summarize(prof.key_averages(), steps=2, device="cpu")
    assert facts["calls"]["aten::mm"] == 3
    assert facts["syncs"] >= 1  # aten::item, and its aten::_local_scalar_dense
    assert facts["syncs"] == facts["calls"]["aten::item"] + facts["calls"]["aten::_local_scalar_dense"]
    assert facts["copies"] == 0 and facts["kernels"] == 0
    assert facts["aten calls"] >= 5
    assert facts["top host"] and facts["top device"] == []


def _a_step_of_known_calls(calls: list[int]) -> None:
    calls.append(1)


def test_python_profile_lists_the_steps_functions_with_their_call_counts(monkeypatch):
    zoo_profile = _zoo_profile(monkeypatch)
    calls: list[int] = []
    text = zoo_profile._python_profile(lambda: _a_step_of_known_calls(calls), steps=3, device="cpu", top=50)
    assert len(calls) == 3  # the step ran `steps` times, under the profiler
    line = next(line for line in text.splitlines() if "_a_step_of_known_calls" in line)
    assert line.split()[0] == "3"  # its call count, as pstats prints it
