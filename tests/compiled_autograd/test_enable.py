"""`compiled_autograd.enable(compiler_fn)` checks at entry that `compiler_fn(gm)` is a possible
call. PyTorch's compiled autograd raises a bare TypeError from deep inside the first backward
for such a compiler (`functorch.compile.nop`); aotgrad raises a TypeError too, at `enable`,
saying what was passed, how compiler_fn is called and what to pass instead."""
import functools

import pytest
import torch

import aotgrad
from aotgrad import compiled_autograd
from aotgrad.errors import AotgradError, CompilerSignatureError

pytestmark = pytest.mark.one_compiler  # enable() itself, not a backward


def _step(x):
    (x.sin() * x).sum().backward()


def _eager_grad(x):
    x = x.detach().requires_grad_()
    _step(x)
    return x.grad


def test_pytorch_compiled_autograd_raises_a_type_error_for_a_two_argument_compiler():
    """The reference: PyTorch's compiled autograd fails in the backward with TypeError."""
    from functorch.compile import nop
    from torch._dynamo import compiled_autograd as pytorch_compiled_autograd

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        with pytorch_compiled_autograd._enable(nop):
            _step(x)


def test_aotgrad_nop_is_rejected_at_enable_with_what_to_pass_instead():
    engine = torch.autograd.Variable._execution_engine
    with pytest.raises(CompilerSignatureError) as caught:
        compiled_autograd.enable(aotgrad.nop)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, AotgradError)
    message = str(caught.value)
    assert message.startswith("compiled_autograd.enable(compiler_fn) got aotgrad.nop(gm, example_inputs), "
                              "which cannot be called with one argument (it has the signature of a graph "
                              "compiler for aot_function or torch.compile")
    assert "Compiled autograd calls compiler_fn(gm) with the captured backward as one torch.fx.GraphModule, " \
           "and runs the callable it returns." in message
    assert "`lambda gm: gm`" in message and '`lambda gm: torch.compile(gm, backend="inductor")`' in message
    assert "defined at" not in message  # aotgrad's own function: no user line to show
    assert torch.autograd.Variable._execution_engine is engine  # nothing was installed


def test_a_users_two_argument_compiler_names_its_line():
    def my_backend(gm, example_inputs):
        return gm

    with pytest.raises(TypeError, match=r"got .*my_backend\(gm, example_inputs\), which cannot be called") as caught:
        compiled_autograd.enable(my_backend)
    line = my_backend.__code__.co_firstlineno
    assert str(caught.value).endswith(f"compiler_fn defined at {__file__}:{line}")


def test_a_compiler_without_arguments_is_rejected():
    with pytest.raises(CompilerSignatureError, match=r"got .*<lambda>\(\), which cannot be called with one argument\."):
        compiled_autograd.enable(lambda: None)


def test_a_backend_name_is_rejected_as_not_callable():
    with pytest.raises(CompilerSignatureError, match=r"got 'inductor', which cannot be called with one argument "
                                                     r"\(it is not callable\)"):
        compiled_autograd.enable("inductor")


class _CallableCompiler:
    def __call__(self, gm):
        return gm


def _two_arguments(gm, example_inputs):
    return gm


@pytest.mark.parametrize("compiler_fn", [
    lambda gm: gm,
    lambda gm, example_inputs=None: gm,
    lambda *args: args[0],
    functools.partial(_two_arguments, example_inputs=None),
    _CallableCompiler(),
], ids=["one_argument", "second_with_default", "var_positional", "partial", "callable_object"])
def test_compilers_callable_with_one_graph_train_like_eager(compiler_fn):
    x = torch.randn(5)
    expected = _eager_grad(x)
    compiled_autograd.reset()
    leaf = x.clone().requires_grad_()
    with compiled_autograd.enable(compiler_fn):
        _step(leaf)
    assert torch.equal(leaf.grad, expected)
    assert aotgrad.counters["compiled_autograd"]["compiles"] == 1
