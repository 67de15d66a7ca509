"""aotgrad.partition.report (partition/inspection.py): what a partition saves and recomputes; its debug log."""
import logging

import torch

import aotgrad
from aotgrad.partition.inspection import report


def _partition_with_report(partitioner, f, *args):
    got = {}

    def partition(gm, inputs, num_fwd_outputs):
        fw, bw = partitioner(gm, inputs, num_fwd_outputs=num_fwd_outputs)
        got["report"] = report(fw, bw)
        return fw, bw

    out = aotgrad.aot_function(f, aotgrad.nop, partition_fn=partition)(*args)
    return got["report"], out


def f(x, w):
    y = x.sin()
    return (y @ w.t()).cos().sum()


def _args():
    return torch.randn(32, 64, requires_grad=True), torch.randn(16, 64, requires_grad=True)


def test_default_partition_report_lists_saved_values_with_ops_and_lines():
    r, _ = _partition_with_report(aotgrad.default_partition, f, *_args())
    by_name = {s.name: s for s in r.saved}
    assert by_name["sin"].bytes == 32 * 64 * 4
    assert by_name["sin"].made_by == "aten.sin.default"
    assert "y = x.sin()" in by_name["sin"].source
    assert by_name["mm"].bytes == 32 * 16 * 4
    assert by_name["mm"].shape == (32, 16) and by_name["mm"].dtype == torch.float32
    assert by_name["primals_1"].made_by == "input" and by_name["primals_1"].bytes == 0
    assert by_name["t"].bytes == 0  # a view of an input: free
    assert r.saved_bytes == (32 * 64 + 32 * 16) * 4
    assert r.recomputed == []
    text = str(r)
    assert "saved for backward: 4 values, 10.0 KiB (1 view, free)" in text
    assert "recomputed in backward: 0 ops" in text


def g(x, w):
    y = (x @ w.t()).sin()
    return y.cos().sum()


def test_min_cut_report_lists_recomputed_ops():
    r, _ = _partition_with_report(aotgrad.min_cut_rematerialization_partition, g, *_args())
    recomputed = {op.name: op for op in r.recomputed}
    assert "sin" in recomputed and recomputed["sin"].op == "aten.sin.default"
    assert "y = (x @ w.t()).sin()" in recomputed["sin"].source
    assert "sin" not in {s.name for s in r.saved}
    assert r.saved_bytes == 32 * 16 * 4  # only the matmul's result; inputs are free
    assert "recomputed in backward: " in str(r) and "aten.sin.default" in str(r)


def test_report_is_logged_at_debug_level(caplog):
    with caplog.at_level(logging.DEBUG, logger="aotgrad"):
        aotgrad.aot_function(f, aotgrad.nop)(*_args())
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "partition:" in text and "saved for backward" in text and "aten.sin.default" in text


def test_report_is_exported_from_aotgrad_partition():
    assert aotgrad.partition.report is report
