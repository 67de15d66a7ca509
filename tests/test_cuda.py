"""aotgrad on a CUDA device, compared with eager on the same device: functions through
aot_function, an MLP and a small GPT through torch.compile(backend="aotgrad" / "aotgrad_inductor"),
autocast to bfloat16, BatchNorm's running statistics under aotgrad_inductor (written inside
Inductor's graph; by the epilogue under CUDA graphs), compiled autograd with the identity compiler
and with Inductor, and dropout under aotgrad_inductor (the backward must use the mask the forward
drew).

Marked `gpu` and skipped, with the reason printed, where torch.cuda.is_available() is False (the
default CPU run). On a GPU machine: `python -m pytest -q -m gpu tests/test_cuda.py`, or
benchmarks/gpu_check.sh. Written for every supported torch (2.11-2.14); nothing here may need a
feature newer than 2.11.
"""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import aotgrad
from aotgrad import compiled_autograd
from tests.test_models import TransformerBlock

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs a CUDA device: torch.cuda.is_available() is False"),
]

DEVICE = "cuda"
BACKENDS = ["aotgrad", "aotgrad_inductor"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles its own model: a fresh Dynamo cache keeps earlier tests' graphs from
    filling the recompile limit (past it Dynamo runs the model eagerly, and the comparison
    with eager would pass without aotgrad running at all)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, tol: float, what: str) -> None:
    """Same dtype and shape, and equal up to `tol` relative to each element and to the tensor's
    largest value: GPU kernels (Inductor's fused ones, cuBLAS, attention) sum in other orders
    than eager's, so small elements carry the rounding of large ones."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        (what, actual.dtype, expected.dtype, actual.shape, expected.shape)
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale if scale > 0 else tol,
                               msg=lambda m: f"{what}: {m}")


def assert_compiled(graphs: int = 1) -> None:
    """Dynamo handed at least `graphs` graphs to the backend (the model did not run eagerly)."""
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= graphs, \
        dict(torch._dynamo.utils.counters["stats"])


# -- models --------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.LayerNorm(4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.net(x)


Block = TransformerBlock  # the transformer block of tests/test_models.py


class GPT(nn.Module):
    """Token and position embeddings, two pre-norm blocks with causal attention, a tied head;
    returns the cross-entropy loss of next-token prediction."""

    def __init__(self, vocab=128, d=64, heads=4, layers=2, context=32):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx, targets):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln(x) @ self.tokens.weight.t()
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _gpt_inputs():
    idx = torch.randint(0, 128, (4, 32), device=DEVICE)
    return idx, torch.roll(idx, -1, dims=1)


def _train_and_compare(model: nn.Module, make_inputs, backend: str, *, tol: float, steps: int = 2,
                       autocast: bool = False, fresh_grads: bool = False, buffers: bool = False,
                       **compile_kwargs) -> None:
    """`steps` forward+backward steps eager and through torch.compile(backend), grads
    accumulating (the second step runs the cached graphs); compares every step's output and
    then every parameter's grad. `autocast`: forwards run under autocast to bfloat16.
    `buffers`: also every buffer (BatchNorm's running statistics) and its version counter.
    `compile_kwargs`: torch.compile's `mode=` or `options=`."""
    eager = model.to(DEVICE)
    twin = copy.deepcopy(eager)
    # deepcopy gives the twin's tensors a version of their own (`set_` bumps it): buffers
    # are compared by how far each step moved their version
    start = [(b._version, c._version) for b, c in zip(eager.buffers(), twin.buffers())]
    compiled = torch.compile(twin, backend=backend, fullgraph=True, **compile_kwargs)
    region = (lambda: torch.autocast(DEVICE, dtype=torch.bfloat16)) if autocast else contextlib.nullcontext
    for step in range(steps):
        if fresh_grads:  # as a training loop's zero_grad(set_to_none=True); CUDA graphs need it:
            # a step's grads live in the graph pool, which the next step's forward reuses
            eager.zero_grad(set_to_none=True)
            twin.zero_grad(set_to_none=True)
        inputs = make_inputs()
        with region():
            expected, actual = eager(*inputs), compiled(*inputs)
        assert_close_to_scale(actual, expected, tol, f"step {step}: output")
        expected.float().square().mean().backward()
        actual.float().square().mean().backward()
    assert_compiled()
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        assert q.grad is not None, name
        assert_close_to_scale(q.grad, p.grad, tol, f"{name}.grad")
    if buffers:
        for (name, b), c, (b0, c0) in zip(eager.named_buffers(), twin.buffers(), start):
            assert c._version - c0 == b._version - b0, (name, c._version - c0, b._version - b0)
            assert_close_to_scale(c, b, tol, name)


# -- aot_function on CUDA tensors --------------------------------------------------

def _views_and_reductions(x, y):
    z = x.sin() * y
    return z.relu().sum(-1), z.t(), (x @ y.t()).softmax(-1)


def _mutates_an_input(x, buffer):
    buffer.mul_(2)  # written back to the caller's tensor, as eager does
    return (x * buffer).cos().sum(0)


def test_aot_function_matches_eager():
    x = torch.randn(8, 16, device=DEVICE, requires_grad=True)
    y = torch.randn(8, 16, device=DEVICE, requires_grad=True)
    expected = _views_and_reductions(x, y)
    expected_grads = torch.autograd.grad(sum(o.sum() for o in expected), (x, y))
    compiled = aotgrad.aot_function(_views_and_reductions, aotgrad.nop)
    actual = compiled(x, y)
    actual_grads = torch.autograd.grad(sum(o.sum() for o in actual), (x, y))
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.device == e.device and a.stride() == e.stride(), (i, a.device, a.stride(), e.stride())
        assert_close_to_scale(a, e, 1e-5, f"output {i}")
    for name, a, e in zip("xy", actual_grads, expected_grads):
        assert_close_to_scale(a, e, 1e-5, f"{name}.grad")


def test_aot_function_writes_input_mutations_back():
    x = torch.randn(4, 8, device=DEVICE, requires_grad=True)
    buffer = torch.rand(4, 8, device=DEVICE)
    eager_buffer, compiled_buffer = buffer.clone(), buffer.clone()
    expected = _mutates_an_input(x, eager_buffer)
    (expected_grad,) = torch.autograd.grad(expected.sum(), x)
    actual = aotgrad.aot_function(_mutates_an_input, aotgrad.nop)(x, compiled_buffer)
    (actual_grad,) = torch.autograd.grad(actual.sum(), x)
    assert_close_to_scale(actual, expected, 1e-5, "output")
    assert_close_to_scale(actual_grad, expected_grad, 1e-5, "x.grad")
    assert torch.equal(compiled_buffer, eager_buffer)


def test_aot_autograd_check_on_cuda_tensors():
    x = torch.randn(3, 5, device=DEVICE, requires_grad=True)
    aotgrad.testing.aot_autograd_check(lambda a, b: (a.exp() * b).cumsum(1), (x, x.detach() + 1), {})
    aotgrad.testing.aot_autograd_check(lambda a: a.view(15).narrow(0, 2, 6).tanh(), (x,), {})


# -- torch.compile backends ----------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_mlp_through_torch_compile(backend):
    _train_and_compare(MLP(), lambda: (torch.randn(32, 64, device=DEVICE),), backend, tol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_through_torch_compile(backend):
    torch.manual_seed(0)
    _train_and_compare(GPT(), _gpt_inputs, backend, tol=1e-3)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_aotgrad_inductor_with_torch_compiles_mode(mode):
    """`mode=` as with backend="inductor": CUDA graphs (reduce-overhead: three steps, the
    first ones record), autotuned kernels; the same outputs and grads as eager."""
    torch.manual_seed(0)
    model, inputs = (GPT(), _gpt_inputs) if mode == "reduce-overhead" else \
        (MLP(), lambda: (torch.randn(32, 64, device=DEVICE),))
    _train_and_compare(model, inputs, "aotgrad_inductor", tol=1e-3, steps=3, fresh_grads=True, mode=mode)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_under_autocast_to_bfloat16(backend):
    """Autocast around the compiled call, as training loops write it: the graph is traced with
    the region active (bfloat16 matmuls), the backward runs after the region."""
    torch.manual_seed(0)
    _train_and_compare(GPT(), _gpt_inputs, backend, tol=5e-2, autocast=True)


class AutocastInside(nn.Module):
    """The autocast region inside the compiled forward (Dynamo puts it into the graph)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 128), nn.Linear(128, 64)

    def forward(self, x):
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            h = F.gelu(self.a(x))
        return self.b(h.float())


@pytest.mark.parametrize("backend", BACKENDS)
def test_autocast_region_inside_the_compiled_forward(backend):
    _train_and_compare(AutocastInside(), lambda: (torch.randn(32, 64, device=DEVICE),), backend, tol=5e-2)


# -- BatchNorm: running statistics written inside Inductor's graph ----------------------

class ConvBN(nn.Module):
    """Two convolution + BatchNorm + ReLU layers and a pooled linear head; each BatchNorm's running
    mean, variance and count are hidden input writes (in training mode). The convolutions have
    no bias: a bias before a BatchNorm gets a gradient of rounding errors alone."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                 nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.net(x).mean((2, 3)))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_batch_norm_statistics_on_cuda_match_eager(mode):
    """Under aotgrad_inductor the statistics are written inside Inductor's forward (a `copy_`
    into the buffer), except under CUDA graphs (reduce-overhead), where the epilogue writes them.
    Three steps: outputs, grads, running statistics and their version counters as eager's."""
    torch.manual_seed(0)
    _train_and_compare(ConvBN(), lambda: (torch.randn(8, 3, 16, 16, device=DEVICE),), "aotgrad_inductor",
                       tol=1e-3, steps=3, fresh_grads=True, mode=mode, buffers=True)


# -- compiled autograd -----------------------------------------------------------------

def _identity_compiler(gm):
    return gm


def _inductor_compiler(gm):
    return torch.compile(gm, backend="inductor")


@pytest.mark.parametrize("compiler", [_identity_compiler, _inductor_compiler], ids=["identity", "inductor"])
def test_compiled_autograd_matches_eager(compiler):
    """The eager forward's autograd graph captured at `.backward()` (a tensor hook included) and
    run by `compiler`; the second backward runs the cached graph."""
    torch.manual_seed(0)
    eager = MLP().to(DEVICE)
    twin = copy.deepcopy(eager)

    def step(model, x):
        h = model.net[0](x)
        h.register_hook(lambda g: g * 0.5)
        model.net[1:](h).square().mean().backward()

    compiled_autograd.reset()
    for _ in range(2):
        x = torch.randn(32, 64, device=DEVICE)
        step(eager, x)
        with compiled_autograd.enable(compiler):
            step(twin, x)
    counts = aotgrad.counters["compiled_autograd"]  # (a missing key reads 0)
    assert (counts["captures"], counts["compiles"], counts["eager_fallbacks"]) == (1, 1, 0), dict(counts)
    exact = compiler is _identity_compiler  # the same kernels in the same order
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        if exact:
            assert torch.equal(q.grad, p.grad), name
        else:
            assert_close_to_scale(q.grad, p.grad, 1e-4, f"{name}.grad")


# -- random numbers --------------------------------------------------------------------

class DropoutNet(nn.Module):
    """sin -> dropout -> scale: min-cut would like to recompute the cheap sin in the backward;
    the dropout's mask must be the forward's, never drawn again."""

    def __init__(self, d=1024):
        super().__init__()
        self.w1 = nn.Parameter(torch.rand(d) + 0.5)
        self.w2 = nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        return F.dropout(torch.sin(x * self.w1), p=0.5, training=True) * self.w2


@pytest.mark.parametrize("budget", [1.0, 0.2], ids=["budget1", "budget0.2"])
def test_dropout_backward_uses_the_forward_mask(budget, monkeypatch):
    """Inductor draws its own random numbers (not eager's), so the oracle is eager given the
    mask the compiled forward drew: out = sin(x * w1) * mask * 2 * w2. Outputs and grads must
    match it (a mask drawn again in the backward would not), twice, and the masks of the two
    steps must differ (the seed advances). Budget 0.2 makes min-cut recompute all it may: it
    must save the mask (a random op never runs twice) and recomputes the rest."""
    monkeypatch.setattr(aotgrad.config, "activation_memory_budget", budget)
    torch.manual_seed(0)
    model = DropoutNet().to(DEVICE)
    compiled = torch.compile(model, backend="aotgrad_inductor", fullgraph=True)
    x = torch.rand(64, 1024, device=DEVICE) + 0.1  # sin(x * w1) > 0: a zero output is a dropped one
    masks = []
    for step in range(2):
        model.zero_grad()
        out = compiled(x)
        weights = torch.randn_like(out)
        (out * weights).sum().backward()
        mask = (out != 0).float()
        dropped = 1 - mask.mean().item()
        assert 0.4 < dropped < 0.6, f"step {step}: {dropped:.3f} of the values dropped, expected about 0.5"
        w1, w2 = (w.detach().clone().requires_grad_() for w in (model.w1, model.w2))
        expected = torch.sin(x * w1) * mask * 2.0 * w2
        (expected * weights).sum().backward()
        assert_close_to_scale(out.detach(), expected.detach(), 1e-4, f"step {step}: output")
        assert_close_to_scale(model.w1.grad, w1.grad, 1e-4, f"step {step}: w1.grad")
        assert_close_to_scale(model.w2.grad, w2.grad, 1e-4, f"step {step}: w2.grad")
        masks.append(mask)
    assert not torch.equal(masks[0], masks[1]), "both steps drew the same mask"
    assert_compiled()


def test_dropout_under_aotgrad_matches_eager_under_the_same_seed():
    """The `aotgrad` backend runs the traced aten ops themselves: the same seed draws the
    same mask as eager, so outputs and grads match eager's exactly."""
    torch.manual_seed(0)
    eager = DropoutNet().to(DEVICE)
    twin = copy.deepcopy(eager)
    compiled = torch.compile(twin, backend="aotgrad", fullgraph=True)
    x = torch.rand(64, 1024, device=DEVICE) + 0.1
    for step in range(2):
        torch.manual_seed(step)
        expected = eager(x)
        torch.manual_seed(step)
        actual = compiled(x)
        assert torch.equal(actual, expected), f"step {step}"
        expected.sum().backward()
        actual.sum().backward()
    assert_compiled()
    for (name, p), q in zip(eager.named_parameters(), twin.parameters()):
        assert torch.equal(q.grad, p.grad), name
