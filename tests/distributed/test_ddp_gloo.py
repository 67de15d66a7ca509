"""DDP graph splitting under real DistributedDataParallel: 2 ranks, gloo, CPU.

One pair of processes, started once for this module (`ranks`), runs every scenario in
gloo_workers.py; each test asserts on what rank 0 and rank 1 reported. In every DDP scenario
each rank trains its model twice for 3 SGD steps, through eager DDP and through
torch.compile(DDP(model)), on data of its own, and reports each difference in outputs,
gradients or parameters; the gradients must also agree across the ranks (all-reduced) while
the outputs do not (the data differ). The single-process tests (test_splitting.py) cover the
bucket arithmetic in detail with a DDP stand-in.
"""
import math
from collections import Counter

import pytest

from tests.distributed.gloo_workers import IGNORED, SCENARIOS, read_result, run_ranks

pytestmark = pytest.mark.distributed

LINEAR_BYTES = (512 * 512 + 512) * 4  # one Linear(512, 512): weight and bias


class Reports:
    """Both ranks' reports of each scenario, read from the directory the ranks wrote."""

    def __init__(self, directory, failure: str | None):
        self.directory = directory
        self.failure = failure

    def __call__(self, name: str) -> tuple[dict, dict]:
        reports = []
        for rank in range(2):
            report = read_result(self.directory, name, rank)
            assert report is not None, f"rank {rank} reported nothing for {name}: {self.failure or 'no reason known'}"
            assert "error" not in report, f"{name} failed on rank {rank}:\n{report['error']}"
            reports.append(report)
        return reports[0], reports[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gloo")
    return Reports(directory, run_ranks(directory, list(SCENARIOS), timeout_s=420))


def assert_trained_like_eager_ddp(reports, all_reduced=None) -> None:
    """Compiled equals eager on both ranks; the gradients of `all_reduced` (all by default)
    agree across ranks, whose outputs differ."""
    for rank, report in enumerate(reports):
        assert report["mismatches"] == [], f"rank {rank}: compiled DDP differs from eager DDP"
    r0, r1 = reports
    assert r0["output_sums"] != r1["output_sums"], "the ranks saw the same data: the all-reduce was not tested"
    for name in all_reduced if all_reduced is not None else r0["grad_sums"]:
        g0, g1 = r0["grad_sums"][name], r1["grad_sums"][name]
        assert g0 is not None and math.isclose(g0, g1, rel_tol=1e-5, abs_tol=1e-6), \
            f"{name}: {g0} on rank 0, {g1} on rank 1"


def splits(report) -> list[list[list[str]]]:
    """Per graph aotgrad split, the parameter names of each bucket."""
    return [[bucket["params"] for bucket in graph] for graph in report["history"]]


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_one_piece_per_filled_bucket(ranks, n):
    reports = ranks(f"pieces_{n}")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert splits(report) == [[[f"layers.{i}.weight", f"layers.{i}.bias"] for i in range(n)]]
        assert [b["size"] for b in report["history"][0]] == [LINEAR_BYTES] * n  # 1.002 MiB fills a 1 MiB bucket


def test_no_split_when_everything_fits_one_bucket(ranks):
    reports = ranks("one_bucket")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert [len(graph) for graph in report["history"]] == [1]


def test_ignored_parameters_are_in_no_bucket_and_not_all_reduced(ranks):
    reports = ranks("ignored_parameters")
    managed = [name for name in reports[0]["grad_sums"] if name not in IGNORED]
    assert_trained_like_eager_ddp(reports, all_reduced=managed)
    for report in reports:
        assert report["ddp_ignores"] == sorted(IGNORED)
        assert report["ignored_in_a_bucket"] == []
        assert sorted(name for graph in splits(report) for bucket in graph for name in bucket) == sorted(managed)
    for name in IGNORED:  # each rank keeps its own gradient, in eager DDP as compiled
        assert reports[0]["grad_sums"][name] != reports[1]["grad_sums"][name]


def test_autocast_region_spanning_splits_trains_like_eager_ddp(ranks):
    reports = ranks("contexts_autocast")
    assert_trained_like_eager_ddp(reports)  # (bfloat16: compared at 1e-2)
    for report in reports:
        assert [len(graph) for graph in report["history"]] == [4]  # two cuts inside the autocast region


@pytest.mark.parametrize("kind", ["no_grad", "enable_grad"])
def test_grad_mode_region_with_unused_parameters_trains_like_eager_ddp(ranks, kind):
    """test_splitting.py's Contexts model: the region leaves layers without gradients, so DDP
    needs find_unused_parameters=True, in eager as compiled. (Found with these tests: DDP's
    _DDPSink.apply, called from a frame Dynamo skips, went through aotgrad's Function.apply
    wrapper as a frame Dynamo compiled; the wrapper is now hidden from Dynamo.)"""
    reports = ranks(f"contexts_{kind}")
    managed = [name for name, grad in reports[0]["grad_sums"].items() if grad is not None]
    assert_trained_like_eager_ddp(reports, all_reduced=managed)
    for report in reports:
        assert [len(graph) for graph in report["history"]] == [4]


def test_enable_grad_inside_no_grad_spanning_splits_trains_like_eager_ddp(ranks):
    reports = ranks("grad_mode_enable_grad")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert [len(graph) for graph in report["history"]] == [4]  # cuts inside the region


def test_no_grad_region_spanning_splits_trains_like_eager_ddp(ranks):
    """A piece called under no_grad that turns grad mode back on (found with these tests;
    now its backward is traced and its outputs keep their history)."""
    reports = ranks("grad_mode_no_grad")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert [len(graph) for graph in report["history"]] == [4]


def test_checkpointed_region_stays_in_one_piece(ranks):
    reports = ranks("checkpointed")
    assert_trained_like_eager_ddp(reports)
    block = [f"block.layers.{i}.{p}" for i in range(2) for p in ("weight", "bias")]
    for report in reports:
        assert splits(report) == [[["first.weight", "first.bias"], block, ["last.weight", "last.bias"]]]


def test_model_without_parameters_issue_90375(ranks):
    """DDP refuses a module without parameters, so the seed's model runs inside a DDP
    stand-in on each rank (as PyTorch's test_issue90375 does): one bucket, eager's values."""
    for report in ranks("no_parameters"):
        assert report["ddp_refusal"] == {
            "type": "RuntimeError",
            "message": "DistributedDataParallel is not needed when a module doesn't have any parameter "
                       "that requires a gradient."}
        assert report["output"] == report["expected"] == [0.0, 2.0, 4.0]
        assert report["buckets"] == [1]


def test_layer_norm_and_attention_called_through_forward(ranks):
    reports = ranks("call_method_forward")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        (graph,) = splits(report)
        assert len(graph) >= 2  # split, and never between attention's tuple and its getitem
        assert sorted(name for bucket in graph for name in bucket) == sorted(report["grad_sums"])


def test_bucket_all_reduce_overlaps_the_split_backward(ranks):
    """On the last of 4 steps (DDP's buckets follow the gradients' order from step 2 on),
    the first bucket's all-reduce is launched before the last piece's backward ends. The
    same model compiled whole (aotgrad.config.optimize_ddp = False) is recorded for contrast."""
    for rank, report in enumerate(ranks("overlap")):
        split, whole = report["split"], report["whole"]
        assert split["mismatches"] == [] and whole["mismatches"] == []
        assert [len(graph) for graph in split["history"]] == [4] and whole["history"] == []
        assert split["pieces_timed"] == [0, 1, 2, 3]
        assert split["first_launch_ms"] < split["last_backward_end_ms"], f"rank {rank}: {split['events']}"
        assert whole["events"], "the unsplit timeline was not recorded"


def test_pytorch_splitter_pieces_are_not_split_again(ranks):
    reports = ranks("pytorch_splitter")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert report["pytorch_pieces"] == [3]
        assert report["pieces_from_pytorch_splitter"] == 3
        assert report["history"] == []  # aotgrad split nothing itself


def test_explain_lists_buckets_and_split_points_of_a_real_ddp_module(ranks):
    for report in ranks("explain"):
        assert report["buckets"] == [[f"layers.{i}.weight", f"layers.{i}.bias"] for i in range(3)]
        assert [point for point, _ in report["split_points"]] == ["linear_1", "linear_2"]
        text = report["text"]
        assert "3 bucket(s)" in text
        assert all(f"layers.{i}.weight" in text for i in range(3))
        assert text.count("split before") == 2 and "reached" in text


def test_fsdp_with_original_parameters_trains_like_eager_fsdp(ranks):
    reports = ranks("fsdp")
    for rank, report in enumerate(reports):
        assert report["mismatches"] == [], f"rank {rank}: compiled FSDP differs from eager FSDP"
        assert any(g is not None for g in report["grad_sums"].values())  # each rank holds a shard
    assert reports[0]["output_sums"] != reports[1]["output_sums"]


# Dynamo's own refusal, before any backend runs. Its words changed: up to torch 2.13 Dynamo
# refuses the flat-parameter module by name; 2.14 traces into FSDP's forward and stops in its
# lazy init (`_device_handle.is_available()`, "torch.* op returned non-Tensor").
FLAT_PARAMETERS_REFUSALS = ("FSDP with use_orig_params=False", "torch.* op returned non-Tensor")


def test_fsdp_with_flat_parameters_is_refused_under_fullgraph(ranks):
    for report in ranks("fsdp"):
        error = report["flat_parameters_error"]
        assert error is not None and error["type"] == "Unsupported"
        assert error["message"].startswith(FLAT_PARAMETERS_REFUSALS), error["message"]
        assert "fsdp" in error["message"].lower(), error["message"]  # (2.14: FSDP's code in the trace)


def test_aotgrad_inductor_splits_under_ddp(ranks):
    reports = ranks("inductor")
    assert_trained_like_eager_ddp(reports)  # (compared at 1e-4)
    for report in reports:
        assert splits(report) == [[[f"layers.{i}.weight", f"layers.{i}.bias"] for i in range(2)]]


def test_compiled_autograd_runs_ddp_cpp_reducer_backwards_on_pytorch_engine(ranks):
    """DDP's C++ reducer all-reduces from C++ hooks a compiled backward cannot run: without
    the check (compiled_autograd/reducers.py) each rank kept its own gradients, silently."""
    reports = ranks("compiled_autograd_cpp_reducer")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert report["uses_python_reducer"] is False
        counts = Counter(report["counters"])  # (a name never counted is absent from the JSON: it reads 0)
        assert counts["eager_fallbacks"] == 3 and counts["captures"] == 0


def test_compiled_autograd_captures_ddp_python_reducer_backwards(ranks):
    reports = ranks("compiled_autograd_python_reducer")
    assert_trained_like_eager_ddp(reports)
    for report in reports:
        assert report["uses_python_reducer"] is True
        counts = Counter(report["counters"])
        assert (counts["captures"], counts["hits"], counts["eager_fallbacks"]) == (1, 2, 0)


def test_compiled_autograd_captures_fsdp_backwards_with_their_reduce_scatter(ranks):
    for rank, report in enumerate(ranks("compiled_autograd_fsdp")):
        assert report["mismatches"] == [], f"rank {rank}: FSDP under compiled autograd differs from eager"
        counts = Counter(report["counters"])
        assert (counts["captures"], counts["hits"], counts["eager_fallbacks"]) == (1, 2, 0)


def test_compiled_autograd_compiles_ddp_no_sync_micro_batches(ranks):
    """Gradient accumulation: the no_sync micro-batches (no all-reduce wanted) are captured,
    the synced one runs on PyTorch's engine, whose reducer all-reduces the sum."""
    for rank, report in enumerate(ranks("compiled_autograd_no_sync")):
        assert report["mismatches"] == [], f"rank {rank}: differs from eager DDP"
        counts = Counter(report["counters"])
        assert (counts["captures"], counts["hits"], counts["eager_fallbacks"]) == (1, 3, 2)
