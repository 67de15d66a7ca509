"""Dynamic shapes (issue 4): one compiled graph for every size the guards admit.

aot_function(..., dynamic=True) traces with symbolic sizes; these tests sweep sizes and
compare outputs and gradients with eager, and count how often the graphs were compiled."""
import math

import pytest
import torch

import aotgrad
from tests import torch_features


class Counting:
    """A graph compiler that counts the graphs it is handed (forward, backward, inference)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return aotgrad.nop(gm, example_inputs)


def _check_sweep(fn, make_inputs, sizes, compiler=None, partition_fn=None):
    compiler = compiler or Counting()
    compiled = aotgrad.aot_function(fn, compiler, dynamic=True, partition_fn=partition_fn)
    for n in sizes:
        inputs = make_inputs(n)
        twins = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
        expected, actual = fn(*twins), compiled(*inputs)
        torch.testing.assert_close(actual, expected)
        actual.sum().backward()
        expected.sum().backward()
        for a, e in zip(inputs, twins):
            if e.requires_grad:
                torch.testing.assert_close(a.grad, e.grad)
    return compiler


def _mlp(x, w1, b1, w2):
    return torch.nn.functional.linear(torch.relu(x @ w1 + b1), w2).log_softmax(-1)


def _mlp_inputs(n):
    torch.manual_seed(n)
    return (torch.randn(n, 8), torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True),
            torch.randn(3, 16, requires_grad=True))


def test_mlp_batch_sweep_compiles_once():
    compiler = _check_sweep(_mlp, _mlp_inputs, [4, 5, 9, 32, 7])
    assert len(compiler.graphs) == 2  # one forward and one backward for every batch size


def test_size_arithmetic_is_recorded_not_baked_in():
    def fn(x, w):
        y = (x @ w).relu()
        return y.reshape(-1, 2 * w.shape[1]).sum(0) * x.shape[0] + y.view(y.shape[0] * y.shape[1]).mean()
    compiler = _check_sweep(fn, lambda n: (torch.randn(2 * n, 4), torch.randn(4, 3, requires_grad=True)),
                            [3, 4, 10])
    assert len(compiler.graphs) == 2
    code = compiler.graphs[0].code
    assert "sym_size" in code and "mul" in code, code


def test_backward_reads_saved_sizes():
    def fn(x):
        return x.sum(0, keepdim=True).expand(x.shape[0], -1) * x
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 3, requires_grad=True),), [2, 6, 11])
    assert len(compiler.graphs) == 2


def test_min_cut_partition_saves_sizes_and_bytes_at_the_example_sizes():
    def fn(x, w):
        y = (x @ w).relu()
        return y.reshape(-1, 2 * w.shape[1]).sum(0) * x.shape[0] + y.sin().mean()
    compiler = _check_sweep(fn, lambda n: (torch.randn(2 * n, 4, requires_grad=True),
                                           torch.randn(4, 3, requires_grad=True)),
                            [3, 4, 10], partition_fn=aotgrad.min_cut_rematerialization_partition)
    assert len(compiler.graphs) == 2
    saved_sizes = compiler.graphs[0].meta.get("num_saved_sizes", 0)
    assert saved_sizes > 0, compiler.graphs[0].code  # the backward's sizes are saved as ints


def test_an_expanded_output_keeps_its_sizes_symbolic():
    def fn(x):
        return (x * 2).unsqueeze(0).expand(3, -1, -1)  # a view of an intermediate, replayed per call
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, n + 1, requires_grad=True),), [3, 5, 8])
    assert len(compiler.graphs) == 2


def test_views_of_data_dependent_intermediates_read_their_sizes_from_the_forward():
    def fn(x):
        return torch.nonzero(x > 0, as_tuple=True)  # views of one (u0, 1) intermediate
    compiled = aotgrad.aot_function(fn, aotgrad.nop, dynamic=True)
    for n in (4, 7):
        x = torch.randn(n, 3)
        for got, expected in zip(compiled(x), fn(x)):
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected)


def test_a_view_of_an_input_at_a_data_dependent_offset_is_rebuilt_per_call():
    def fn(x, start):
        return x.narrow(0, start.item(), 2), x.sum()  # the offset is read from a tensor
    counting = Counting()
    compiled = aotgrad.aot_function(fn, counting, dynamic=True)
    for n, start in [(5, 1), (7, 3), (6, 0), (6, -3)]:
        x = torch.randn(n, 3, requires_grad=True)
        got, expected = compiled(x, torch.tensor(start)), fn(x, torch.tensor(start))
        assert got[0]._base is x and got[0].storage_offset() == expected[0].storage_offset()
        torch.testing.assert_close(got, expected)
    assert len(counting.graphs) == 2


def test_composite_ops_run_their_python_kernels_with_symbolic_sizes():
    """Ops whose C++ composite kernels want int sizes (addcmul, diag, rfft, softshrink)
    trace through PyTorch's Python kernels when sizes are symbols."""
    def fn(x, y):
        square = torch.addcmul(x, x, y) @ x.t()
        spectrum = torch.fft.rfft(x).abs().sum(-1)
        return torch.diag(square).sum() + spectrum.sum() + torch.nn.functional.softshrink(y).sum()
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 2 * n, requires_grad=True),
                                           torch.randn(n, 2 * n, requires_grad=True)), [3, 5, 8])
    assert len(compiler.graphs) == 2


@pytest.mark.skipif(not torch_features.trace_backward_takes_symbolic_sizes(),
                    reason=torch_features.TRACE_BACKWARD_REASON)
def test_trace_backward_with_symbolic_sizes():
    def fn(x):
        return torch.trace(x @ x.t())
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 2 * n, requires_grad=True),), [3, 5, 8])
    assert len(compiler.graphs) == 2


def test_a_write_through_a_reshaped_view_of_an_intermediate_keeps_sizes_symbolic():
    def fn(x):
        y = x * 2
        y.view(-1)[1:3].mul_(3)  # scattered back through view(-1): reshape to y's symbolic sizes
        return y
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 5, requires_grad=True),), [3, 4, 7])
    assert len(compiler.graphs) == 2


def test_symbol_splitting_cat_then_matmuls():
    w1, w2 = torch.randn(16, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True)

    def fn(x, w1, w2):
        x = torch.cat([x, x])
        y = x @ w1
        return x + y @ w2
    def make_inputs(n):
        return torch.randn(n, 16), w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    compiler = _check_sweep(fn, make_inputs, [20, 7, 33])
    assert len(compiler.graphs) == 2


def test_a_size_guard_failing_recompiles_and_stays_right():
    def fn(x):
        if x.shape[0] > 4:  # control flow on a size: the trace guards it
            return x.sin() * 2
        return x.cos()
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 2, requires_grad=True),), [8, 9, 3, 2, 10])
    assert len(compiler.graphs) == 4  # one pair for each branch


def test_a_size_fixed_by_an_equality_guard_recompiles_for_other_sizes():
    def fn(x):
        if x.shape[0] == 3:  # the trace makes the size the constant 3
            return x.sin() * 2
        return x.cos()
    compiler = _check_sweep(fn, lambda n: (torch.randn(n, 2, requires_grad=True),), [3, 4, 3, 5])
    assert len(compiler.graphs) == 4  # one pair for size 3, one for every other size


def test_size_one_is_specialised_and_then_reused():
    compiler = _check_sweep(_mlp, _mlp_inputs, [6, 1, 1, 7])
    assert len(compiler.graphs) == 4  # sizes 0 and 1 are never symbols (as in torch.compile)


# -- torch.compile(backend="aotgrad") with symbolic sizes ---------------------------------

class CountingBackend:
    """torch.compile backend: aotgrad (or `inner`), counting the graphs dynamo hands it."""

    def __init__(self, inner=None):
        self.compiles = 0
        self.inner = inner

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        if self.inner is not None:
            return self.inner(gm, example_inputs)
        return aotgrad.aot_module_simplified(gm, example_inputs, aotgrad.nop, aotgrad.nop)


def _train_sweep(model, make_inputs, sizes, dynamic, inner=None):
    import copy
    torch._dynamo.reset()
    backend = CountingBackend(inner)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend=backend, dynamic=dynamic)
    counts = []
    for n in sizes:
        inputs = make_inputs(n)
        model.zero_grad()
        twin.zero_grad()
        expected, actual = model(*inputs), compiled(*inputs)
        torch.testing.assert_close(actual, expected)
        expected.sum().backward()
        actual.sum().backward()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad)
        counts.append(backend.compiles)
    return counts


class _GPTBlock(torch.nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def test_compile_dynamic_mlp_batch_sweep_one_compile():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    counts = _train_sweep(model, lambda n: (torch.randn(n, 8),), [3, 5, 8, 13], dynamic=True)
    assert counts == [1, 1, 1, 1]


def test_aotgrad_inductor_dynamic_mlp_batch_sweep_one_compile():
    from aotgrad.backends import aotgrad_inductor_backend
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    counts = _train_sweep(model, lambda n: (torch.randn(n, 8),), [3, 5, 13], dynamic=True,
                          inner=aotgrad_inductor_backend)
    assert counts == [1, 1, 1]


def test_compile_dynamic_gpt_block_batch_and_sequence():
    torch.manual_seed(0)
    sizes = [(2, 5), (3, 7), (4, 6)]
    counts = _train_sweep(_GPTBlock(), lambda k: (torch.randn(*sizes[k], 16),), range(3), dynamic=True)
    assert counts == [1, 1, 1]


def test_compile_dynamic_cnn_batch_sweep():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    counts = _train_sweep(model, lambda n: (torch.randn(n, 3, 8, 8),), [2, 5, 3], dynamic=True)
    assert counts == [1, 1, 1]
    # BatchNorm's running statistics were written back at every size
    assert int(model[1].num_batches_tracked) == 3


def test_automatic_dynamic_second_size_recompiles_once():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    counts = _train_sweep(model, lambda n: (torch.randn(n, 8),), [4, 6, 9, 12], dynamic=None)
    assert counts == [1, 2, 2, 2]  # static first, one dynamic recompile, none after


def test_an_int_argument_no_tensor_has_is_a_graph_input():
    """torch.compile(dynamic=True) makes an int argument a SymInt input that no tensor's size
    carries; aotgrad passes it as a size of a tensor that holds no memory."""
    def fn(x, n, k):
        return (x * n).sin().reshape(k, -1).sum(0) + n

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    for n, k in [(3, 2), (4, 3), (7, 6), (5, 2)]:
        x = torch.randn(12, requires_grad=True)
        twin = x.detach().clone().requires_grad_()
        out, expected = compiled(x, n, k), fn(twin, n, k)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, twin.grad)
    assert backend.compiles == 1


def test_symbolic_numbers_are_returned_as_each_calls_values():
    def fn(x):
        return x * 2, x.shape[0] * 3, x.sum().item(), x.shape[0] > 4, (x > 0).sum().item()
    counting = Counting()
    compiled = aotgrad.aot_function(fn, counting, dynamic=True)
    for n in (3, 5, 8):
        x = torch.randn(n, requires_grad=True)
        got, expected = compiled(x), fn(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:] and [type(v) for v in got[1:]] == [int, float, bool, int]
    assert len(counting.graphs) == 2


def test_a_number_read_with_item_before_a_graph_break_is_a_graph_output():
    def fn(x, index):
        n = index.item()
        torch._dynamo.graph_break()
        return x[:n].sum() * n

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        compiled = torch.compile(fn, backend="aotgrad", dynamic=True)
        for k in (2, 3, 5):
            x = torch.randn(6, requires_grad=True)
            torch.testing.assert_close(compiled(x, torch.tensor(k)), fn(x, torch.tensor(k)))


def test_outputs_viewing_inputs_are_rebuilt_with_each_calls_sizes():
    def fn(x):
        return x.view(x.shape[0] * 2, -1), x.t(), x[1:x.shape[0] - 1]
    compiled = aotgrad.aot_function(fn, aotgrad.nop, dynamic=True)
    for n in (4, 6, 9):
        x = torch.randn(n, 6, requires_grad=True)
        for got, expected in zip(compiled(x), fn(x)):
            assert got.shape == expected.shape and got.stride() == expected.stride()
            torch.testing.assert_close(got, expected)
            assert got._base is x


def test_data_dependent_sizes_are_read_at_run_time():
    def fn(x):
        return x[x > 0].sum() * x.shape[0] + x.sum().item()
    counting = Counting()
    compiled = aotgrad.aot_function(fn, counting, dynamic=True)
    for n in (5, 5, 8):
        x = torch.randn(n, requires_grad=True)
        twin = x.detach().clone().requires_grad_()
        torch.testing.assert_close(compiled(x), fn(twin))
        compiled(x).backward()
        fn(twin).backward()
        torch.testing.assert_close(x.grad, twin.grad)
    assert len(counting.graphs) == 2


def test_mutated_overlapping_inputs_follow_each_calls_view_geometry():
    """A synthetic base (mutated inputs sharing memory) is traced with its views' example
    geometry; other geometries compile again instead of reusing the views' old sizes."""
    def fn(a, b):
        a.mul_(2)
        return a + b

    compiler = Counting()
    compiled = aotgrad.aot_function(fn, compiler, dynamic=True)
    for n, extra in [(4, 1), (6, 1), (6, 3), (9, 1), (4, 5)]:
        base = torch.randn(n + extra)
        twin = base.clone()
        out = compiled(base[:n], base[1:n + 1])
        torch.testing.assert_close(out, fn(twin[:n], twin[1:n + 1]))
        torch.testing.assert_close(base, twin)
    assert len(compiler.graphs) == 3  # one per view geometry (n = 4, 6, 9); the base's size is a symbol


def test_tensors_dynamo_traced_before_keep_dynamos_symbols():
    """A second torch.compile of the same input tensors: dynamo's symbols for them are new
    ones, and aotgrad must use those (through their source), not make its own."""
    import copy

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.token, self.ln = torch.nn.Embedding(16, 8), torch.nn.LayerNorm(8)

        def forward(self, tokens):
            return self.ln(self.token(tokens)).sum()

    torch.manual_seed(0)
    net = Net()
    tokens = torch.randint(0, 8, (2, 6))
    torch._dynamo.reset()
    torch.compile(copy.deepcopy(net), backend="aot_eager", dynamic=True)(tokens)
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(net), backend="aotgrad", dynamic=True)
    for batch in (2, 3, 5):
        tokens = torch.randint(0, 8, (batch, 6))
        torch.testing.assert_close(compiled(tokens), net(tokens))


def test_aotgrad_inductor_dynamic_conv_backward_reads_saved_values_in_inductors_layout():
    """Inductor may save a conv's input channels-last; with symbolic sizes the backward is
    compiled for those (symbolic) strides too."""
    from aotgrad.backends import aotgrad_inductor_backend
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.ReLU())
    counts = _train_sweep(model, lambda n: (torch.randn(n, 3, 8, 8),), [16, 20, 24], dynamic=True,
                          inner=aotgrad_inductor_backend)
    assert counts == [1, 1, 1]


def test_compile_dynamic_mutated_views_of_one_tensor_compile_once():
    """Inputs that are views of one tensor, one mutated (a synthetic base), under
    torch.compile(dynamic=True): the views' sizes, strides and offsets are symbols passed
    beside the base, so every size runs the one graph."""
    def fn(a, b):
        a.mul_(2)
        return a + b, b

    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    for n in (4, 6, 9):
        leaf = torch.randn(n + 1, requires_grad=True)
        twin = leaf.detach().clone().requires_grad_()
        base, base_twin = leaf * 1, twin * 1
        a_in, b_in = base[:n], base[1:]
        (out, b), (expected, b_expected) = compiled(a_in, b_in), fn(base_twin[:n], base_twin[1:])
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(base, base_twin)
        assert b is b_in  # the caller's tensor, as in eager
        (out.sum() + b.sum()).backward()
        (expected.sum() + b_expected.sum()).backward()
        torch.testing.assert_close(leaf.grad, twin.grad)
    assert backend.compiles == 1


def test_aotgrad_inductor_dynamic_backward_gets_each_symbol_bare():
    """A backward whose inputs have `batch*seq` only as a product (a flattened loss input):
    the bare symbols are saved too, as Inductor binds each symbol from an input."""
    from aotgrad.backends import aotgrad_inductor_backend

    class TokenModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32)

        def forward(self, tokens):
            logits = self.head(self.embed(tokens).relu())
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())

    torch.manual_seed(0)
    sizes = [(2, 6), (3, 5), (4, 7)]
    # Inductor reports the saved embedding's strides as numbers (48 for 8*seq): the backward
    # is compiled for them rebuilt from the symbolic sizes, else seq would be pinned to 6
    counts = _train_sweep(TokenModel(), lambda k: (torch.randint(0, 32, sizes[k]),), range(3), dynamic=True,
                          inner=aotgrad_inductor_backend)
    assert counts == [1, 1, 1]


# -- symbolic floats and other symbolic expressions (issue 21) ----------------------------

def _compile_sweep(fn, make_inputs, keys):
    """torch.compile(fn, backend=aotgrad, dynamic=True) against eager over `keys`: outputs and
    the gradients of every input that requires grad; returns how often dynamo compiled."""
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    for key in keys:
        inputs = make_inputs(key)
        twins = [t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
                 for t in inputs]
        actual, expected = compiled(*inputs), fn(*twins)
        torch.testing.assert_close(actual, expected)
        loss = (lambda out: out.abs().sum() if out.is_complex() else out.sum())
        if isinstance(expected, torch.Tensor) and expected.requires_grad:
            loss(actual).backward()
            loss(expected).backward()
            for a, e in zip(inputs, twins):
                if isinstance(e, torch.Tensor) and e.requires_grad:
                    torch.testing.assert_close(a.grad, e.grad)
    return backend.compiles


def _new_gelu(x):
    # GPT-2's NewGELUActivation: dynamo passes math.pi as a tensor and reads it with .item(),
    # so sqrt(2 / pi) is a symbolic float no input size gives
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_compile_dynamic_gelu_with_a_symbolic_float_constant_compiles_once():
    assert _compile_sweep(_new_gelu, lambda n: (torch.randn(2, n, requires_grad=True),), [3, 5, 8]) == 1


def test_compile_dynamic_attention_scaled_by_the_symbolic_head_size_compiles_once():
    def attention(q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # torch._sym_sqrt(ToFloat(s))
        return scores.softmax(-1) @ v * (q.shape[-1] ** -0.5)

    def make_inputs(n):
        return tuple(torch.randn(2, n + 1, n, requires_grad=True) for _ in range(3))
    assert _compile_sweep(attention, make_inputs, [3, 5, 8]) == 1


def test_compile_dynamic_float_argument_in_math_functions_compiles_once():
    def fn(x, a):
        return x * math.sqrt(2.0 / a) + math.cos(a) * x.shape[0] / 3 + int(a) + round(a) + math.floor(a * 2)
    inputs = {a: (torch.randn(4, 3, requires_grad=True), a) for a in (1.75, 2.5, 3.25)}
    assert _compile_sweep(fn, inputs.get, inputs) == 1


def test_compile_dynamic_size_arithmetic_in_floats_ints_and_bools_compiles_once():
    def fn(x):
        n = x.shape[1]
        scale = (n / 3 + math.floor(n / 2) + math.ceil(n / 4) + min(n, 4) + max(n, 4) + n // 2 + n % 3 + n ** 2
                 + n ** 0.5 + abs(n - 6) + torch.sym_float(n) * 0.25 + round(n / 3, 2))
        return x * scale * (n > 4) + torch.full((1,), torch.sym_ite(n > 4, n / 7, 2.0 * n))
    assert _compile_sweep(fn, lambda n: (torch.randn(2, n, requires_grad=True),), [3, 5, 7]) == 1


def test_compile_dynamic_view_sized_by_a_float_argument_gets_each_calls_size():
    """The output is a view of the input rebuilt after the graph; its size floor(2 * a) is
    computed from the float a at run time."""
    def fn(x, a):
        return x.view(math.floor(a * 2), -1)
    inputs = {a: (torch.randn(6 * 5, 2), a) for a in (1.75, 2.5, 3.25, 2.75)}  # sizes 3, 5, 6, 5
    _compile_sweep(fn, inputs.get, inputs)


def test_compile_dynamic_complex_scalar_times_a_tensor():
    def fn(x):
        y = x * 2j
        return torch.view_as_real(y * (1 - 3j)) + (1j * x).imag[:, None]
    assert _compile_sweep(fn, lambda n: (torch.randn(n, requires_grad=True),), [3, 5, 8]) == 1


def test_compile_dynamic_complex_tensor_times_a_complex_scalar():
    def fn(x):
        return torch.view_as_complex(x.reshape(-1, 2)) * (1 + 2j)
    assert _compile_sweep(fn, lambda n: (torch.randn(2, 2 * n, requires_grad=True),), [3, 5, 8]) == 1


class _NewGELU(torch.nn.Module):
    def forward(self, x):
        return _new_gelu(x)


class _GPT2Attention(torch.nn.Module):
    """GPT-2's eager attention: fused qkv, causal mask, scores / sqrt(head size)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.c_attn(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        scores = scores.masked_fill(~causal, torch.finfo(scores.dtype).min)
        return self.c_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class _TinyGPT2(torch.nn.Module):
    """GPT-2 (n_layer=2, n_embd=64, n_head=2, vocab 100) written out, as transformers builds it."""

    def __init__(self, vocab=100, d=64, heads=2, layers=2, positions=32):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(positions, d)
        self.blocks = torch.nn.ModuleList(torch.nn.ModuleDict({
            "ln_1": torch.nn.LayerNorm(d), "attn": _GPT2Attention(d, heads), "ln_2": torch.nn.LayerNorm(d),
            "mlp": torch.nn.Sequential(torch.nn.Linear(d, 4 * d), _NewGELU(), torch.nn.Linear(4 * d, d)),
        }) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = x + block["attn"](block["ln_1"](x))
            x = x + block["mlp"](block["ln_2"](x))
        logits = self.ln_f(x) @ self.wte.weight.t()
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def test_compile_dynamic_tiny_gpt2_three_sequence_lengths_one_compile():
    torch.manual_seed(0)
    counts = _train_sweep(_TinyGPT2(), lambda t: (torch.randint(0, 100, (2, t)),), [7, 12, 19], dynamic=True)
    assert counts == [1, 1, 1]
