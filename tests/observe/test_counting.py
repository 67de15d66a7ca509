"""`aotgrad.counters` (aotgrad/observe/counting.py) has the manners of `torch._dynamo.utils.counters`:
a mapping of Counters where a missing key reads 0 and `.clear()`, on the mapping or on one
group, stops nothing from counting afterwards (PyTorch's tests clear their counters so)."""
import importlib
import pkgutil
from collections import Counter

import torch

import aotgrad
from aotgrad import compiled_autograd


def _backward(x):
    (x.sin() * 2).sum().backward()


def test_counters_are_a_mapping_of_counters_like_dynamos():
    dynamo = torch._dynamo.utils.counters
    assert type(aotgrad.counters) is type(dynamo) and aotgrad.counters.default_factory is dynamo.default_factory
    assert aotgrad.counters["no such group"]["no such name"] == 0
    assert dynamo["no such group"]["no such name"] == 0
    assert isinstance(aotgrad.counters["compiled_autograd"], Counter)


def test_clearing_the_whole_mapping_keeps_compiled_autograd_counting():
    x = torch.randn(4, requires_grad=True)
    _backward(x)
    eager = x.grad.clone()
    compiled_autograd.reset()
    compiler = lambda gm: gm  # noqa: E731  (graphs are cached per compiler)
    with compiled_autograd.enable(compiler):
        x.grad = None
        _backward(x)
        assert aotgrad.counters["compiled_autograd"]["captures"] == 1
        aotgrad.counters.clear()
        assert aotgrad.counters["compiled_autograd"]["captures"] == 0
        x.grad = None
        _backward(x)  # from the cache
        assert aotgrad.counters["compiled_autograd"]["hits"] == 1
        (x.cos() * 3).sum().backward()  # a new structure: captured and compiled
        assert aotgrad.counters["compiled_autograd"]["captures"] == 1
        assert aotgrad.counters["compiled_autograd"]["compiles"] == 1
    x.grad = None
    with compiled_autograd.enable(compiler):
        _backward(x)
    assert torch.equal(x.grad, eager)
    assert aotgrad.counters["compiled_autograd"]["hits"] == 2


def test_clearing_one_group_keeps_it_counting():
    x = torch.randn(4, requires_grad=True)
    compiled_autograd.reset()
    with compiled_autograd.enable(lambda gm: gm):
        _backward(x)
        aotgrad.counters["compiled_autograd"].clear()
        _backward(x)
    assert aotgrad.counters["compiled_autograd"] == Counter(hits=1)


def test_reset_zeroes_the_compiled_autograd_group_only():
    aotgrad.counters["disk_cache"]["hits"] += 0  # the group exists
    before = Counter(aotgrad.counters["disk_cache"])
    x = torch.randn(4, requires_grad=True)
    with compiled_autograd.enable(lambda gm: gm):
        _backward(x)
    compiled_autograd.reset()
    assert aotgrad.counters["compiled_autograd"]["captures"] == 0
    assert aotgrad.counters["disk_cache"] == before


def test_clearing_the_whole_mapping_keeps_the_disk_cache_counting():
    def step(x):
        return (x.exp() * 5).sum()

    aotgrad.counters.clear()
    torch._dynamo.reset()
    torch.compile(step, backend="aotgrad")(torch.randn(3, requires_grad=True)).backward()
    assert aotgrad.counters["disk_cache"]["misses"] + aotgrad.counters["disk_cache"]["hits"] >= 1


def test_every_module_counts_in_the_one_mapping():
    """No module keeps counters of its own (a clear() of aotgrad.counters would miss them)."""
    names = [m.name for m in pkgutil.walk_packages(aotgrad.__path__, "aotgrad.") if not m.name.endswith("__main__")]
    modules = [importlib.import_module(name) for name in names]
    own = [m.__name__ for m in modules if hasattr(m, "counters") and m.counters is not aotgrad.counters
           and not isinstance(m.counters, type(importlib))]
    assert own == []
