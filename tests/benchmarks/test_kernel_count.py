"""benchmarks/kernel_count.py reads the kernels of each graph from Inductor's output code."""
from __future__ import annotations

import importlib
from pathlib import Path

import torch


def _kernel_count(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "benchmarks"))
    return importlib.import_module("kernel_count")


_OUTPUT_CODE = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['float*'], r"""...""")
cpp_fused_mul_sum_1 = async_compile.cpp_pybinding(['float*'], r"""...""")
triton_poi_fused_relu_2 = async_compile.triton('triton_poi_fused_relu_2', """...""")
not_a_kernel = async_compile.wait(globals())
def call(args):
    pass
'''


def test_kernels_are_read_per_graph_from_output_code_largest_first(monkeypatch, tmp_path):
    kernel_count = _kernel_count(monkeypatch)
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "cab.py").write_text(_OUTPUT_CODE)
    (tmp_path / "cd.py").write_text("cpp_fused_neg_0 = async_compile.cpp_pybinding([], '')\ndef call(args): pass\n")
    (tmp_path / "kernel.py").write_text("cpp_fused_x = async_compile.cpp_pybinding([], '')\n")  # no call: no graph
    assert kernel_count.kernels_by_graph(str(tmp_path)) == [
        ["cpp_fused_add_0", "cpp_fused_mul_sum_1", "triton_poi_fused_relu_2"], ["cpp_fused_neg_0"]]


def test_an_inductor_compile_writes_the_kernels_counted(monkeypatch, tmp_path):
    from torch._inductor.utils import fresh_cache

    kernel_count = _kernel_count(monkeypatch)
    with fresh_cache(dir=str(tmp_path)):  # (its folder is gone at the end)
        torch._dynamo.reset()
        torch.compile(lambda x: (x.sin() + 1).sum(0) * x.cos().amax(), backend="inductor")(torch.randn(8, 8))
        torch._dynamo.reset()
        graphs = kernel_count.kernels_by_graph(str(tmp_path))
    assert len(graphs) == 1 and len(graphs[0]) >= 1, graphs
    assert all(name.startswith("cpp_fused_") for name in graphs[0]), graphs


def test_first_steps_take_turns_and_keep_each_backends_first_kernels(monkeypatch):
    kernel_count = _kernel_count(monkeypatch)
    calls = []

    def measure(model, backend):
        calls.append(backend)
        return float(len(calls)), [[f"{backend}_{len(calls)}"]]
    monkeypatch.setattr(kernel_count, "measure", measure)
    seconds, graphs = kernel_count.first_steps("phi", 3)
    assert calls == ["inductor", "aotgrad_inductor", "aotgrad_inductor", "inductor", "inductor", "aotgrad_inductor"]
    assert seconds == {"inductor": [1.0, 4.0, 5.0], "aotgrad_inductor": [2.0, 3.0, 6.0]}
    assert graphs == {"inductor": [["inductor_1"]], "aotgrad_inductor": [["aotgrad_inductor_2"]]}
    assert kernel_count._seconds([3.0, 1.0, 2.0]) == "2.0 s (1.0-3.0)"
