"""benchmarks/fuzz.py on a tiny budget: a worker process, aotgrad and PyTorch side by side,
counts that add up, and no aotgrad mismatch (the 20,000-program campaign's bar, in small)."""
from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import torch

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "fuzz.py"


def _load_benchmark():
    spec = importlib.util.spec_from_file_location("benchmarks_fuzz", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_small_campaign_with_pytorch_counts_add_up_and_aotgrad_matches_eager():
    fuzz = _load_benchmark()
    log = io.StringIO()
    summary = fuzz.run_campaign(5, seed=0, jobs=1, pytorch=True, max_statements=6, shrink_limit=0, progress_every=5,
                                 log=log)
    c = summary["counts"]
    assert c["programs run"] == 5, summary["chunks"]
    assert c["aotgrad mismatches"] == 0, summary["aotgrad_failures"]
    assert c["harness errors"] == 0, summary["harness_errors"]
    assert (c["discarded (eager rejects)"] + c["passed"] + c["aotgrad clear errors"] + c["aotgrad known bugs"]
            == c["programs run"])
    accepted = c["programs run"] - c["discarded (eager rejects)"]
    assert accepted > 0
    assert set(summary["pytorch"]) == {"pytorch_default", "pytorch_min_cut", "aot_eager"}
    for backend, verdicts in summary["pytorch"].items():
        assert sum(verdicts.values()) == accepted, (backend, verdicts)
    assert sum(n for row in summary["side_by_side"].values() for n in row.values()) == accepted
    assert c["PyTorch silently wrong"] == len(summary["pytorch_silent"])
    assert "[fuzz] 5/5 programs" in log.getvalue()
    assert "| programs run | discarded (eager rejects) | passed |" in fuzz.markdown(summary)


def test_pytorch_returning_one_output_twice_as_two_tensors_is_silently_wrong():
    from tests.fuzz.pytorch_oracle import check_pytorch

    def f(a):
        v0 = a.unfold(-1, 1, 1)
        return (v0, v0)

    def make_inputs():
        torch.manual_seed(0)
        l0 = torch.randn(())
        return [l0], [l0]

    verdicts = {v.backend: (v.kind, v.what) for v in check_pytorch(f, make_inputs)}
    assert verdicts == {"pytorch_default": ("silent", "identity"), "pytorch_min_cut": ("silent", "identity"),
                        "aot_eager": ("right", "")}
