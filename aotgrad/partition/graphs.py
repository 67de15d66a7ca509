"""Graph surgery shared by the partitioners: split a joint graph into its parts,
and build the forward and backward graphs from a chosen saved set.

In: a functional joint graph (placeholders named primals_* and tangents_*).
Out: `JointParts` (which nodes the forward needs, which the backward runs),
and the two GraphModules.
"""
from __future__ import annotations

from dataclasses import dataclass

import operator

import sympy
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor


@dataclass
class JointParts:
    joint: fx.GraphModule
    primals: list[fx.Node]
    tangents: list[fx.Node]
    fw_outputs: list
    grad_outputs: list
    forward_nodes: set        # nodes the forward outputs need (primals included)
    backward_nodes: list      # nodes the grads need that the forward does not compute, in run order
                              # (min-cut may list a recomputed node twice: it runs twice)


def is_tangent(placeholder: fx.Node) -> bool:
    """Is this placeholder of a joint or backward graph a tangent (the joint names them
    `tangents_1`, ...), rather than a primal or a saved value?"""
    return str(placeholder.target).startswith("tangents")


def ancestors(roots) -> set:
    """The nodes among `roots` (other values skipped) and every node they read, transitively."""
    seen: set = set()
    stack = [r for r in roots if isinstance(r, fx.Node)]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def split_joint(joint_gm: fx.GraphModule, num_fwd_outputs: int) -> JointParts:
    placeholders = [n for n in joint_gm.graph.nodes if n.op == "placeholder"]
    primals = [n for n in placeholders if not is_tangent(n)]
    tangents = [n for n in placeholders if is_tangent(n)]
    output = next(n for n in reversed(joint_gm.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    fw_outputs, grad_outputs = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
    forward_nodes = ancestors(fw_outputs)
    # A multi-output op's results are read through getitem; a tuple cannot be saved,
    # so every getitem of a forward op is forward too (it costs nothing).
    for node in list(forward_nodes):
        forward_nodes.update(u for u in node.users if u.target is operator.getitem and u not in forward_nodes
                             and all(a in forward_nodes for a in u.all_input_nodes))
    backward_needed = ancestors(grad_outputs)
    backward_nodes = [n for n in joint_gm.graph.nodes
                      if n in backward_needed and n not in forward_nodes and n.op != "placeholder"]
    return JointParts(joint_gm, primals, tangents, fw_outputs, grad_outputs, forward_nodes, backward_nodes)


def _copy_nodes(graph: fx.Graph, nodes, env: dict) -> None:
    for node in nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])


def with_bare_symbols(parts: JointParts, saved: list[fx.Node]) -> list[fx.Node]:
    """`saved` plus a size node for each symbol the backward's inputs have only inside an
    expression (a saved `[s0*s1, 64]` tensor and nothing of size `s0`): a graph compiler
    such as Inductor binds each symbol from an input that is exactly that symbol.

        before: saved view "f32[s0*s1, 64]"           after: saved view, sym_size(tokens, 0),
                                                              sym_size(tokens, 1)
    """
    values = [n.meta.get("val") for n in [*saved, *parts.tangents]]
    needed, bound = set(), set()
    for val in values:
        for v in _symbolic_parts(val):
            needed |= v.node.expr.free_symbols
            if isinstance(v.node.expr, sympy.Symbol):
                bound.add(v.node.expr)
    missing = needed - bound
    if not missing:
        return saved
    extra = []
    for symbol in sorted(missing, key=str):
        node = _node_for_symbol(parts, symbol)
        if node is not None:
            extra.append(node)
    return saved + extra


def _symbolic_parts(val) -> list:
    if isinstance(val, torch.Tensor):
        return [v for v in (*val.shape, *val.stride(), val.storage_offset()) if isinstance(v, torch.SymInt)]
    return [val] if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) else []


def _node_for_symbol(parts: JointParts, symbol) -> fx.Node | None:
    """A forward node whose value is `symbol`: one in the graph, or a new `sym_size` (stride,
    offset) of the primal that has it."""
    for node in parts.joint.graph.nodes:
        val = node.meta.get("val")
        if node in parts.forward_nodes and isinstance(val, torch.SymInt) and val.node.expr == symbol:
            return node
    for primal in parts.primals:
        val = primal.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        reads = [(torch.ops.aten.sym_size.int, (primal, d), v) for d, v in enumerate(val.shape)]
        reads += [(torch.ops.aten.sym_stride.int, (primal, d), v) for d, v in enumerate(val.stride())]
        reads.append((torch.ops.aten.sym_storage_offset.default, (primal,), val.storage_offset()))
        for op, args, v in reads:
            if isinstance(v, torch.SymInt) and v.node.expr == symbol:
                last_placeholder = list(parts.joint.graph.find_nodes(op="placeholder"))[-1]
                with parts.joint.graph.inserting_after(last_placeholder):
                    node = parts.joint.graph.call_function(op, args)
                node.meta["val"] = v
                parts.forward_nodes.add(node)
                return node
    return None


def saved_in_runtime_order(saved: list[fx.Node]) -> list[fx.Node]:
    """Saved tensors first, then saved sizes (SymInt nodes, under dynamic shapes): the
    runtime keeps the tensors with `save_for_backward` and the sizes as plain ints."""
    sizes = [n for n in saved if _is_size(n)]
    return [n for n in saved if not _is_size(n)] + sizes


def _is_size(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool))


def build_forward(parts: JointParts, saved: list[fx.Node]) -> fx.GraphModule:
    saved = saved_in_runtime_order(saved)
    graph = fx.Graph()
    env: dict = {}
    _copy_nodes(graph, parts.primals, env)
    needed_for_saved = ancestors(saved)
    body = [n for n in parts.joint.graph.nodes
            if (n in parts.forward_nodes or n in needed_for_saved) and n.op != "placeholder"]
    _copy_nodes(graph, _moved_nodes_early(body, parts.forward_nodes), env)
    outputs = [env[o] if isinstance(o, fx.Node) else o for o in parts.fw_outputs]
    graph.output(tuple(outputs + [env[s] for s in saved]))
    gm = fx.GraphModule(parts.joint, graph)
    gm.meta["num_saved"] = len(saved)
    gm.meta["num_saved_sizes"] = sum(_is_size(n) for n in saved)
    return gm


def _moved_nodes_early(body: list[fx.Node], forward_nodes: set) -> list[fx.Node]:
    """`body` (joint order) with each node the partition moved from the backward into the
    forward (a mask `le | ge` saved in place of the float it reads) placed right after its
    inputs instead of after the whole forward: its inputs can die sooner, and a graph
    compiler choosing layouts along the forward keeps the one of its neighbours (Inductor
    gives channels-last only to nodes up to the last convolution; a mask computed after it
    was written NCHW, a transpose per BatchNorm in MobileNetV2).

        joint order:  conv1, bn1, relu1, conv2, bn2, ..., [le(bn1), ge(bn1), or]
        forward:      conv1, bn1, relu1, le(bn1), ge(bn1), or, conv2, bn2, ...
    """
    moved = [n for n in body if n not in forward_nodes]
    if any(n.op == "call_function" and (n.is_impure() or torch.Tag.nondeterministic_seeded in
                                        getattr(n.target, "tags", ())) for n in moved):
        return body  # random numbers are drawn, and effects happen, in the order eager has them
    position = {n: i for i, n in enumerate(body)}
    key: dict = {}
    for n in body:
        if n in forward_nodes:
            key[n] = (position[n], 0, 0)
        else:  # after its latest input; moved nodes sharing one keep their joint order
            latest = max((key[a] for a in n.all_input_nodes if a in key), default=(-1, 0, 0))
            key[n] = (latest[0], 1, position[n])
    return sorted(body, key=key.__getitem__)


def build_backward(parts: JointParts, saved: list[fx.Node]) -> fx.GraphModule:
    saved = saved_in_runtime_order(saved)
    graph = fx.Graph()
    env: dict = {}
    for node in saved:
        placeholder = graph.placeholder(node.name)
        placeholder.meta = dict(node.meta)
        env[node] = placeholder
    _copy_nodes(graph, parts.tangents, env)
    saved_set = set(saved)
    _copy_nodes(graph, [n for n in parts.backward_nodes if n not in saved_set], env)
    graph.output(tuple(env[g] if isinstance(g, fx.Node) else g for g in parts.grad_outputs))
    _drop_detaches(graph)
    _fold_double_transposes(graph)
    _fold_keepdim_sums(graph)
    gm = fx.GraphModule(parts.joint, graph)
    gm.meta["num_saved"] = len(saved)
    return gm


def _drop_detaches(graph: fx.Graph) -> None:
    """`aten.detach` in a backward graph reads as its input: the graph runs with autograd not
    recording (the engine's no_grad, or inside `BackwardOnce`), so a detach changes nothing
    and costs a dispatch. One the graph returns stays (the caller gets an alias of its own).
    A saved value read only through `.data` in eager (detaches the tracer tagged
    `own_version_counter`) keeps that on its placeholder: the runtime saves it with a version
    counter of its own (pipeline._own_counter_results)."""
    for node in graph.find_nodes(op="placeholder"):
        if node.users and all(u.target is torch.ops.aten.detach.default and u.meta.get("own_version_counter")
                              for u in node.users):
            node.meta["read_through_data"] = True
    for node in list(graph.find_nodes(op="call_function", target=torch.ops.aten.detach.default)):
        if all(user.op != "output" for user in node.users):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)


def _fold_double_transposes(graph: fx.Graph) -> None:
    """`t(t(x))` reads as `x`: the same values, sizes and strides in the same memory, one op
    per `t` fewer (eager's linear backward makes these chains: the gradient of `t(weight)` is
    made in its transposed layout, `t(mm(...))`, and `t`'s backward turns it back). A chain
    the graph returns keeps returning a view unless `x` is made in the graph: a gradient is
    never a saved tensor or a constant itself."""
    transpose = torch.ops.aten.t.default
    for node in list(graph.find_nodes(op="call_function", target=transpose)):
        inner = node.args[0]
        if not (isinstance(inner, fx.Node) and inner.op == "call_function" and inner.target is transpose):
            continue
        x = inner.args[0]
        returned = any(user.op == "output" for user in node.users)
        if returned and (not isinstance(x, fx.Node) or x.op in ("placeholder", "get_attr") or _may_alias_input(x)):
            continue
        node.replace_all_uses_with(x)
        graph.erase_node(node)
        if not inner.users:
            graph.erase_node(inner)


def _fold_keepdim_sums(graph: fx.Graph) -> None:
    """`view(sum(x, dims, keepdim=True), shape)`, where `shape` is the sum's shape without the
    summed dims and one-dimensional, reads as `sum(x, dims, keepdim=False)`: the same kernel,
    values and layout, one op fewer (eager's bias gradient, `sum_to_size`)."""
    summing = torch.ops.aten.sum.dim_IntList
    for node in list(graph.find_nodes(op="call_function", target=summing)):
        if len(node.args) < 3 or node.args[2] is not True or len(node.users) != 1 or not node.args[1]:
            continue
        [view] = node.users
        kept = node.meta.get("val")
        if view.target is not torch.ops.aten.view.default or not isinstance(kept, torch.Tensor):
            continue
        result = view.meta.get("val")
        dims = {d % kept.dim() for d in node.args[1]} if kept.dim() else None
        if dims is None or not isinstance(result, torch.Tensor) or result.dim() != 1 \
                or not all(type(s) is int for s in (*kept.shape, *view.args[1])):
            continue
        if list(view.args[1]) != [s for i, s in enumerate(kept.shape) if i not in dims]:
            continue
        node.args = (node.args[0], node.args[1], False, *node.args[3:])
        source = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        if isinstance(source, FakeTensor):  # the new sum's own fake (the view's has a `_base`)
            with source.fake_mode:
                result = summing(source, *node.args[1:], **node.kwargs)
        node.meta["val"] = result
        view.replace_all_uses_with(node)
        graph.erase_node(view)


def _may_alias_input(node: fx.Node) -> bool:
    """Does this op's result share memory with its first argument? (views, and
    `_unsafe_view`, which aliases in eager although its schema does not say so)."""
    target = node.target
    return node.op == "call_function" and (
        getattr(target, "is_view", False) or target is torch.ops.aten._unsafe_view.default
        or (target is operator.getitem and _may_alias_input(node.args[0])))


def copy_saved_aliases(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, mutated_inputs: set[int]) -> fx.GraphModule:
    """Save a copy of every saved value that shares memory with a mutated input.

    The runtime writes a mutated input's new value back into the caller's tensor after
    the forward; a saved value still viewing that tensor would then hold the new value
    (and trip autograd's version check), where the backward needs the old one.
    """
    if not mutated_inputs:
        return fw_gm
    graph = fw_gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    aliases = {placeholders[i] for i in mutated_inputs}
    for node in graph.nodes:
        if _may_alias_input(node) and node.args and node.args[0] in aliases:
            aliases.add(node)
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    num_saved = sum(n.op == "placeholder" and not is_tangent(n) for n in bw_gm.graph.nodes)
    first_saved = len(outs) - num_saved
    for k in range(first_saved, len(outs)):
        if outs[k] in aliases:
            with graph.inserting_before(output):
                copy = graph.call_function(torch.ops.aten.clone.default, (outs[k],))
            copy.meta = {**outs[k].meta, "val": outs[k].meta["val"].clone()}
            outs[k] = copy
    output.args = (tuple(outs),)
    fw_gm.recompile()
    return fw_gm


UNKNOWN_NUMEL = 4096  # elements assumed for a data-dependent size (no example value to go by)


def tensor_bytes(val) -> int:
    """Bytes of a tensor value; symbolic sizes count at the example's values (their hints)."""
    if isinstance(val, torch.Tensor):
        return size_hint(val.numel()) * val.element_size()
    return 0


def size_hint(n) -> int:
    """An int, or a SymInt at the example's value (UNKNOWN_NUMEL if data-dependent)."""
    if not isinstance(n, torch.SymInt):
        return int(n)
    hint = n.node.hint
    return UNKNOWN_NUMEL if hint is None else int(hint)
