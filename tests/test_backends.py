"""torch.compile(backend="aotgrad" / "aotgrad_inductor") on small models, against eager:
outputs (values and strides), parameter gradients, BatchNorm running statistics.

Inductor compiles are slow on a 2-core machine, so the models are tiny and each test
runs two training steps (the second one uses the cached compiled graphs)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch._inductor.decomposition import select_decomp_table

import aotgrad  # noqa: F401  (registers the backends)
from aotgrad import backends
from aotgrad.backends import InductorCompilers
from tests.threads import at_once

BACKENDS = ["aotgrad", "aotgrad_inductor"]


class ConvNet(nn.Module):
    """Two conv-bn-relu blocks; returns the logits, the second convolution's output (a
    layout Inductor likes to make channels-last) and a view of it (rebuilt by the epilogue)."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.conv = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, images):
        features = self.conv(self.block(images))
        pooled = F.relu(self.norm(features)).mean((2, 3))
        return self.head(pooled), features, features[:, :4]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x, target):
        return F.mse_loss(self.net(x), target)


def _loss(outputs) -> torch.Tensor:
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return sum((i + 1) * o.sum() for i, o in enumerate(outputs))


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """Equal up to `tol` relative to each element and to the tensor's largest value: a
    BatchNorm gradient is a sum of many terms that mostly cancel, so its small elements
    carry the rounding error of its large ones."""
    scale = expected.abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * max(scale, 1.0),
                               msg=lambda m: f"{what}: {m}")
    assert actual.stride() == expected.stride(), (what, actual.stride(), expected.stride())


def assert_training_matches_eager(model: nn.Module, inputs, backend: str, *, steps: int = 2,
                                  tol: float = 1e-5, buffers: bool = True) -> None:
    """`steps` forward + backward steps compiled and eager, grads accumulating; compare
    every step's outputs (values and strides), then grads and (if `buffers`) buffers."""
    eager, twin = copy.deepcopy(model), copy.deepcopy(model)
    compiled = torch.compile(twin, backend=backend)
    for _ in range(steps):
        expected, actual = eager(*inputs), compiled(*inputs)
        for e, a in zip(expected if isinstance(expected, tuple) else (expected,),
                        actual if isinstance(actual, tuple) else (actual,)):
            assert_close_to_scale(a, e, tol, "output")
        _loss(expected).backward()
        _loss(actual).backward()
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        assert_close_to_scale(q.grad, p.grad, tol, f"{name}.grad")
    for (name, b), c in zip(eager.named_buffers(), twin.buffers()):
        if buffers:
            assert_close_to_scale(c, b, tol, name)


def _conv_inputs():
    torch.manual_seed(0)
    return ConvNet(), (torch.randn(4, 3, 16, 16),)


def _mlp_inputs():
    torch.manual_seed(0)
    return MLP(), (torch.randn(8, 16), torch.randn(8, 8))


@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_training_matches_eager(backend):
    model, inputs = _mlp_inputs()
    assert_training_matches_eager(model, inputs, backend)


def test_aotgrad_conv_net_training_matches_eager():
    model, inputs = _conv_inputs()
    assert_training_matches_eager(model, inputs, "aotgrad")


def test_aotgrad_inductor_conv_net_with_channels_last_activations_matches_eager():
    # Forced layout optimisation: Inductor keeps conv activations channels-last, so the
    # saved values reach the backward in another layout than the trace gave them (the
    # backward's stride checks failed before it was compiled for the real layout), and
    # the user's outputs must still come back in eager's strides.
    # Tolerance: Inductor's fused BatchNorm reductions round differently from eager;
    # backend="inductor" differs from eager by 2e-5 of the largest gradient here.
    # Buffers: see test_aotgrad_inductor_batch_norm_updates_running_stats.
    model, inputs = _conv_inputs()
    with torch._inductor.config.patch(force_layout_optimization=True):
        assert_training_matches_eager(model, inputs, "aotgrad_inductor", tol=1e-4)


def test_aotgrad_inductor_batch_norm_updates_running_stats():
    # Inductor's decomposition writes the running stats with copy_ below the autograd key
    # (no version bump): the tracer counts writes inside decompositions as hidden writes
    torch.manual_seed(0)
    model = nn.Sequential(nn.BatchNorm2d(4))
    assert_training_matches_eager(model, (torch.randn(2, 4, 3, 3),), "aotgrad_inductor", steps=1, tol=1e-4)


def _recording_in_graph_writes(monkeypatch) -> list:
    """The slots each aotgrad_inductor forward compile wrote into its inputs inside the graph."""
    from aotgrad import backends

    written, writes = [], backends._in_graph_writes
    monkeypatch.setattr(backends, "_in_graph_writes", lambda gm: written.append(writes(gm)) or written[-1])
    return written


def _versions(module: nn.Module) -> dict:
    return {name: b._version for name, b in module.named_buffers()}


def _assert_buffers_as_eagers(twin: nn.Module, eager: nn.Module) -> None:
    """Every buffer's version counter and value (to 1e-4 of its scale) as eager's."""
    assert _versions(twin) == _versions(eager)
    for (name, b), c in zip(eager.named_buffers(), twin.buffers()):
        assert_close_to_scale(c, b, 1e-4, name)


def test_batch_norm_statistics_are_written_inside_inductors_graph_with_eagers_versions(monkeypatch):
    """Three BatchNorms' running mean, variance and count (9 hidden write-backs): Inductor's
    forward writes each into the buffer itself (a `copy_` into the input, as under PyTorch's
    AOTAutograd) instead of returning it for the epilogue to copy; values and version counters
    after two steps as eager's (the count's version bumps, the mean's and variance's do not)."""
    written = _recording_in_graph_writes(monkeypatch)
    model, inputs = _conv_inputs()
    model.extra = nn.BatchNorm2d(3)
    model.forward = lambda images, m=model, f=model.forward: f(m.extra(images))
    eager, twin = copy.deepcopy(model), copy.deepcopy(model)
    compiled = torch.compile(twin, backend="aotgrad_inductor")
    for _ in range(2):
        _loss(eager(*inputs)).backward()
        _loss(compiled(*inputs)).backward()
    assert [len(w) for w in written] == [9], written
    _assert_buffers_as_eagers(twin, eager)


def test_an_input_written_inside_the_graph_is_read_before_the_write():
    """`y = x * (buf + 0)`, then `buf += 1` under no_grad: the backward needs the old `buf`
    (saved as a copy, made before the in-graph write); grads, buf and its version as eager's,
    also with the output returning a view of buf (the epilogue's general path, not the
    generated straight one)."""
    def step(x, buf):
        y = x * (buf + 0)
        with torch.no_grad():
            buf.add_(1)
        return (y * y).sum(), buf[:2]

    x, buf = torch.randn(4, requires_grad=True), torch.randn(4)
    x2, buf2 = x.detach().clone().requires_grad_(), buf.clone()
    loss, view = step(x, buf)
    loss.backward()
    loss2, view2 = torch.compile(step, backend="aotgrad_inductor")(x2, buf2)
    loss2.backward()
    torch.testing.assert_close(x2.grad, x.grad)
    assert torch.equal(buf2, buf) and buf2._version == buf._version
    assert torch.equal(view2, view) and view2._base is buf2


def test_batch_norm_under_no_grad_writes_its_statistics_inside_the_graph(monkeypatch):
    """A BatchNorm in training mode called under no_grad (the inference runtime): its
    statistics are written inside Inductor's graph too, as eager's."""
    written = _recording_in_graph_writes(monkeypatch)
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    twin = copy.deepcopy(eager)
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        expected, actual = eager(x), torch.compile(twin, backend="aotgrad_inductor")(x)
    assert [len(w) for w in written] == [3], written
    assert_close_to_scale(actual, expected, 1e-4, "output")
    _assert_buffers_as_eagers(twin, eager)


def test_under_cuda_graphs_the_epilogue_writes_the_statistics(monkeypatch):
    """With `triton.cudagraphs` on, Inductor does not record a graph that writes an input it
    copies in: the statistics stay the epilogue's to write (values and versions as eager's)."""
    written = _recording_in_graph_writes(monkeypatch)
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="aotgrad_inductor", options={"triton.cudagraphs": True})
    x = torch.randn(2, 3, 6, 6)
    eager(x).sum().backward()
    compiled(x).sum().backward()
    assert written == []
    _assert_buffers_as_eagers(twin, eager)


def test_backward_is_compiled_for_the_saved_layout_the_forward_returns():
    # The forward's compile records each saved value's real strides; the backward's
    # placeholder for that value is compiled with them (at the first backward).
    model, (images,) = _conv_inputs()
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, example_inputs))
        return gm.forward

    torch.compile(model, backend=capture)(images)
    gm, example_inputs = graphs[0]
    compilers = InductorCompilers()
    with torch._inductor.config.patch(force_layout_optimization=True):
        run = aotgrad.aot_module_simplified(
            gm, example_inputs, fw_compiler=compilers.forward, bw_compiler=compilers.backward,
            partition_fn=aotgrad.min_cut_rematerialization_partition, decompositions=select_decomp_table())
        sum(out.sum() for out in run(*example_inputs)).backward()  # (every output: the whole backward)
    _, bw_gm = run.compiled.last_graphs
    saved = bw_gm.graph.find_nodes(op="placeholder")[: bw_gm.meta["num_saved"]]
    channels_last = [n.name for n in saved if n.meta["val"].dim() == 4
                     and n.meta["val"].is_contiguous(memory_format=torch.channels_last)
                     and not n.meta["val"].is_contiguous()]
    assert channels_last, [(n.name, n.meta["val"].stride()) for n in saved]


def test_a_variant_then_the_whole_backward_both_read_the_saved_layout_the_forward_returns():
    # The backward is compiled at its first call: here a variant (one output's gradient) comes
    # first, then the whole backward. Each must be compiled for the strides Inductor gave the
    # saved values (channels-last), or its input checks fail.
    model, (images,) = _conv_inputs()
    compiled = torch.compile(copy.deepcopy(model), backend="aotgrad_inductor")
    for pick in ((0,), (0, 1, 2)):
        with torch._inductor.config.patch(force_layout_optimization=True):
            outputs = compiled(images)
        sum(outputs[i].sum() for i in pick).backward()
        eager = model(images)
        sum(eager[i].sum() for i in pick).backward()
        for got, expected in zip(compiled.parameters(), model.parameters()):
            torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-4)
            got.grad = expected.grad = None
    torch._dynamo.reset()


def test_aotgrad_inductor_dropout_backward_uses_the_forward_mask():
    # Inductor lowers random ops only after its replace_random rewrite (PyTorch runs it on the
    # joint graph); without it every dropout under aotgrad_inductor failed to compile. Inductor
    # draws its own numbers, so the oracle is eager given the mask the compiled forward drew.
    torch._dynamo.reset()
    torch.manual_seed(0)
    w = torch.rand(256, requires_grad=True)
    x = torch.rand(8, 256) + 0.1  # sin(x * (w + 0.5)) > 0: a zero output is a dropped one

    def forward(x, w):
        return F.dropout(torch.sin(x * (w + 0.5)), p=0.5, training=True) * 3

    out = torch.compile(forward, backend="aotgrad_inductor", fullgraph=True)(x, w)
    out.sum().backward()
    mask = (out != 0).float()
    assert 0.3 < mask.mean().item() < 0.7, mask.mean()
    w_eager = w.detach().clone().requires_grad_()
    expected = torch.sin(x * (w_eager + 0.5)) * mask * 2.0 * 3
    expected.sum().backward()
    torch._dynamo.reset()
    torch.testing.assert_close(out.detach(), expected.detach())
    torch.testing.assert_close(w.grad, w_eager.grad)


# -- which partitioner each backend uses (issue 5, part 5) --------------------

def test_partitioner_defaults_and_budget_selects_min_cut(monkeypatch):
    from aotgrad import backends, config
    from aotgrad.partition import default_partition, min_cut_rematerialization_partition

    assert backends._partitioner("default") is default_partition
    assert backends._partitioner("min_cut") is min_cut_rematerialization_partition  # aotgrad_inductor's
    monkeypatch.setattr(config, "partitioner", "min_cut")
    assert backends._partitioner("default") is min_cut_rematerialization_partition
    monkeypatch.setattr(config, "partitioner", "default")
    monkeypatch.setattr(config, "activation_memory_budget", 0.5)
    assert backends._partitioner("default") is min_cut_rematerialization_partition
    monkeypatch.setattr(config, "activation_memory_budget", 1.0)
    monkeypatch.setattr(config, "activation_memory_budget_bytes", 1 << 20)
    assert backends._partitioner("default") is min_cut_rematerialization_partition


def test_aotgrad_backend_with_a_memory_budget_matches_eager(monkeypatch):
    from aotgrad import config

    monkeypatch.setattr(config, "activation_memory_budget", 0.25)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    x = torch.randn(4, 16)
    expected = model(x).sum()
    expected.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch._dynamo.reset()
    actual = torch.compile(model, backend="aotgrad")(x).sum()
    actual.backward()
    torch._dynamo.reset()
    torch.testing.assert_close(actual, expected)
    for p, g in zip(model.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_first_calls_of_a_compiled_model_from_eight_threads_at_once_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    params = list(model.parameters())
    xs = [torch.randn(5, 8, requires_grad=True) for _ in range(8)]

    def step(f, x):  # autograd.grad: the threads' parameter gradients stay apart
        out = f(x)
        return out.detach(), torch.autograd.grad((out * out).sum(), [x, *params])

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aotgrad")
    try:  # (dynamo compiles the frame once for each thread that arrived during its first compile)
        results = at_once(lambda i: step(compiled, xs[i]), 8)
    finally:
        torch._dynamo.reset()
    for x, (out, grads) in zip(xs, results):
        expected_out, expected_grads = step(model, x)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(grads, expected_grads)


# -- torch.compile's mode= and options= (read as backend="inductor" reads them) -------------

def _on_each_inductor_compile(monkeypatch, record) -> None:
    """`record(gm)` before each graph Inductor's compile_fx_inner compiles."""
    import torch._inductor.compile_fx as compile_fx

    original = compile_fx.compile_fx_inner

    def recording(gm, example_inputs, **kwargs):
        record(gm)
        return original(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", recording)


def _inductor_config_seen(monkeypatch, **compile_kwargs) -> list[dict]:
    """Train a small MLP one step under aotgrad_inductor with torch.compile's kwargs; the
    Inductor config each graph compile (forward, backward) ran under."""
    from torch._inductor import config as inductor_config

    seen = []
    _on_each_inductor_compile(monkeypatch, lambda gm: seen.append(
        {k: inductor_config.get_config_copy()[k]
         for k in ("max_autotune", "triton.cudagraphs", "epilogue_fusion", "coordinate_descent_tuning")}))
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    eager = copy.deepcopy(model)
    x = torch.randn(4, 8)
    torch.compile(model, backend="aotgrad_inductor", **compile_kwargs)(x).sum().backward()
    eager(x).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    return seen


@pytest.mark.parametrize("mode", ["max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead"])
def test_aotgrad_inductor_takes_torch_compiles_mode(monkeypatch, mode):
    from torch._inductor import list_mode_options

    expected = list_mode_options(mode)
    seen = _inductor_config_seen(monkeypatch, mode=mode)
    assert len(seen) == 2  # forward and backward, both under the mode's options
    for config_seen in seen:
        for key, value in expected.items():
            if key in config_seen:
                assert config_seen[key] == value, (key, config_seen)


def test_aotgrad_inductor_takes_torch_compiles_options(monkeypatch):
    seen = _inductor_config_seen(monkeypatch, options={"epilogue_fusion": False, "max_autotune": True})
    assert len(seen) == 2
    assert all(s["epilogue_fusion"] is False and s["max_autotune"] is True for s in seen)
    # and nothing is left patched after the compile
    from torch._inductor import config as inductor_config
    assert inductor_config.epilogue_fusion is True and inductor_config.max_autotune is False


def test_aotgrad_inductor_options_reach_the_graphs_fallback_random_draws_eagers_numbers():
    """An option with an effect on the numbers: with `fallback_random` Inductor calls eager's
    random ops, so `rand_like` draws eager's numbers for one seed; without it, its own."""
    def f(x):
        return x * (torch.rand_like(x) > 0.5)

    x = torch.randn(8, 16, requires_grad=True)
    torch.manual_seed(1)
    expected = f(x)
    results = {}
    for fallback in (True, False):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="aotgrad_inductor", options={"fallback_random": fallback})
        torch.manual_seed(1)
        results[fallback] = compiled(x)
    torch.testing.assert_close(results[True], expected)
    assert not torch.equal(results[False], expected)


@pytest.mark.parametrize("options, message", [
    ({"max_autotunee": True}, "unknown Inductor option 'max_autotunee'"),
    ({"max_autotune": "yes"}, "'max_autotune' takes a bool, got str"),
])
def test_aotgrad_inductor_rejects_a_wrong_option_clearly(options, message):
    torch._dynamo.reset()
    compiled = torch.compile(nn.Linear(4, 4), backend="aotgrad_inductor", options=options)
    with pytest.raises(Exception, match=message):
        compiled(torch.randn(2, 4))


def test_aotgrad_inductor_runs_inductors_joint_graph_passes_before_partitioning(monkeypatch):
    """Inductor's passes on the joint graph (here: the folding of a uniform constant,
    ones * 2 + 1 -> full(3.0)) run before aotgrad's partitioner, as in Inductor's own
    pipeline: the forward Inductor compiles has the folded constant. Grads as eager's."""
    graphs = []
    _on_each_inductor_compile(monkeypatch, graphs.append)

    def f(x):
        scale = torch.ones(4) * 2 + 1
        return (x * scale).sin()

    torch._dynamo.reset()
    x = torch.randn(6, 4, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    expected, actual = f(x), torch.compile(f, backend="aotgrad_inductor")(x2)
    torch.testing.assert_close(actual, expected)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)
    assert len(graphs) == 2
    forward_targets = [(n.target, n.args[1:]) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert (torch.ops.aten.full.default, (3.0,)) in forward_targets, forward_targets
    assert not [t for t, _ in forward_targets if t is torch.ops.aten.add.Tensor], forward_targets


def test_joint_passes_are_keyed_on_the_inductor_settings_they_read():
    """The disk cache keys the partitioner by qualified name: Inductor's settings for the joint
    passes (torch.compile's options included) are in it; a custom joint pass without a uuid()
    leaves no name to key on, so nothing is cached rather than something stale."""
    from torch._inductor import config as inductor_config

    from aotgrad.backends import _InductorJointPasses
    from aotgrad.persistence.disk_cache import NotCacheable, _callable_text

    partition = aotgrad.min_cut_rematerialization_partition
    default = _callable_text(_InductorJointPasses(partition))
    assert "constant_folding=True" in default and default.endswith("min_cut_rematerialization_partition")
    assert _callable_text(_InductorJointPasses(partition, {"joint_graph_constant_folding": False})) != default
    with inductor_config.patch(joint_custom_pre_pass=lambda graph: None):
        with pytest.raises(NotCacheable):
            _callable_text(_InductorJointPasses(partition))


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))

    def forward(self, x):
        y = self.net(x)
        return y, y.exp()


def test_a_graph_from_aotgrads_disk_cache_hits_inductors_graph_cache():
    """A second process loads the partitioned graphs from aotgrad's disk cache; Inductor must
    then find what the first process compiled (its cache key pickles the graph module). Here
    a dynamo reset stands in for the second process: the second compile loads from the disk
    cache, and every Inductor compile hits: the forward and the backward variant built at the
    first backward, where the second output gets no grad (compiled in dynamo's tracing
    context, where Inductor finds its shape environment). The whole backward is compiled at
    its first call, and no call needs it."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    from aotgrad.observe import phases

    model, x = TwoOutputs(), torch.randn(4, 8)
    with fresh_cache():
        for attempt in ("cold", "warm"):
            torch._dynamo.reset()
            counters.clear()
            with phases.watch() as records:
                y, _ = torch.compile(model, backend="aotgrad_inductor")(x)
                y.sum().backward()
            assert records[0].disk_cache == ("stored" if attempt == "cold" else "hit"), attempt
        assert counters["inductor"]["fxgraph_cache_hit"] == 2, dict(counters["inductor"])
        assert counters["inductor"]["fxgraph_cache_miss"] == 0, dict(counters["inductor"])
        assert counters["inductor"]["fxgraph_cache_bypass"] == 0, dict(counters["inductor"])


def test_the_graphs_aotgrad_keeps_are_as_partitioned_not_as_inductor_rewrote_them():
    """Inductor rewrites the graph it compiles in place (its post-grad passes, on a cache miss
    only: `view` becomes `reshape`, nodes move). aotgrad hands it a copy, so the graphs it keeps,
    which the report shows and later backward variants are cut from, do not depend on whether
    this process compiled them or Inductor loaded them from its cache (gpt2's first warm process
    compiled its variant again: the variant's code, Inductor's key, differed)."""
    from aotgrad.observe import phases

    class Flatten(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 4)

        def forward(self, x):
            return self.linear(x).view(16).tanh()

    from torch._inductor.utils import fresh_cache

    torch._dynamo.reset()
    model, x = Flatten(), torch.randn(4, 8)
    with fresh_cache(), aotgrad.config.patch(cache_dir=None), phases.watch() as records:
        out = torch.compile(model, backend="aotgrad_inductor")(x)
        out.sum().backward()
    for gm in (records[0].forward, records[0].backward):
        targets = {node.target for node in gm.graph.nodes}
        assert torch.ops.aten.view.default in targets and torch.ops.aten.reshape.default not in targets, gm.code


_MAX_POOL_FIRST = """
import sys, torch, aotgrad
assert "torch._inductor.lowering" not in sys.modules  # else this process cannot show the failure
pool = torch.nn.MaxPool2d(3, 2, 1)
x = torch.randn(1, 3, 8, 8, requires_grad=True)
x2 = x.detach().clone().requires_grad_()
torch.compile(pool, backend="aotgrad_inductor")(x).sum().backward()
pool(x2).sum().backward()
assert torch.equal(x.grad, x2.grad)
print("ok")
"""


def test_max_pool_compiles_in_a_fresh_process():
    """Inductor's max-pool decomposition reads `torch._inductor.lowering`, which nothing had
    imported when aotgrad_inductor was a process's first compile (timm's ResNet-18 failed with
    "module 'torch._inductor' has no attribute 'lowering'"); the backend imports it."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    done = subprocess.run([sys.executable, "-c", _MAX_POOL_FIRST], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.parametrize("repro_after", [None, "aot"])
def test_inductors_repro_wrapper_runs_only_when_its_repro_is_asked_for(monkeypatch, repro_after):
    """compile_fx_inner wraps Inductor's compiler in torch._dynamo's repro wrapper, which
    deep-copies each graph for a repro it writes only under `repro_after="aot"`: aotgrad's
    compiles skip it otherwise (backends._without_repro_copy) and restore it after."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.compile_fx as inductor

    wrapped = []
    inductors_own = inductor.wrap_compiler_debug

    def recording(compiler_fn, compiler_name):
        wrapped.append(compiler_name)
        return inductors_own(compiler_fn, compiler_name)

    monkeypatch.setattr(inductor, "wrap_compiler_debug", recording)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    twin = copy.deepcopy(model)
    x = torch.randn(3, 4)
    with dynamo_config.patch(repro_after=repro_after):
        torch.compile(model, backend="aotgrad_inductor")(x).sum().backward()
    twin(x).sum().backward()
    assert len(wrapped) == (2 if repro_after == "aot" else 0), wrapped  # forward and backward
    assert inductor.wrap_compiler_debug is recording
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    torch._dynamo.reset()


def _described(placeholder: fx.Node, value) -> str:
    """"tangents_1", or a primal's or saved value's size and dtype ("(6, 5) float32")."""
    if str(placeholder.target).startswith("tangents"):
        return str(placeholder.target)
    return f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__


def _static_inputs_told_to_inductor(monkeypatch, backend: str, model: nn.Module, x: torch.Tensor, dynamic: bool):
    """(each input described, static_input_idxs, graph) of each graph Inductor compiles for one
    training step of `model` under `backend`; the gradients are checked against eager."""
    import torch._inductor.compile_fx as compile_fx
    from torch._inductor.utils import fresh_cache

    seen = []
    original = compile_fx._compile_fx_inner  # (compile_fx_inner's own, which both backends reach)

    def recording(gm, example_inputs, **kwargs):
        seen.append(([_described(n, v) for n, v in zip(gm.graph.find_nodes(op="placeholder"), example_inputs)],
                     list(kwargs["static_input_idxs"]), gm))
        return original(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx, "_compile_fx_inner", recording)
    torch._dynamo.reset()
    twin, eager = copy.deepcopy(model), copy.deepcopy(model)
    with fresh_cache():  # (else PyTorch's AOTAutograd cache may answer without compiling)
        torch.compile(twin, backend=backend, dynamic=dynamic)(x).sum().backward()
    eager(x).sum().backward()
    torch._dynamo.reset()
    for p, q in zip(eager.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    return seen


@pytest.mark.parametrize("dynamic", [False, True])
def test_inductor_is_told_which_inputs_keep_their_memory(monkeypatch, dynamic):
    """As PyTorch's AOTAutograd tells it: the forward's parameters and buffers, and the
    backward's saved values, are Inductor's `static_input_idxs` (on a GPU: no alignment check
    per call, no copy into a CUDA graph's memory per replay); the batch and tangents are not."""
    from torch._inductor.utils import count_tangents

    model = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh())
    x = torch.randn(3, 5)
    *_, (fw, fw_static, _), (_, bw_static, bw_gm) = _static_inputs_told_to_inductor(
        monkeypatch, "aotgrad_inductor", model, x, dynamic)
    (pt, pt_static, _), _ = _static_inputs_told_to_inductor(monkeypatch, "inductor", model, x, dynamic)
    state = len(list(model.parameters())) + len(list(model.buffers()))
    assert len(fw_static) == state and len(pt_static) == state
    assert sorted(fw[i] for i in fw_static) == sorted(pt[i] for i in pt_static)   # the same inputs
    assert bw_static == list(range(count_tangents(bw_gm))) and bw_static


def test_a_forward_inductor_cut_in_pieces_leaves_the_backward_only_its_primals_static():
    graph = fx.Graph()
    for name in ("primals_1", "primals_3", "mm", "tangents_1"):
        graph.placeholder(name)
    graph.output(())
    gm = fx.GraphModule(nn.Module(), graph)
    assert backends._static_backward_inputs(gm, forward_partitioned=False) == [0, 1, 2]
    assert backends._static_backward_inputs(gm, forward_partitioned=True) == [0, 1]
    gm.meta["static_primals"] = (0, 7)
    with pytest.raises(AssertionError, match=r"static primals \[0, 7\] of a graph with 4 inputs"):
        backends._static_primals(gm)


def test_a_backward_is_told_whether_its_own_forward_was_cut_in_pieces(monkeypatch):
    """One graph's entries compile their forwards and (lazily) their backwards interleaved: a
    backward's static inputs follow the forward that saved its values, not the last forward."""
    told = []

    def compile_(gm, example_inputs, role, static_input_idxs, **kwargs):
        told.append((role, static_input_idxs))
        run = lambda args: None  # noqa: E731
        run.partitioned, run.output_strides = gm.meta.get("cut", False), None
        return run
    monkeypatch.setattr(backends, "_compile", compile_)

    def graphs(cut: bool):
        saved = torch.empty(2)
        fw, bw = fx.Graph(), fx.Graph()
        fw.output((fw.placeholder("primals_1"), fw.placeholder("primals_2")))
        for name in ("primals_1", "mm", "tangents_1"):
            bw.placeholder(name)
        bw.output(())
        fw_gm, bw_gm = fx.GraphModule(nn.Module(), fw), fx.GraphModule(nn.Module(), bw)
        fw_gm.meta.update(cut=cut, num_saved=1)
        for node in fw.find_nodes(op="placeholder"):
            node.meta["val"] = saved  # (the forward returns its saved value: primals_2)
        return fw_gm, bw_gm, [torch.empty(2), saved, torch.empty(2)]

    compilers = backends.InductorCompilers()
    cut_fw, cut_bw, cut_inputs = graphs(cut=True)
    whole_fw, whole_bw, whole_inputs = graphs(cut=False)
    compilers.forward(cut_fw, [])
    compilers.forward(whole_fw, [])   # another entry's forward, compiled after
    compilers.backward(cut_bw, cut_inputs)
    compilers.backward(whole_bw, whole_inputs)
    assert [static for role, static in told if role == "backward"] == [[0], [0, 1]]
