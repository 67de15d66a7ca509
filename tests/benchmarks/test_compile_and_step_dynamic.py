"""benchmarks/compile_and_step.py --dynamic on a tiny budget: the MLP through eager, aot_eager and
aotgrad with torch.compile(dynamic=True); one graph for its five batch sizes, every size's loss,
grads and buffers equal to eager's, and the markdown tables."""
from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest
import torch


@pytest.fixture
def bench(monkeypatch):
    """benchmarks/compile_and_step.py as a module (benchmarks/ is not a package)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    return importlib.import_module("compile_and_step")


def test_dynamic_mlp_compiles_one_graph_for_five_sizes_and_matches_eager(bench, capsys):
    args = argparse.Namespace(dynamic=True, iters=2, rounds=2, warmup=1, compile_repeats=1, fresh_fake_mode=False)
    benchmark = bench.benchmark_model("mlp", ["eager", "aot_eager", "aotgrad"], args)

    assert len(benchmark.sizes) == 5 and min(bench.DYNAMIC_SIZES["mlp"]) > 1
    assert benchmark.symbolic_inputs and all("64" in name for name in benchmark.symbolic_inputs[1:])
    for config in ("aot_eager", "aotgrad"):
        result = benchmark.results[config]
        assert result.error is None, (config, result.error)
        assert result.compiles == 1, (config, result.compiles)
        assert result.loss_matches and result.state_matches, config
        assert result.aot_compile_s > 0
        assert [len(seconds) for seconds in result.step_s] == [2] * 5  # 2 rounds of 1 step at each size
        assert result.step_median_s == sum(result.step_medians_s(5))
    assert benchmark.results["eager"].compiles is None

    bench.print_markdown([benchmark], "python benchmarks/compile_and_step.py --dynamic")
    markdown = capsys.readouterr().out
    assert "```bash\npython benchmarks/compile_and_step.py --dynamic\n```" in markdown
    assert "| config | aot compile ms | first call ms | compiles | step ms, batch 32 | step ms, batch 16 |" in markdown
    assert "| model | aotgrad/aot_eager compile | aotgrad/aot_eager step |" in markdown
    assert "recompiled" not in markdown and "failed" not in markdown


def test_dynamic_capture_is_symbolic(bench):
    model, inputs, _ = bench.make_model("mlp")
    capture = bench.capture_graph(model, inputs, dynamic=True)
    assert any(isinstance(v, torch.SymInt) for v in capture.example_inputs)
    assert capture.symbolic_contexts is not None and capture.fake_mode is capture.tracing_context().fake_mode
    model, inputs, _ = bench.make_model("mlp")  # new tensors: dynamo remembers those it traced dynamic
    assert bench.capture_graph(model, inputs).symbolic_inputs() == []  # static by default
