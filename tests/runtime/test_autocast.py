"""Compiled graphs called under the caller's autocast: the trace recorded autocast's choices
(casts included), so the graphs run with autocast off (runtime/boxed.without_autocast), as
eager's ops ran once; the backward is traced with autocast off, as eager's runs when
`.backward()` is called after the autocast region (joint._autocast_off). Compared with eager
exactly: outputs and gradients, under torch.compile(backend="aotgrad")."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import aotgrad


def _attention(lin, q, k, v, bias):
    """SDPA's math path with a float mask: inside the composite, `baddbmm`-style ops run in
    float32 below autocast; called again under autocast at the top they would run in bf16."""
    q, k, v = lin(q), lin(k), lin(v)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0).float().sum()


def _inputs():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    tensors = [torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3)]
    bias = torch.randn(1, 2, 4, 4, requires_grad=True)
    return lin, [*tensors, bias]


def _run(fn, backward_under_autocast: bool):
    lin, args = _inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(lin, *args)
        if backward_under_autocast:
            out.backward()
    if not backward_under_autocast:
        out.backward()
    return out.detach(), [a.grad for a in args] + [p.grad for p in lin.parameters()]


def test_graphs_run_as_traced_under_the_callers_autocast():
    expected, expected_grads = _run(_attention, backward_under_autocast=False)
    torch._dynamo.reset()
    compiled = torch.compile(_attention, backend="aotgrad")
    for _ in range(2):  # the compile, then the cached graphs
        actual, grads = _run(compiled, backward_under_autocast=False)
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)
        for g, e in zip(grads, expected_grads):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=0, atol=0)


def _sdpa(x, w, bias):
    return F.scaled_dot_product_attention(x @ w, x, x, attn_mask=bias).float().sum()


def _run_sdpa(fn):
    """`fn(x, w, bias)` under autocast to bf16, its backward after the region."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    bias = torch.randn(1, 4, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fn(x, w, bias)
    out.backward()
    return out.detach(), [x.grad, w.grad, bias.grad]


def _assert_exactly(result, expected) -> None:
    (actual, grads), (value, expected_grads) = result, expected
    torch.testing.assert_close(actual, value, rtol=0, atol=0)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_aot_function_under_the_callers_autocast():
    _assert_exactly(_run_sdpa(aotgrad.aot_function(_sdpa, aotgrad.nop)), _run_sdpa(_sdpa))


def _retracing_compiler(seen: list):
    """A compiler that traces the graph again (as Inductor's pattern replacements do) and
    runs what it traced; it records whether autocast was live while it compiled."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def compile_graph(gm, example_inputs):
        seen.append(torch.is_autocast_enabled("cpu") and
                    (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16)
        return make_fx(gm)(*example_inputs)
    return compile_graph



def test_compilers_run_with_the_callers_autocast_off():
    """A graph already holds autocast's casts: the compilers are called with autocast off, as
    PyTorch's AOTAutograd calls them. Under the caller's autocast a compiler tracing the
    graph again casts the float32 ops inside SDPA's math to bf16 (on CUDA, Inductor raised
    `mat1 and mat2 must have the same dtype` for BERT)."""
    seen: list = []
    expected = _run_sdpa(_sdpa)
    result = _run_sdpa(aotgrad.aot_function(_sdpa, _retracing_compiler(seen)))
    assert seen == [False, False], seen  # the forward, then the backward: autocast off for both
    _assert_exactly(result, expected)
