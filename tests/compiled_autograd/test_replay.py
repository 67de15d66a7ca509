"""The fast way of a cache hit (replay.py, checks generated from key.py's parts) must say exactly
what collect says, or nothing.

Differential: where a template matches a graph, the structure, sizes, objects and saved
tensors are those collect finds on the same graph. Negative: graphs that differ from the
template only in something the fast way must check (a node reached twice, the order of
sequence numbers, a hook, a saved value, a dtype, a layout) do not match, and the slow way
handles them as eager does. Then the engine's errors and frees after a fast hit."""
import contextlib
import gc
import weakref

import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.compiled_autograd import cache as graph_cache
from aotgrad.compiled_autograd import replay
from aotgrad.compiled_autograd.collect import collect
from aotgrad.compiled_autograd.walk import gradient_edge, walk
from tests.compiled_autograd.helpers import check, current_compiler, same


def _roots(out):
    return out if isinstance(out, (list, tuple)) else [out]


def _backward(build, inputs_of=None, grad: bool = False):
    """Run one backward of `build()`'s graph under compiled autograd (capture or hit)."""
    out = build()
    inputs = inputs_of() if inputs_of else None
    if grad:
        return torch.autograd.grad(_roots(out), inputs)
    torch.autograd.backward(_roots(out), inputs=inputs)


def _find(build, inputs_of=None, grad: bool = False):
    """A fresh graph from `build()`, and what the fast way and the slow way make of it."""
    roots = _roots(build())
    inputs = inputs_of() if inputs_of else []
    root_edges = [gradient_edge(t) for t in roots]
    input_edges = [gradient_edge(t) for t in inputs]
    grads = [torch.ones_like(t) for t in roots]
    accumulate = not grad
    templates = replay.templates_of(current_compiler())
    matches = [t.matcher(root_edges, input_edges, grads, accumulate) for t in templates._by_structure.values()]
    hit = templates.find(root_edges, input_edges, grads, accumulate)
    collected = collect(walk(root_edges, input_edges or None, accumulate), grads, accumulate, input_edges)
    for template, found in zip(templates._by_structure.values(), matches):  # a match says what collect says
        if found is not None:
            assert template.structure == collected.structure
    return hit, collected, roots


def _same_as_collect(hit, collected) -> None:
    assert hit is not None, "the template did not match a graph of the same structure"
    assert hit.entries is graph_cache.entries_of(current_compiler(), collected.structure)
    assert hit.sizes == collected.sizes.values
    assert len(hit.objects) == len(collected.objects)
    assert all(a is b for a, b in zip(hit.objects, collected.objects))
    assert [n for n in hit.keeps_state] == [n for n in collected.keeps_state]
    saved = collected.inputs[len(hit.root_grads):]
    assert len(hit.values) == len(saved)
    for a, b in zip(hit.values, saved):
        assert (a.data_ptr(), a.shape, a.stride(), a.dtype) == (b.data_ptr(), b.shape, b.stride(), b.dtype)


def _learn(build, inputs_of=None, grad: bool = False, times: int = 1):
    compiled_autograd.reset()
    with compiled_autograd.enable(current_compiler()):
        for _ in range(times):
            _backward(build, inputs_of, grad)


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k: float, w):
        ctx.save_for_backward(x, w)
        ctx.k = k
        return x * w * k

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w * ctx.k, None, g * x * ctx.k


torch.manual_seed(0)
W = torch.randn(4, 4, requires_grad=True)
B = torch.randn(4, requires_grad=True)
X = torch.randn(3, 4, requires_grad=True)
SIN_MM = aotgrad.aot_function(lambda a, b: (a @ b).sin(), aotgrad.nop)
MLP = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))


def _hooked():
    h = torch.nn.functional.linear(X, W, B).tanh()
    h.register_hook(lambda g: g * 2)
    h.retain_grad()
    out = h.sum(dim=0).exp()
    out.grad_fn.register_prehook(lambda gs: None)
    return out.sum()


_post_hook_handle = []


def _leaf_post_accumulate():
    if not _post_hook_handle:
        _post_hook_handle.append(W.register_post_accumulate_grad_hook(lambda p: None))
    return (X @ W).sum()


GRAPHS = {
    "mlp": (lambda: torch.nn.functional.mse_loss(MLP(X), torch.zeros(3, 2)), None, False),
    "custom_function": (lambda: Scale.apply(X, 3.0, B).sum(), None, False),
    "hooks_and_retain_grad": (_hooked, None, False),
    "sizes_as_values": (lambda: (X.view(12).expand(2, 12).sum(0).mean() + X.sum(1, keepdim=True).sum()), None,
                        False),
    "saved_list_of_indices": (lambda: X[torch.tensor([0, 2]), torch.tensor([1, 3])].pow(2).sum(), None, False),
    "autograd_grad_of_leaves": (lambda: (X @ W + B).relu().sum(), lambda: [W, B], True),
    "backward_inputs_leaves_one_left_out": (lambda: (X @ W + B).sigmoid().sum(), lambda: [W], False),
    "two_roots": (lambda: [(X * 2).sum(), (X @ W).prod()], None, False),
    "aotgrad_function_inside": (lambda: SIN_MM(X, W).sum(), None, False),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_match_finds_what_collect_finds(name):
    build, inputs_of, grad = GRAPHS[name]
    _learn(build, inputs_of, grad)
    with compiled_autograd.enable(current_compiler()):
        hit, collected, _ = _find(build, inputs_of, grad)
    _same_as_collect(hit, collected)


def test_a_leaf_with_a_post_accumulate_hook_matches():
    W.grad = None
    try:
        _learn(_leaf_post_accumulate)
        with compiled_autograd.enable(current_compiler()):
            hit, collected, _ = _find(_leaf_post_accumulate)
        _same_as_collect(hit, collected)
    finally:
        _post_hook_handle.pop().remove()
        W.grad = None


def _no_match(learned, other, inputs_of=None):
    _learn(learned, inputs_of)
    with compiled_autograd.enable(current_compiler()):
        hit, _, _ = _find(other, inputs_of)
    assert hit is None


def test_the_autocast_state_of_the_backward_is_part_of_the_match():
    """The forward outside any autocast region, the backward inside one or not: a template
    learned one way matches only backwards run the same way."""
    def build():
        return MLP(X).sum()

    def matches(out) -> list[bool]:
        edges, grads = [gradient_edge(out)], [torch.ones_like(out)]
        templates = replay.templates_of(current_compiler())
        return [templates.find(edges, [], grads, True) is not None]

    def bfloat16():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    for learned_inside in (False, True):
        compiled_autograd.reset()
        with compiled_autograd.enable(current_compiler()):
            out = build()
            with bfloat16() if learned_inside else contextlib.nullcontext():
                out.backward()
            out = build()
            with bfloat16():
                assert matches(out) == [learned_inside]
            assert matches(out) == [not learned_inside]


def test_one_node_reached_twice_is_not_two_nodes():
    y = torch.randn(3, 4, requires_grad=True)
    _no_match(lambda: (X * y).sum(), lambda: (X * X).sum())
    _no_match(lambda: (X * X).sum(), lambda: (X * y).sum())


def _sin_then_cos():
    a = X.sin()
    b = X.cos()
    return (a * b).sum()


def _cos_then_sin():  # the same edges; the nodes' sequence numbers in the other order
    b = X.cos()
    a = X.sin()
    return (a * b).sum()


def test_sequence_number_order_is_part_of_the_match():
    _no_match(_sin_then_cos, _cos_then_sin)


def test_hooks_saved_values_dtypes_and_layouts_are_part_of_the_match():
    def hooked():
        h = X.exp()
        h.register_hook(lambda g: g + 1)
        return h.sum()

    _no_match(lambda: X.exp().sum(), hooked)
    _no_match(lambda: X.pow(2).sum(), lambda: X.pow(3).sum())
    _no_match(lambda: X.exp().sum(), lambda: X.double().exp().sum())
    _no_match(lambda: (X.t().contiguous().exp() * 2).sum(), lambda: (X.t().exp() * 2).sum())


def test_a_leaf_hook_added_or_removed_since_is_part_of_the_match():
    handles = []

    def plain():
        return (X @ W).sum()

    def tensor_hooked():
        handles.append(W.register_hook(lambda g: g * 3))
        return plain()

    def post_hooked():
        handles.append(W.register_post_accumulate_grad_hook(lambda p: None))
        return plain()

    def remove_hooks():
        while handles:
            handles.pop().remove()

    try:
        for hooked in (tensor_hooked, post_hooked):
            for learned, other in ((plain, hooked), (hooked, plain)):
                _learn(learned)
                remove_hooks()  # the learned graph's hook is gone before the other graph is built
                with compiled_autograd.enable(current_compiler()):
                    hit, _, _ = _find(other)
                remove_hooks()
                assert hit is None, f"{learned.__name__} then {other.__name__}"
    finally:
        remove_hooks()
        W.grad = None


def test_a_saved_view_with_an_offset_or_other_strides_is_not_a_contiguous_match():
    c = torch.randn(4, 4)  # the saved factor of a product with X: the same graph, only its layout differs
    _no_match(lambda: (X * c[1:].clone()).sum(), lambda: (X * c[1:]).sum())  # offset 4, contiguous
    _no_match(lambda: (X * c[1:, :1].clone()).sum(), lambda: (X * c[1:, :1]).sum())  # a size-1 dim
    _no_match(lambda: (X * c[1:, :1]).sum(), lambda: (X * c[1:, :1].clone()).sum())
    # learned contiguous, then contiguous with a size-1 dim (layout: "dense" with it): the generated shortcut
    _no_match(lambda: (X * c[1:].clone()).sum(), lambda: (X * c[1:, :1].clone()).sum())


def test_only_sizes_differ_a_match_with_other_sizes():
    _learn(lambda: MLP(X).sum())
    with compiled_autograd.enable(current_compiler()):
        hit, collected, _ = _find(lambda: MLP(torch.randn(7, 4, requires_grad=True)).sum())
    _same_as_collect(hit, collected)
    assert graph_cache.serving(hit.entries, hit.sizes) is None  # a miss: the slow way captures


@pytest.mark.parametrize("pair", ["identity", "sequence_order"])
def test_graphs_that_do_not_match_still_behave_as_eager(pair):
    builds = {"identity": [lambda: (X * X.detach().requires_grad_()).sum(), lambda: (X * X).sum()],
              "sequence_order": [_sin_then_cos, _cos_then_sin, _sin_then_cos]}[pair]

    def fn():
        out = []
        for build in builds:
            X.grad = None
            build().backward()
            out.append(X.grad)
        return out

    check(fn)


def _counted_fast_hits(fn) -> int:
    original = replay.Templates.find
    hits = []

    def counting(*args, **kwargs):
        hit = original(*args, **kwargs)
        hits.append(hit is not None)
        return hit

    replay.Templates.find = counting
    try:
        fn()
    finally:
        replay.Templates.find = original
    return sum(hits)


@pytest.mark.all_compilers
def test_training_steps_hit_the_fast_way_and_match_eager():
    def fn():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8),
                                    torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(6, 4)).pow(2).mean().backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    compiled_autograd.reset()
    expected = fn()
    with compiled_autograd.enable(current_compiler()):
        fast = _counted_fast_hits(fn)
        actual = [p for p in fn()]
    assert fast == 4  # the first backward captures, the other four hit the fast way
    assert same(expected, actual)
    assert aotgrad.counters["compiled_autograd"]["captures"] == 1


def _error_of(fn) -> str | None:
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def test_after_a_fast_hit_a_second_backward_raises_eagers_error():
    def fn():
        out = []
        for _ in range(3):
            loss = (X.exp() * W.sum()).sum()
            loss.backward()
            out.append(_error_of(loss.backward))
        return out

    result = check(fn)
    assert result[-1] is not None and "second time" in result[-1]


def test_retain_graph_through_the_fast_way():
    def fn():
        out = []
        for _ in range(3):
            X.grad = None
            loss = (X.exp() * X.sin()).sum()
            loss.backward(retain_graph=True)
            loss.backward()
            out.append(X.grad.clone())
        return out

    check(fn)


def test_a_saved_tensor_modified_in_place_raises_eagers_error_on_a_hit():
    def fn():
        out = []
        for modify in [False, False, True]:
            h = X.clone()
            loss = (h * W.sum()).sum()  # MulBackward0 saves h
            if modify:
                h.add_(1)
            out.append(_error_of(loss.backward))
        return out

    result = check(fn)
    assert result[-1] is not None and "modified by an inplace operation" in result[-1]


def test_user_saved_tensor_hooks_on_a_later_step_are_honoured():
    def fn():
        calls = []
        out = []
        for use_hooks in [False, False, True]:
            X.grad = None
            if use_hooks:
                with torch.autograd.graph.saved_tensors_hooks(lambda t: (calls.append("pack"), t)[1],
                                                              lambda t: (calls.append("unpack"), t)[1]):
                    loss = X.exp().sum()
            else:
                loss = X.exp().sum()
            loss.backward()
            out.append(X.grad.clone())
        return out + [calls]

    check(fn)


def test_a_fast_hit_frees_saved_activations_as_the_backward_runs():
    compiled_autograd.reset()
    with compiled_autograd.enable(current_compiler()):
        for _ in range(2):
            (X.exp().exp() * 2).sum().backward()
        h = X.exp()
        loss = (h.exp() * 2).sum()  # ExpBackward0 saves its result h.exp(); the first saves h
        alive = weakref.ref(h)
        del h
        loss.backward()
        gc.collect()
        assert alive() is None  # the graph (loss) is alive; the activation it saved is not
        assert aotgrad.counters["compiled_autograd"]["hits"] >= 1


def test_threads_sharing_one_compiler_share_its_templates():
    import copy
    import threading

    torch.manual_seed(0)
    models = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)) for _ in range(2)]
    batches = [[torch.randn(5, 4) for _ in range(20)] for _ in range(2)]  # (the threads draw no random numbers)

    def steps(model, data) -> list:
        out = []
        for x in data:
            model.zero_grad()
            model(x).sum().backward()
            out += [p.grad.clone() for p in model.parameters()]
        return out

    expected = [steps(copy.deepcopy(m), d) for m, d in zip(models, batches)]
    compiled_autograd.reset()
    results: dict = {}
    errors: list = []

    def run(k: int) -> None:
        try:
            with compiled_autograd.enable(current_compiler()):
                results[k] = steps(models[k], batches[k])
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(2):
        assert same(expected[k], results[k])
    assert aotgrad.counters["compiled_autograd"]["hits"] >= 30


def _exp_graph(user_hooks: bool):
    def build():
        if not user_hooks:
            return X.exp().sum()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return X.exp().sum()
    return build


@pytest.mark.parametrize("learned_with_hooks", [True, False])
def test_a_node_run_as_is_for_the_users_saved_tensor_hooks_matches_only_with_them(learned_with_hooks):
    """ExpBackward0 runs as is when the user's saved_tensors_hooks packed its result, traced
    otherwise: two keys. The check of each (generated from the same parts) accepts only its own
    (a check written apart from the key once accepted a plain node for a template run as is)."""
    learned, other = _exp_graph(learned_with_hooks), _exp_graph(not learned_with_hooks)
    _learn(learned)
    with compiled_autograd.enable(current_compiler()):
        hit, collected, _ = _find(other)
        assert hit is None
        assert not replay.templates_of(current_compiler()).knows(collected.structure)
        hit, collected, _ = _find(learned)
    _same_as_collect(hit, collected)


def test_every_part_of_the_key_is_read_and_checked_by_the_same_part():
    """key.py: each part has both sides, and the key has one entry per part."""
    from aotgrad.compiled_autograd import key as parts
    for part in parts.HEADER + parts.STEP:
        assert type(part).read is not parts.Part.read and type(part).emit is not parts.Part.emit, part
        assert part.name
    _learn(GRAPHS["mlp"][0])
    (template,) = replay.templates_of(current_compiler())._by_structure.values()
    header = len(parts.HEADER)
    assert all(len(entry) == len(parts.STEP) for entry in template.structure[header:])
