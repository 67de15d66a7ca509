"""Hooks under compiled autograd, against eager: each runs once, in the engine's order, may
change the gradient, and is part of the cache key (how many, where; not which function)."""
import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from tests.compiled_autograd.helpers import check, current_compiler


def test_tensor_hook_on_a_leaf_changes_what_is_accumulated():
    def fn():
        x = torch.randn(3, requires_grad=True)
        x.register_hook(lambda g: g * 2)
        (x * x).sum().backward()
        return [x.grad]

    check(fn)


def test_tensor_hook_on_a_non_leaf_and_none_keeps_the_gradient():
    def fn():
        seen = []
        x = torch.randn(3, requires_grad=True)
        h = x * 3
        h.register_hook(lambda g: g + 1)
        h.register_hook(lambda g: seen.append(g.clone()))  # returns None
        (h.sin()).sum().backward()
        return [x.grad, seen]

    check(fn)


def test_non_leaf_hook_fires_after_the_tensor_is_gone():
    def make(x):
        h = x * 3
        h.register_hook(lambda g: g * 10)
        return h.sum()  # h dies here; its hook stays on the node

    def fn():
        x = torch.randn(3, requires_grad=True)
        make(x).backward()
        return [x.grad]

    check(fn)


def test_node_pre_hooks_chain_and_post_hooks_see_their_result():
    def fn():
        seen = []
        x = torch.randn(3, requires_grad=True)
        y = x.sin()
        for _ in range(3):
            y.grad_fn.register_prehook(lambda gs: (gs[0] * 2,))
        y.grad_fn.register_prehook(lambda gs: None)
        y.grad_fn.register_hook(lambda gi, go: seen.append((gi[0].clone(), go[0].clone())))
        y.grad_fn.register_hook(lambda gi, go: (gi[0] + go[0],))
        y.sum().backward()
        return [x.grad, seen]

    check(fn)


def test_accumulate_grad_hooks_observe_the_tensor_hook():
    def fn():
        seen = []
        a = torch.randn(3, requires_grad=True)
        a.register_hook(lambda g: g * 2)
        acc = torch.autograd.graph.get_gradient_edge(a).node
        acc.register_prehook(lambda gs: seen.append(("pre", len(gs), gs[0].clone())))
        acc.register_hook(lambda gi, go: seen.append(("post", len(gi), go[0].clone())))
        (a * 1).sum().backward()
        return [a.grad, seen]

    check(fn)


def test_post_accumulate_grad_hook_sees_the_new_grad():
    def fn():
        seen = []
        w = torch.randn(3, requires_grad=True)
        w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
        (w * w).sum().backward()
        (w * 3).sum().backward()
        return [w.grad, seen]

    check(fn)


@pytest.mark.all_compilers
def test_optimizer_step_inside_post_accumulate_hooks_matches_eager():
    def fn():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        optimizers = {p: torch.optim.Adam([p], lr=0.01) for p in model.parameters()}

        def step(p):
            optimizers[p].step()
            optimizers[p].zero_grad()

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(step)
        x = torch.randn(5, 4)
        for _ in range(5):
            model(x).pow(2).sum().backward()
        return [p.detach().clone() for p in model.parameters()]

    check(fn)


@pytest.mark.all_compilers
def test_module_full_backward_hook():
    def fn():
        seen = []
        m = torch.nn.Linear(3, 3)
        m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi[0].clone(), go[0].clone())))
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))
        x = torch.randn(2, 3, requires_grad=True)
        m(x).sum().backward()
        return [x.grad, m.weight.grad, seen]

    check(fn)


def test_hooks_added_or_removed_cause_a_new_capture_and_same_hooks_hit():
    compiled_autograd.reset()
    w = torch.randn(3, requires_grad=True)
    grads = []
    with compiled_autograd.enable(current_compiler()):
        for i in range(5):
            w.grad = None
            y = w * 2
            if i in (1, 2):  # a hook on iterations 1 and 2 only (a new function each time)
                y.register_hook(lambda g: g * 10)
            y.sum().backward()
            grads.append(w.grad.clone())
    assert [g[0].item() for g in grads] == [2.0, 20.0, 20.0, 2.0, 2.0]
    assert aotgrad.counters["compiled_autograd"]["captures"] == 2


def test_hook_removed_before_backward_does_not_run_and_during_it_still_runs():
    def fn():
        counter = [0]
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        removed = y.grad_fn.register_prehook(lambda gs: counter.__setitem__(0, counter[0] + 100))
        removed.remove()
        handles = []

        def first(gs):
            counter[0] += 1
            handles[0].remove()

        def second(gs):
            counter[0] += 10

        y.grad_fn.register_prehook(first)
        handles.append(y.grad_fn.register_prehook(second))
        y.sum().backward()
        return [x.grad, counter[0]]

    assert check(fn)[1] == 11


def test_hooks_on_old_and_new_versions_of_a_tensor_written_in_place():
    def fn():
        seen = []
        a = torch.ones(3, requires_grad=True)
        b = a * 2
        b.register_hook(lambda g: seen.append(("old", g.clone())))
        b.mul_(2)
        b.register_hook(lambda g: seen.append(("new", g.clone())))
        (b * 1).sum().backward()
        return [a.grad, seen]

    check(fn)


def test_hook_result_of_the_wrong_size_is_eagers_error():
    import pytest
    x = torch.randn(3, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: torch.zeros(4))
    with compiled_autograd.enable(current_compiler()):
        with pytest.raises(RuntimeError, match="has changed the size of value"):
            y.sum().backward()


def test_tensor_hook_runs_with_no_gradient_as_in_eager():
    def fn():
        seen = []
        x = torch.randn(2, 3, requires_grad=True)
        a, b = x.unbind(0)
        b.register_hook(lambda g: seen.append(g))
        a.sum().backward()
        return [x.grad, seen]

    check(fn)


def test_node_hook_results_get_eagers_checks():
    import pytest
    cases = [(lambda gs: (gs[0][:1],), RuntimeError, "has changed the size of value"),
             (lambda gs: gs[0], TypeError, "expected tuple, but hook returned 'Tensor'"),
             (lambda gs: (gs[0], gs[0]), RuntimeError, "incorrect number of values")]
    for hook, error, message in cases:
        for compiled in (False, True):
            x = torch.randn(3, requires_grad=True)
            w = torch.randn(3, requires_grad=True)
            y = x * w
            y.grad_fn.register_prehook(hook)
            with compiled_autograd.enable(current_compiler()) if compiled else torch.enable_grad():
                with pytest.raises(error, match=message):
                    y.sum().backward()


@pytest.mark.parametrize("returns", ["the leaf", "a detached leaf", "another tensor", "another size",
                                     "another dtype", "an int"])
def test_a_post_accumulate_hook_returning_a_value_fails_as_in_eager(returns):
    """Eager allows a post-accumulate-grad hook to return the leaf itself; anything else is
    eager's size/type error, or after the hooks ran, "should return None" (before session 10,
    compiled autograd ignored what these hooks returned)."""
    result = {"the leaf": lambda p: p, "a detached leaf": lambda p: p.detach(),
              "another tensor": lambda p: torch.zeros(3), "another size": lambda p: torch.zeros(4),
              "another dtype": lambda p: torch.zeros(3, dtype=torch.float64), "an int": lambda p: 5}[returns]

    def fn():
        p = torch.nn.Parameter(torch.ones(3))
        p.register_post_accumulate_grad_hook(result)
        try:
            (p * 2).sum().backward()
            return ["no error", p.grad]
        except (RuntimeError, TypeError) as e:
            return [type(e).__name__, str(e)]

    outcome = check(fn)
    assert (outcome[0] == "no error") == (returns == "the leaf")
