"""Every test of this folder runs under several compilers: the `compiler` fixture (autouse),
parametrized here. helpers.py's docstring says which test runs under which compiler and why;
`-m compilers` runs the rest of the matrix (every test under every compiler)."""
import pytest
import torch

from aotgrad import compiled_autograd
from tests.compiled_autograd import helpers

FULL_MATRIX = "compilers"


def pytest_generate_tests(metafunc):
    if "compiler" not in metafunc.fixturenames:
        return
    one = metafunc.definition.get_closest_marker("one_compiler") is not None
    names = ["identity"] if one else list(helpers.COMPILERS)
    metafunc.parametrize("compiler", names, indirect=True)


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection sees the marks
def pytest_collection_modifyitems(config, items):
    kept, deselected = [], []
    asked = FULL_MATRIX in (config.getoption("-m") or "")
    for item in items:
        name = getattr(getattr(item, "callspec", None), "params", {}).get("compiler", "identity")
        if name not in helpers.DEFAULT and item.get_closest_marker("all_compilers") is None:
            item.add_marker(FULL_MATRIX)
            if not asked:
                deselected.append(item)
                continue
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(autouse=True)
def compiler(request):
    """The test's compiler_fn (also `helpers.current_compiler()`), with compiled autograd's
    caches and Dynamo's emptied before the test."""
    name = getattr(request, "param", "identity")
    helpers.set_compiler(name)
    compiled_autograd.reset()
    if name != "identity":
        torch._dynamo.reset()
    # PyTorch's AOTAutograd (under Inductor) checks that no custom op's result aliases an input
    # (a warning today): an error here, so aotgrad's call_out op keeps that promise
    with torch._functorch.config.patch(error_on_custom_op_aliasing=True):
        yield helpers.current_compiler()
    helpers.set_compiler("identity")
    compiled_autograd.reset()
