"""The cache: what makes a new capture (node types, edges, hooks, inputs=, saved values, tensor
metadata), what does not (tensor values, parameter and hook identity), and sizes that change
becoming symbols once (one recompile, then none). Also the verbose log."""
import logging

import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.ReLU())


def test_a_fresh_model_with_equal_structure_hits_the_cache():
    def fn():
        out = []
        for _ in range(3):
            model = _mlp()  # new parameters, new values: same graph
            model(torch.randn(2, 4)).sum().backward()
            out += [p.grad for p in model.parameters()]
        return out

    check(fn, captures=1)


@pytest.mark.all_compilers
def test_changed_batch_size_recompiles_once_then_serves_every_size():
    model = _mlp()

    def fn():
        out = []
        for b in [10, 100, 10, 15, 20, 25]:
            model.zero_grad()
            model(torch.randn(b, 4)).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
        return out

    check(fn, captures=2, compiles=2)


@pytest.mark.all_compilers
def test_dynamic_sizes_through_mean_view_expand_and_matmul():
    w = torch.randn(6, 5, requires_grad=True)

    def fn():
        w.grad = None
        out = []
        for b, t in [(2, 3), (4, 3), (5, 7), (3, 9), (6, 2)]:
            x = torch.randn(b, t, 6, requires_grad=True)
            h = (x.view(b * t, 6) @ w).view(b, t, 5).tanh()
            y = h.mean(dim=1).sum() + h.expand(2, b, t, 5).mean()
            y.backward()
            out += [x.grad, w.grad.clone()]
        return out

    check(fn, captures=3)  # static, then batch dynamic, then seq dynamic too


def test_sizes_of_0_or_1_stay_static():
    model = _mlp()

    def fn():
        out = []
        for b in [4, 5, 1, 6, 1]:
            model.zero_grad()
            model(torch.randn(b, 4)).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
        return out

    check(fn, captures=3)  # 4; dynamic (5); 1 static; 6 and 1 hit


def test_custom_function_ctx_shape_across_sizes():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.shape = x.shape
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * ctx.shape[0]

    def fn():
        out = []
        for n in [10, 100, 10, 15, 20, 25]:
            x = torch.randn(n, requires_grad=True)
            Scale.apply(x).sum().backward()
            out.append(x.grad)
        return out

    check(fn, captures=2)


def test_different_inputs_recapture():
    def fn():
        x = torch.randn(3, requires_grad=True)
        w = torch.randn(3, requires_grad=True)
        (x * w).sum().backward(inputs=[w])
        (x * w).sum().backward(inputs=[x])
        (x * w).sum().backward(inputs=[w])
        return [x.grad, w.grad]

    check(fn, captures=2)


def test_saved_non_tensor_value_change_recaptures():
    def fn():
        x = torch.randn(4, 6, requires_grad=True)
        x.sum(dim=0).sum().backward()
        x.sum(dim=1).sum().backward()
        x.sum(dim=0).sum().backward()
        return [x.grad]

    check(fn, captures=2)


def test_dtype_change_recaptures():
    def fn():
        out = []
        for dtype in [torch.float32, torch.float64, torch.float32]:
            x = torch.randn(3, dtype=dtype, requires_grad=True)
            (x * x).sum().backward()
            out.append(x.grad)
        return out

    check(fn, captures=2)


def test_autocast_during_the_backward_is_part_of_the_key(caplog):
    """Eager runs backward ops under an autocast region active at `backward()` (bfloat16
    matmuls here), and a capture records their casts: a graph captured inside the region must
    not serve a backward outside it, nor the reverse (before: bfloat16 gradients, silently)."""
    model = _mlp()

    def fn():
        out = []
        for autocast in [True, False, True, False]:
            model.zero_grad()
            loss = model(torch.randn(3, 4)).sum()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss.backward()
            out += [p.grad for p in model.parameters()]
        return out

    with caplog.at_level(logging.DEBUG, logger="aotgrad.compiled_autograd"):
        check(fn, captures=2)
    assert "Cache miss due to autocast during the backward changed: (('cpu', torch.bfloat16),) -> None" in caplog.text


def test_accumulating_without_zeroing_hits_the_cache():
    model = _mlp()

    def fn():
        x = torch.randn(3, 4)
        for _ in range(10):
            model(x).sum().backward()
        return [p.grad for p in model.parameters()]

    check(fn, captures=1)


def test_verbose_logs_nodes_and_miss_reasons(caplog):
    model = _mlp()
    compiled_autograd.reset()
    aotgrad.config.compiled_autograd_verbose = True
    try:
        with caplog.at_level(logging.DEBUG, logger="aotgrad.compiled_autograd"):
            with compiled_autograd.enable(current_compiler()):
                for b in [10, 11, 12]:
                    model.zero_grad()
                    model(torch.randn(b, 4)).sum().backward()
    finally:
        aotgrad.config.compiled_autograd_verbose = False
    text = caplog.text
    for name in ["SumBackward0 (NodeCall 1)", "ReluBackward0 (NodeCall 2)", "AddmmBackward0 (NodeCall 3)",
                 "torch::autograd::AccumulateGrad (NodeCall 4)", "TBackward0 (NodeCall 5)",
                 "AddmmBackward0 (NodeCall 8)", "torch::autograd::AccumulateGrad (NodeCall 11)"]:
        assert name in text
    assert text.count("Cache miss due to new autograd node: torch::autograd::GraphRoot (NodeCall 0) with key size") == 1
    assert "previous key sizes=[]" in text
    assert "Cache miss due to changed shapes: marking size idx 0 of SumBackward0 (NodeCall 1) as dynamic" in text
    assert text.count("as dynamic") >= 4
    assert aotgrad.counters["compiled_autograd"]["captures"] == 2


def test_miss_reasons_name_the_hook_or_saved_value_that_changed(caplog):
    model = _mlp()
    x = torch.randn(3, requires_grad=True)
    compiled_autograd.reset()
    with caplog.at_level(logging.DEBUG, logger="aotgrad.compiled_autograd"):
        with compiled_autograd.enable(current_compiler()):
            for i in range(3):
                h = model[0](torch.randn(2, 4))
                if i == 1:
                    h.register_hook(lambda g: g * 2)
                if i == 2:
                    handle = model[0].weight.register_post_accumulate_grad_hook(lambda p: None)
                model[2](model[1](h)).sum().backward()
            handle.remove()
            for k in (2, 3):
                x.pow(k).sum().backward()
    text = caplog.text
    assert "Cache miss due to hooks of AddmmBackward0 (NodeCall 7) changed: none -> tensor hooks on gradient [0]" \
        in text
    assert ("Cache miss due to hooks of torch::autograd::AccumulateGrad (NodeCall 10) changed: none -> "
            "post-accumulate-grad hooks") in text
    assert "Cache miss due to saved values of PowBackward0 (NodeCall 2) changed: (2,) -> (3,)" in text


def test_verbose_flag_is_read_when_enable_is_entered(caplog):
    compiled_autograd.reset()
    x = torch.randn(3, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger="aotgrad.compiled_autograd"):
        with compiled_autograd.enable(current_compiler()):
            aotgrad.config.compiled_autograd_verbose = True
            try:
                (x * 2).sum().backward()
            finally:
                aotgrad.config.compiled_autograd_verbose = False
    assert "NodeCall" not in caplog.text


def test_graph_takes_saved_values_as_inputs_not_constants():
    graphs = []

    def compiler(gm):
        graphs.append(gm)
        return gm

    compiled_autograd.reset()
    x = torch.randn(3, requires_grad=True)
    with compiled_autograd.enable(compiler):
        (x.sin() * x.exp()).sum().backward()
    gm = graphs[0]
    # (the objects, leaves here, reach the calls out through callout.py, never as graph inputs)
    assert [n.target for n in gm.graph.nodes if n.op == "placeholder"] == ["inputs", "sizes"]
    assert not [n for n in gm.graph.nodes if n.op == "get_attr"]  # nothing baked in


@pytest.mark.one_compiler  # torch.compile's defaults (not fullgraph, not dynamic), PyTorch's aot_eager too
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor", "aotgrad"])
def test_torch_compile_as_the_compiler(backend):
    model = _mlp()

    def fn():
        out = []
        for b in [3, 3, 5, 7]:
            model.zero_grad()
            model(torch.randn(b, 4)).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
        return out

    check(fn, compiler=lambda gm: torch.compile(gm, backend=backend), captures=2, exact=False)
