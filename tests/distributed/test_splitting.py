"""DDP graph splitting in one process: bucket arithmetic, the cut, and each piece compiled.

A stand-in for DDP (`FakeDDP`: a `module`, a `bucket_bytes_cap`, and the DDP module marked
active while its forward runs, as DistributedDataParallel does) lets Dynamo and aotgrad's
backends behave as under real DDP without processes or collectives; the multi-process tests
(test_ddp_gloo.py) check the real thing. Every case compares outputs and gradients with eager."""
import copy
import logging
import threading
from collections import Counter

import pytest
import torch
import torch.nn as nn

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.distributed import DDPOptimizer, ddp as ddp_module, explain
from tests.distributed.models import (LINEAR_BYTES, CallMethodForward, Checkpointed, Contexts, FakeDDP,
                                      GradModeRegions, Layers, MiB)







@pytest.fixture(autouse=True)
def _pytorchs_splitter_off():
    """aotgrad's own splitter runs where PyTorch's is off. aotgrad leaves PyTorch's flag (on by
    default) alone, so these tests turn it off, as a user who wants aotgrad's split does."""
    with torch._dynamo.config.patch(optimize_ddp=False):
        yield


def _grads(model) -> list:
    return [p.grad for p in model.parameters()]


def _close(a, b, tol=1e-5) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=tol, atol=tol)


def run_against_eager(make, x, backend="aotgrad", bucket_cap_mb: float = 1, steps: int = 2, tol=1e-5):
    """Train `make()` eagerly and compiled inside a FakeDDP for a few SGD steps; returns the
    new DDP splits aotgrad made. Outputs, gradients and parameters must agree each step."""
    torch.manual_seed(0)
    eager = make()
    compiled_model = copy.deepcopy(eager)
    fake = FakeDDP(compiled_model, bucket_cap_mb)
    torch._dynamo.reset()
    compiled = torch.compile(fake, backend=backend)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.01)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.01)
    ddp_module.history.clear()
    for step in range(steps):
        opt_e.zero_grad()
        opt_c.zero_grad()
        out_e, out_c = eager(x), compiled(x)
        assert _close(out_e, out_c, tol), f"step {step}: outputs differ"
        out_e.float().pow(2).mean().backward()
        out_c.float().pow(2).mean().backward()
        for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
            assert _close(p.grad, q.grad, tol), f"step {step}: gradient of {name} differs"
        opt_e.step()
        opt_c.step()
    return list(ddp_module.history)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_pieces_follow_the_bucket_arithmetic(n):
    splits = run_against_eager(lambda: Layers(n), torch.randn(8, 512), bucket_cap_mb=1)
    assert len(splits) == 1
    buckets = splits[0].buckets
    assert len(buckets) == n  # each layer's 1.002 MiB fills a 1 MiB bucket
    assert [b.size for b in buckets] == [LINEAR_BYTES] * n
    assert [b.params for b in buckets] == [[f"layers.{i}.weight", f"layers.{i}.bias"] for i in range(n)]


def test_a_larger_cap_groups_layers():
    splits = run_against_eager(lambda: Layers(3), torch.randn(8, 512), bucket_cap_mb=1.5)
    assert [len(b.params) for b in splits[0].buckets] == [2, 4]  # the last two layers fill the first bucket


def test_no_split_when_everything_fits_one_bucket():
    splits = run_against_eager(lambda: Layers(3), torch.randn(8, 512), bucket_cap_mb=250)
    assert len(splits[0].buckets) == 1
    assert aotgrad.counters["ddp"]["pieces_from_pytorch_splitter"] == 0


def test_splitting_off_compiles_the_whole_graph(monkeypatch):
    monkeypatch.setattr(aotgrad.config, "optimize_ddp", False)
    assert run_against_eager(lambda: Layers(3), torch.randn(8, 512)) == []


class Tied(nn.Module):
    """A parameter used twice: counted once, in the bucket of its first use."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(512, 512)
        self.b = nn.Linear(512, 512)

    def forward(self, x):
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x))
        return x @ self.a.weight


def test_a_parameter_used_twice_counts_once_where_its_gradient_completes():
    splits = run_against_eager(Tied, torch.randn(8, 512), bucket_cap_mb=1)
    buckets = splits[0].buckets
    names = [name for b in buckets for name in b.params]
    assert sorted(names) == sorted(["a.weight", "a.bias", "b.weight", "b.bias"])
    assert "a.weight" in buckets[0].params  # its gradient is complete only after the first use's backward


def test_ignored_parameters_are_in_no_bucket():
    torch.manual_seed(0)
    model = Layers(3)
    fake = FakeDDP(model, bucket_cap_mb=1)
    fake.parameters_to_ignore = {"layers.1.weight", "layers.2.bias"}
    ignored = {id(model.layers[1].weight), id(model.layers[2].bias)}
    torch._dynamo.reset()
    compiled = torch.compile(fake, backend="aotgrad")
    compiled(torch.randn(4, 512)).sum().backward()
    buckets = ddp_module.history[-1].buckets
    assert not ignored & {i for b in buckets for i in b.param_ids}
    assert sum(len(b.params) for b in buckets) == 4


def test_ddp_optimizer_used_directly_with_its_own_backend():
    torch.manual_seed(0)
    model = Layers(4)
    expected_out = model(torch.ones(2, 512))
    compiled_pieces = []

    def backend(gm, example_inputs):
        compiled_pieces.append(len(example_inputs))
        return aotgrad.backends.aotgrad_backend(gm, example_inputs)

    opt = DDPOptimizer(bucket_bytes_cap=2 * MiB, backend_compile_fn=backend, first_bucket_cap=MiB)
    torch._dynamo.reset()
    out = torch.compile(model, backend=opt.compile_fn)(torch.ones(2, 512))
    assert torch.allclose(out, expected_out)
    # first bucket: the last layer (1 MiB cap); then 2 MiB buckets: layers 1-2, then layer 0
    assert [len(b.params) for b in opt.buckets] == [2, 4, 2]
    assert opt.buckets[1].params == ["layers.1.weight", "layers.1.bias", "layers.2.weight", "layers.2.bias"]
    assert len(compiled_pieces) == 3




@pytest.mark.parametrize("kind", ["autocast", "no_grad", "enable_grad"])
def test_context_managers_keep_their_effect_in_every_piece(kind):
    splits = run_against_eager(lambda: Contexts(kind), torch.randn(8, 512), bucket_cap_mb=1,
                               tol=1e-2 if kind == "autocast" else 1e-5)
    assert len(splits[0].buckets) == 4  # cuts inside the region: the region's state is set again in each piece




@pytest.mark.parametrize("kind", ["no_grad", "enable_grad"])
def test_pieces_called_under_no_grad_that_turn_it_back_on_keep_their_gradients(kind):
    splits = run_against_eager(lambda: GradModeRegions(kind), torch.randn(8, 512), bucket_cap_mb=1)
    assert len(splits[0].buckets) == 4




def test_a_checkpointed_region_stays_in_one_piece():
    splits = run_against_eager(Checkpointed, torch.randn(8, 512), bucket_cap_mb=1)
    buckets = splits[0].buckets
    assert len(buckets) == 3  # first | the checkpointed block (2 layers, one node) | last
    assert len(buckets[1].params) == 4


def test_model_without_parameters_issue_90375():
    class Model(nn.Module):
        def forward(self):
            return torch.ones(3) * torch.full((3,), 2.0)

    torch._dynamo.reset()
    out = torch.compile(FakeDDP(Model()), backend="aotgrad")()
    assert torch.equal(out, torch.full((3,), 2.0))
    assert len(ddp_module.history[-1].buckets) == 1




def test_layer_norm_and_attention_called_through_forward():
    splits = run_against_eager(CallMethodForward, torch.randn(2, 5, 10, 96), bucket_cap_mb=0.05, tol=1e-4)
    assert len(splits[0].buckets) >= 2  # split, and never between attention's tuple and its getitem


class SymbolSplitting(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight1 = nn.Parameter(torch.randn(512, 512))
        self.weight2 = nn.Parameter(torch.randn(512, 512))

    def forward(self, x):
        x = torch.cat([x, x])
        y = x @ self.weight1
        return x + y @ self.weight2


def test_dynamic_sizes_across_pieces():
    torch.manual_seed(0)
    model = SymbolSplitting()
    torch._dynamo.reset()
    compiled = torch.compile(FakeDDP(model, bucket_cap_mb=1), backend="aotgrad", dynamic=True)
    for batch in (20, 7):
        x = torch.randn(batch, 512)
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-3)
    assert len(ddp_module.history[-1].buckets) == 2


def test_pytorch_splitter_pieces_are_not_split_again(caplog):
    """PyTorch's default (its flag on): its splitter cuts, aotgrad compiles each piece whole."""
    # (config.patch, not monkeypatch: pytest >= 9.2 undoes a module attribute with delattr,
    # which hides a torch config entry for good)
    before = Counter(aotgrad.counters["ddp"])
    with torch._dynamo.config.patch(optimize_ddp=True), caplog.at_level(logging.INFO, logger="aotgrad.distributed"):
        ddp_module._warned = False
        splits = run_against_eager(lambda: Layers(3), torch.randn(8, 512), bucket_cap_mb=1)
    assert splits == []  # aotgrad split nothing itself
    assert aotgrad.counters["ddp"]["pieces_from_pytorch_splitter"] - before["pieces_from_pytorch_splitter"] == 3
    assert aotgrad.counters["ddp"]["pieces"] == before["pieces"]
    said = [r.getMessage() for r in caplog.records if "PyTorch's DDP graph splitter" in r.getMessage()]
    assert len(said) == 1 and "torch._dynamo.config.optimize_ddp = False" in said[0]


def test_pytorchs_flag_is_left_as_it_was():
    """Neither importing aotgrad nor compiling with its backends under DDP writes PyTorch's flag
    (tests/test_independence.py checks the import in a fresh process)."""
    for value in (True, False):
        with torch._dynamo.config.patch(optimize_ddp=value):
            run_against_eager(lambda: Layers(2), torch.randn(8, 512), bucket_cap_mb=1, steps=1)
            assert torch._dynamo.config.optimize_ddp is value


def test_explain_names_buckets_and_split_reasons():
    torch.manual_seed(0)
    report = explain(FakeDDP(Layers(3), bucket_cap_mb=1), torch.randn(4, 512))
    assert len(report.graphs) == 1 and len(report.buckets) == 3
    text = str(report)
    assert "3 bucket(s)" in text and "layers.2.weight" in text
    assert len(report.split_points) == 2
    assert all("reached" in reason and "cap" in reason for _, reason in report.split_points)


def test_explain_rejects_a_model_that_is_not_ddp():
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        explain(Layers(1), torch.randn(2, 512))


def test_compiled_backwards_overlapping_on_two_threads():
    """Two threads' compiled backwards (`torch.compile(gm, fullgraph=True, dynamic=True)`, as
    tests/compiled_autograd's eight-thread test compiles them), overlapping: A's call starts,
    B's starts, A's returns, B's returns. On torch 2.11 each call's process-wide changes are put
    back by the thread that returns last to what it found, A's: Dynamo's eval-frame override is
    left at SKIP (fullgraph: no frame that compiled code calls is compiled any more, so no graph
    after FakeDDP's graph break, no split) and torch._dynamo.config.assume_static_by_default at
    False (dynamic: every later compile dynamic). tests/conftest.py puts both back after every
    test; the next test checks."""
    inside = {name: threading.Event() for name in ("overlap-A", "overlap-B")}
    go = {name: threading.Event() for name in inside}

    def blocking_backend(gm, example_inputs):
        def run(*args):  # runs inside the compiled call, outside Dynamo's compile lock
            name = threading.current_thread().name
            if name in inside:
                inside[name].set()
                assert go[name].wait(60)
            return gm(*args)
        return run

    def compiler(gm):
        return torch.compile(gm, backend=blocking_backend, fullgraph=True, dynamic=True)

    x = torch.randn(4, requires_grad=True)

    def backward():
        with compiled_autograd.enable(compiler):
            (x * 2).sum().backward()

    compiled_autograd.reset()
    torch._dynamo.reset()
    try:
        backward()  # captured and compiled here: the threads' backwards hit the cache
        threads = {name: threading.Thread(target=backward, name=name) for name in inside}
        for name, thread in threads.items():  # A inside its call, then B inside its own
            thread.start()
            assert inside[name].wait(60)
        for name, thread in threads.items():  # A returns first, then B
            go[name].set()
            thread.join(60)
    finally:
        for event in go.values():
            event.set()
        compiled_autograd.reset()
        torch._dynamo.reset()
    assert torch.equal(x.grad, torch.full((4,), 6.0))


def test_a_split_after_compiled_backwards_overlapping_on_two_threads():
    """Right after the test above (in this order): compiles are static by default still, and
    Dynamo still compiles the code after FakeDDP's graph break, which aotgrad splits."""
    assert torch._dynamo.config.assume_static_by_default
    splits = run_against_eager(lambda: Layers(3), torch.randn(8, 512), bucket_cap_mb=1.5)
    assert [len(b.params) for b in splits[0].buckets] == [2, 4]
