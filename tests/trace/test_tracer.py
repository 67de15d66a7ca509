"""The recorder: which forward op each backward node differentiates (seq_nr, forward_op),
and what tracing keeps away from the user's program (saved-tensor hooks)."""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

import aotgrad
from aotgrad.joint import trace_joint
from aotgrad.trace import fake_mode_for, to_fake
from tests.oracle import assert_same_as_eager


def _joint(fn, *args) -> fx.GraphModule:
    mode = fake_mode_for(args)
    fakes = [to_fake(mode, a) for a in args]
    return trace_joint(lambda *v: [fn(*v)], fakes, fake_mode=mode, trace_backward=True).gm


def _calls(gm: fx.GraphModule, *, backward: bool) -> list[fx.Node]:
    return [n for n in gm.graph.nodes
            if n.op == "call_function" and bool(n.meta.get("is_backward")) == backward]


def _forward_op_by_autograd_node(gm: fx.GraphModule) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for node in _calls(gm, backward=True):
        found.setdefault(node.meta["autograd_node"], set()).add(node.meta.get("forward_op"))
    return found


class _BatchNormLinearDetach(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.bn(x)                     # also num_batches_tracked.add_(1): no autograd node
        scale = y.detach().abs().mean()    # detach, then ops on a tensor that needs no grad
        return self.fc(y) * scale


def _joint_of_batch_norm_linear_detach() -> fx.GraphModule:
    joints = []

    def capture_joint(joint_gm, joint_inputs, *, num_fwd_outputs):
        joints.append(joint_gm)
        return aotgrad.default_partition(joint_gm, joint_inputs, num_fwd_outputs=num_fwd_outputs)

    torch.manual_seed(0)
    out = aotgrad.aot_module(_BatchNormLinearDetach(), aotgrad.nop, partition_fn=capture_joint)(
        torch.randn(5, 4, requires_grad=True))
    out.sum().backward()
    (joint,) = joints
    return joint


def test_every_backward_node_names_the_forward_op_it_differentiates():
    assert _forward_op_by_autograd_node(_joint_of_batch_norm_linear_detach()) == {
        "MulBackward0": {"aten.mul.Tensor"},
        "AddmmBackward0": {"aten.addmm.default"},
        "TBackward0": {"aten.t.default"},
        "NativeBatchNormBackward0": {"aten.native_batch_norm.default"},
    }


def test_ops_that_make_no_autograd_node_carry_the_last_nodes_seq_nr():
    """As in PyTorch's traces: every forward op has a seq_nr; one that made no autograd node
    (BatchNorm's counter add, detach, ops on a tensor that needs no grad) carries the number of
    the last node made before it, and only the op that made a node stands for it."""
    joint = _joint_of_batch_norm_linear_detach()
    forward = [n for n in _calls(joint, backward=False) if n.target is not operator.getitem]
    table = [(str(n.target), n.meta["seq_nr"]) for n in forward]
    first = table[0][1]
    # in the functional joint, num_batches_tracked.add_(1) has become add, before batch norm's node
    assert [(op, seq - first) for op, seq in table] == [
        ("aten.add.Tensor", 0), ("aten._native_batch_norm_legit_functional.default", 1),
        ("aten.detach.default", 1),
        ("aten.abs.default", 1), ("aten.mean.default", 1), ("aten.t.default", 2), ("aten.addmm.default", 3),
        ("aten.mul.Tensor", 4)], table
    backward_seq_nrs = {n.meta["seq_nr"] for n in _calls(joint, backward=True)}
    made_a_node = [seq for op, seq in table if op not in ("aten.add.Tensor", "aten.detach.default",
                                                          "aten.abs.default", "aten.mean.default")]
    assert len(made_a_node) == len(set(made_a_node)), "each autograd node stands for one forward op"
    assert backward_seq_nrs <= set(made_a_node), (backward_seq_nrs, made_a_node)


def test_in_place_write_to_a_view_is_differentiated_by_its_copy_slices():
    def fn(x):
        y = x * 2
        y[0].mul_(3)
        return y.sin()

    found = _forward_op_by_autograd_node(_joint(fn, torch.randn(2, 3, requires_grad=True)))
    assert found["torch::autograd::CopySlices"] == {"aten.mul_.Tensor"}
    assert found["SinBackward0"] == {"aten.sin.default"}


class _TimesThree(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone().mul_(3)

    @staticmethod
    def backward(ctx, grad):
        return grad * 3


def test_custom_function_backward_names_the_op_that_made_its_output():
    found = _forward_op_by_autograd_node(_joint(lambda x: _TimesThree.apply(x).cos(),
                                                torch.randn(3, requires_grad=True)))
    assert found["_TimesThreeBackward"] == {"aten.mul_.Tensor"}
    assert found["CosBackward0"] == {"aten.cos.default"}


def _scaled_sine(x, w):
    return (x * w).sin()


def test_users_saved_tensor_hooks_do_not_run_while_tracing():
    packed: list[type] = []

    def pack(t):
        packed.append(type(t))
        return t

    compiled = aotgrad.aot_function(_scaled_sine, aotgrad.nop)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        compiled.precompile(torch.randn(4, 3), torch.randn(3, requires_grad=True))
    assert packed == []


def test_users_saved_tensor_hooks_run_at_run_time_on_what_the_compiled_function_saves():
    # as in PyTorch's AOTAutograd: the hooks are deferred to run time, where they apply
    # to the compiled autograd.Function's saved tensors (real ones)
    packed: list[type] = []
    unpacked: list[torch.Size] = []

    def pack(t):
        packed.append(type(t))
        return t.clone()

    def unpack(t):
        unpacked.append(t.shape)
        return t

    x, w = torch.randn(4, 3), torch.randn(3, requires_grad=True)
    compiled = aotgrad.aot_function(_scaled_sine, aotgrad.nop)
    compiled.precompile(x, w)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        compiled(x, w).sum().backward()
    assert packed and all(t is torch.Tensor for t in packed), packed
    assert len(unpacked) == len(packed)


def test_results_under_users_saved_tensor_hooks_equal_eager():
    def pack(t):
        return t.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        assert_same_as_eager(_scaled_sine, [torch.randn(4, 3), torch.randn(3, requires_grad=True)])


def _sine_with_bfloat16_saved_values(x, w):
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.to(torch.bfloat16), lambda t: t.to(torch.float32)):
        return (x * w).sin()


def test_saved_tensor_hooks_pushed_by_the_traced_code_are_traced():
    # they are part of the user's program: the compiled backward sees the rounded values
    x, w = torch.randn(4, 3), torch.randn(3, requires_grad=True)
    assert_same_as_eager(_sine_with_bfloat16_saved_values, [x, w])
    rounded = torch.autograd.grad(_sine_with_bfloat16_saved_values(x, w).sum(), w)[0]
    exact = torch.autograd.grad(_scaled_sine(x, w).sum(), w)[0]
    assert not torch.allclose(rounded, exact, atol=1e-5, rtol=1e-5), "the hooks change the grads"


def test_views_written_under_no_grad_are_traced_without_reading_their_grad_fn():
    # reading grad_fn of such a view regenerates it: "A view was created in no_grad mode ..."
    # for a view made under no_grad, "new_fn INTERNAL ASSERT" below the autograd key otherwise
    def made_and_written_under_no_grad(a):
        with torch.no_grad():
            v = a[:2]
            detached = v.detach()
            v.mul_(2)
        return a * 1, detached

    def written_under_no_grad(a):
        v = a.unsqueeze(-1)
        with torch.no_grad():
            v.mul_(2)
        return v.amax(0) * 3

    assert_same_as_eager(made_and_written_under_no_grad, [torch.randn(3, requires_grad=True)])
    assert_same_as_eager(written_under_no_grad, [torch.randn(3, requires_grad=True) * 1])


def test_copy_of_a_tensor_to_itself_leaves_earlier_views_readable():
    def fn(a):
        v = a.reshape(8)  # noqa: F841  (its grad_fn is read after the copy bumped a's version)
        a.copy_(a)
        return a.squeeze(2).sum() * 2

    assert_same_as_eager(fn, [torch.randn(2, 4, 1, requires_grad=True) * 1])


def test_views_under_torch_compile_get_eagers_strides_on_size_one_dims():
    # Dynamo traces with the python dispatcher on, whose kernel for `expand` of a 0-d tensor
    # gives stride (1,) where eager's C++ kernel gives (0,), and leaves that in the fake
    # cache; aotgrad's trace must take the C++ kernel's strides, which the runtime rebuilds
    # views with.
    def f(a):
        v1 = a.sum().expand(1)
        return v1.movedim(0, 0), v1.detach().detach()

    torch._dynamo.reset()
    a = torch.randn(3, requires_grad=True)
    expected = f(a)
    actual = torch.compile(f, backend="aotgrad")(a)
    assert [t.stride() for t in actual] == [t.stride() for t in expected] == [(0,), (0,)]
    assert_same_as_eager(f, [a], torch.compile(f, backend="aotgrad"))


def test_a_composite_op_inside_a_decomposition_is_recorded_as_what_it_is_made_of():
    # nll_loss's decomposition calls `.to(device, dtype)` (aten.to, a composite op) below
    # autograd, where it reached the tracer whole; Inductor lowers aten.to as a call of its own
    # (a kernel boundary: the loss's division got a kernel of its own). Eager breaks it up.
    from torch._inductor.decomposition import select_decomp_table

    graphs = {}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = gm
            return gm
        return compiler

    def loss(logits, target):
        return torch.nn.functional.cross_entropy(logits, target)

    torch.manual_seed(0)
    logits, target = torch.randn(4, 5, requires_grad=True), torch.tensor([1, -100, 3, 0])
    compiled = aotgrad.aot_function(loss, keep("forward"), keep("backward"), decompositions=select_decomp_table())
    got = compiled(logits, target)
    got.backward()
    expected_logits = logits.detach().clone().requires_grad_()
    expected = loss(expected_logits, target)
    expected.backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(logits.grad, expected_logits.grad)
    targets = {n.target for gm in graphs.values() for n in gm.graph.nodes}
    assert torch.ops.aten.to.device not in targets and torch.ops.aten.to.dtype not in targets, targets
    assert torch.ops.prims.convert_element_type.default in targets
