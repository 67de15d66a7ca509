"""Bytes for the disk cache (disk_cache.py): pickle, with what pickle cannot do itself encoded.

In: plain data holding fx.GraphModules whose node metadata holds fake tensors (a `Partitioned`).
Out: bytes, and back, the fake tensors made in the loading process's fake mode.

    GraphModule      -> node table (op, name, target, args with node references, kept meta),
                        the attributes its get_attr nodes read, gm.meta, and FX's generated code
    aten op          -> its name ("aten", "add", "Tensor"), found again in torch.ops
    public closure   -> its module and public name: F.max_pool2d, which boolean_dispatch made
                        (a local function pickle cannot name), is ("torch.nn.functional", "max_pool2d")
    fake tensor      -> its layout (sizes, strides, offset, dtype, device, requires_grad); fakes
                        that shared a storage share one again; one object stays one object
    real constant    -> its bytes
    SymInt, a user's function or class, anything else pickle refuses -> NotStorable

Loading builds each graph directly (no tracing) and hands FX the code it generated when the
graph was stored, so nothing is traced or generated again. The unpickler only names torch's,
aotgrad's and Python's own classes and functions (and already imported nn.Module classes, in
metadata). That keeps foreign pickles out, but a pickle can still call what it names: whoever
can write the cache folder could run code in the processes that read it, so cache_folder.py
reads nothing from a folder or file that anyone but the current user may write.
"""
from __future__ import annotations

import importlib
import io
import pickle
import sys
import threading
import types
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.experimental import _config as fx_experimental_config
from torch.utils._mode_utils import no_dispatch

# node.meta keys a stored graph keeps: those aotgrad's stages, printer and backends read
# (trace/tracer.py documents them), and the source metadata copied from torch.compile's graph
NODE_META = ("val", "stack_trace", "seq_nr", "nn_module_stack", "source_fn_stack", "original_aten",
             "grad_enabled", "is_backward", "autograd_node", "forward_op", "captured_constant")
# modules whose functions and classes a payload may name (the unpickler refuses others)
TRUSTED_MODULES = ("torch", "aotgrad", "builtins", "copyreg", "collections", "_operator", "operator", "math",
                   "functools", "enum", "_codecs")


class NotStorable(Exception):
    """A value in the data cannot be stored (the message says which and why)."""


class BadPayload(Exception):
    """The bytes are not what `dumps` writes for this torch and aotgrad."""


def dumps(obj: Any, graphs: list) -> bytes:
    """`obj` as bytes; `graphs` are the GraphModules in it whose fake tensors may share storages."""
    buffer = io.BytesIO()
    _Pickler(buffer, _shared_storages(graphs)).dump(obj)
    return buffer.getvalue()


def loads(payload: bytes, fake_mode, module_keys: dict) -> Any:
    """`dumps`'s object, its fake tensors in `fake_mode`, the nn_module_stack keys of its graphs
    replaced by `module_keys`' ((module path, type name) -> this process's key)."""
    _loading.fake_mode, _loading.storages, _loading.module_keys = fake_mode, {}, module_keys
    try:
        return _Unpickler(io.BytesIO(payload)).load()
    finally:
        _loading.fake_mode = _loading.storages = _loading.module_keys = None


_loading = threading.local()  # the load in progress: its fake mode, storages made, module keys


def stable_repr(value) -> str:
    """repr, with functions, classes and ops by qualified name (their repr may hold an address)."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(stable_repr(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{stable_repr(k)}: {stable_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(value)
    if isinstance(value, torch._ops.HigherOrderOperator):
        return f"torch.ops.higher_order.{value.name()}"
    public = public_name(value)
    if public is not None:
        return ".".join(public)
    qualname = getattr(value, "__qualname__", None)
    if isinstance(qualname, str) and callable(value):
        return f"{getattr(value, '__module__', None)}.{qualname}"
    return repr(value)


def public_name(fn) -> tuple[str, str] | None:
    """(module, name) of a local function of torch's that its module exports under its name, else
    None. boolean_dispatch (torch._jit_internal) makes F.max_pool1d/2d/3d, F.adaptive_max_pool*
    and F.fractional_max_pool* as closures: their qualified name, "boolean_dispatch.<locals>.fn",
    neither tells them apart nor finds them again, their public name does both."""
    if not isinstance(fn, types.FunctionType) or "<locals>" not in fn.__qualname__ or not _trusted(fn):
        return None
    module = sys.modules.get(fn.__module__)
    return (fn.__module__, fn.__name__) if getattr(module, fn.__name__, None) is fn else None


def kind_name(kind) -> str:
    """A module type in nn_module_stack by name (a loaded one may be its name already)."""
    return kind if isinstance(kind, str) else stable_repr(kind)


def tensor_data(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _trusted(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in TRUSTED_MODULES


# -- writing ------------------------------------------------------------------

def _shared_storages(graphs: list) -> set[int]:
    """The storages (by `_cdata`) that several fake tensors in the graphs' metadata share."""
    seen: dict[int, set[int]] = {}
    for gm in graphs:
        for module in gm.modules() if gm is not None else ():
            if isinstance(module, fx.GraphModule):
                for node in module.graph.nodes:
                    for t in pytree.tree_leaves(node.meta.get("val")):
                        if isinstance(t, FakeTensor):
                            seen.setdefault(t.untyped_storage()._cdata, set()).add(id(t))
    return {storage for storage, tensors in seen.items() if len(tensors) > 1}


class _Pickler(pickle.Pickler):
    """Pickle's memo keeps one object one object: a fake tensor that the forward's output and
    the backward's placeholder share loads as one (backends.InductorCompilers relies on it)."""

    def __init__(self, file, shared_storages: set[int]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared_storages = shared_storages
        self.storages: dict[int, int] = {}  # shared fake storage -> its number in this payload

    def reducer_override(self, obj):
        if type(obj) is _Ref:  # the most frequent object: its own __reduce__
            return NotImplemented
        if isinstance(obj, torch.Tensor):
            return self._tensor(obj)
        if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise NotStorable("the graphs have symbolic sizes")
        if isinstance(obj, torch._ops.OpOverload):
            return _op, (obj.namespace, obj._opname, obj._overloadname)
        if isinstance(obj, torch._ops.OpOverloadPacket):
            namespace, name = obj._qualified_op_name.split("::")
            return _op, (namespace, name, None)
        if isinstance(obj, torch._ops.HigherOrderOperator):
            return _higher_order_op, (obj.name(),)
        if isinstance(obj, fx.GraphModule):
            return _graph_module, _graph_module_table(obj)
        if isinstance(obj, types.ModuleType):
            return _import_module, (obj.__name__,)
        public = public_name(obj)
        if public is not None:
            return _public_function, public
        if isinstance(obj, (fx.Node, fx.Graph)):
            raise NotStorable(f"a {type(obj).__name__} outside a GraphModule")
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)) and not _trusted(obj):
            raise NotStorable(f"the payload names {stable_repr(obj)} (only torch's and aotgrad's are stored)")
        return NotImplemented

    def _tensor(self, t: torch.Tensor):
        if isinstance(t, FakeTensor):
            if any(isinstance(s, torch.SymInt) for s in (*t.shape, *t.stride(), t.storage_offset())):
                raise NotStorable("the graphs have symbolic sizes")
            if t.layout != torch.strided or t.is_conj() or t.is_neg() or type(t) is not FakeTensor:
                raise NotStorable(f"a fake {t.layout} tensor with conj/neg bits or of a subclass")
            storage, nbytes = t.untyped_storage()._cdata, t.untyped_storage().nbytes()
            if storage not in self.shared_storages and t.storage_offset() == 0 and nbytes == _extent(t):
                return _fake, (tuple(t.shape), t.stride(), t.dtype, t.device, t.requires_grad)
            return _fake_in_storage, (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device,
                                      t.requires_grad, self.storages.setdefault(storage, len(self.storages)), nbytes)
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided or t.is_quantized:
            raise NotStorable(f"a constant {type(t).__name__} ({t.layout})")
        return _real, (tensor_data(t), tuple(t.shape), t.dtype, str(t.device), t.requires_grad,
                       isinstance(t, torch.nn.Parameter))


def _extent(t: torch.Tensor) -> int:
    """Bytes from a tensor's first element to the end of its last."""
    if t.numel() == 0:
        return 0
    return (1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))) * t.element_size()


def _graph_module_table(gm: fx.GraphModule) -> tuple:
    """(class name, nodes, attributes, meta, code): each node as (op, name, target, args, kwargs,
    meta, type), node arguments as `_Ref`s; the attributes its get_attr and call_module nodes
    read; FX's code for the graph."""
    if type(gm.graph._codegen) is not fx.graph.CodeGen:
        raise NotStorable(f"a graph with {type(gm.graph._codegen).__name__}")
    index = {node: i for i, node in enumerate(gm.graph.nodes)}
    nodes, attributes = [], {}
    portable: dict[int, tuple] = {}  # id -> (value, its portable form): nodes share their stacks
    for node in gm.graph.nodes:
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: _Ref(index[n]))
        meta = {k: node.meta[k] for k in NODE_META if k in node.meta}
        for key in ("nn_module_stack", "source_fn_stack"):
            if key in meta:
                value = meta[key]
                if id(value) not in portable:
                    portable[id(value)] = (value, _portable(value))
                meta[key] = portable[id(value)][1]
        nodes.append((node.op, node.name, node.target, args, kwargs, meta, node.type))
        if node.op in ("get_attr", "call_module"):
            attributes[node.target] = fetch_attr(gm, node.target)
    return type(gm).__name__, nodes, attributes, dict(gm.meta), _python_code(gm)


def _python_code(gm: fx.GraphModule) -> tuple | None:
    """The code FX generates for the graph now, and the globals it runs with (modules by name);
    None where FX would add profiler metadata to it."""
    if fx_experimental_config.enrich_profiler_metadata:
        return None
    code = gm.graph.python_code(root_module="self")
    names = {k: _Module(v.__name__) if isinstance(v, types.ModuleType) else v for k, v in code.globals.items()}
    return code.src, names, code._lineno_map, code._prologue_start


class _Ref:
    """A node argument that is another node: its position in the table."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __reduce__(self):
        return _Ref, (self.index,)


class _Global:
    """A user's class or function in node metadata (nn_module_stack's module types), by name:
    a module class found again where its module is imported, else its name (metadata is only
    read, never called)."""

    def __init__(self, value):
        self.module, self.qualname = value.__module__, value.__qualname__

    def __reduce__(self):
        return _resolve_global, (self.module, self.qualname)


def _portable(value):
    """Metadata with its untrusted classes and functions as `_Global`s, and those pickle could
    not find again by name (a class made at run time: `ParametrizedConv1d`, which weight norm's
    parametrization makes for each parametrized module)."""
    if isinstance(value, (list, tuple)):
        items = [_portable(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) \
            and isinstance(getattr(value, "__qualname__", None), str) \
            and (not _trusted(value) or _found_by_name(value) is not value):
        return _Global(value)
    return value


def _found_by_name(value):
    """What `value`'s module holds under its qualified name now (pickle's lookup), or None."""
    found: Any = sys.modules.get(getattr(value, "__module__", None) or "")
    for part in value.__qualname__.split("."):
        found = getattr(found, part, None)
    return found


class _Module:
    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return _import_module, (self.name,)


# -- reading ------------------------------------------------------------------

class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] not in TRUSTED_MODULES:
            raise BadPayload(f"the payload names {module}.{name}")
        return super().find_class(module, name)


def _op(namespace: str, name: str, overload: str | None):
    packet = getattr(getattr(torch.ops, namespace), name)
    return packet if overload is None else getattr(packet, overload)


def _higher_order_op(name: str):
    return torch._ops._higher_order_ops[name]


def _import_module(name: str) -> types.ModuleType:
    if name.split(".")[0] not in TRUSTED_MODULES:
        raise BadPayload(f"the payload imports {name}")
    return importlib.import_module(name)


def _public_function(module: str, name: str) -> types.FunctionType:
    """`public_name`'s function again: `name` in `module` (one of TRUSTED_MODULES)."""
    function = getattr(_import_module(module), name, None)
    if not isinstance(function, types.FunctionType):
        raise BadPayload(f"the payload names {module}.{name}, which is no function here")
    return function


def _resolve_global(module: str, qualname: str):
    """The module class of this name if its module is imported already, else the name."""
    value: Any = sys.modules.get(module)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, type) and issubclass(value, torch.nn.Module) else f"{module}.{qualname}"


def _fake(shape, stride, dtype, device, requires_grad) -> torch.Tensor:
    """A fake tensor with this layout, alone in its storage, in the loading fake mode. Made as
    FakeTensorMode's converter makes them (a meta tensor wrapped), not through the mode's
    dispatch (~2 ms a tensor)."""
    with no_dispatch():
        meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta", requires_grad=requires_grad)
    return FakeTensor(_loading.fake_mode, meta, device)


def _fake_in_storage(shape, stride, storage_offset, dtype, device, requires_grad, storage, nbytes) -> torch.Tensor:
    """A fake tensor in storage number `storage` of the payload: fakes that shared a storage
    when stored share one again."""
    with no_dispatch():
        base = _loading.storages.get(storage)
        if base is None:
            base = _loading.storages[storage] = torch.empty(nbytes, dtype=torch.uint8, device="meta").untyped_storage()
        meta = torch.empty(0, dtype=dtype, device="meta").set_(base, storage_offset, shape, stride)
        meta.requires_grad_(requires_grad)
    return FakeTensor(_loading.fake_mode, meta, device)


def _real(data: bytes, shape, dtype, device, requires_grad, is_parameter) -> torch.Tensor:
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    t = t.view(dtype).reshape(shape).to(device)
    return torch.nn.Parameter(t, requires_grad) if is_parameter else t.requires_grad_(requires_grad)


def _graph_module(class_name: str, nodes: list, attributes: dict, meta: dict, code: tuple | None) -> fx.GraphModule:
    """A GraphModule from its table: the graph built node by node (no tracing), with the code
    FX generated for it when it was stored."""
    graph = fx.Graph()
    made: list[fx.Node] = []

    def node_of(a):
        return made[a.index] if isinstance(a, _Ref) else a

    module_keys = _loading.module_keys or {}
    stacks: dict[int, tuple] = {}  # id -> (stored nn_module_stack, the same with this process's keys)
    for op, name, target, args, kwargs, node_meta, type_expr in nodes:
        node = graph.create_node(op, target, name=name, type_expr=type_expr)
        if node.name != name:
            raise BadPayload(f"node {name} came back as {node.name}")
        if args or kwargs:  # set after: create_node's walk looking for SymInts costs a third of a load
            node.args, node.kwargs = fx.node.map_aggregate((args, kwargs), node_of)
        stack = node_meta.get("nn_module_stack")
        if stack:  # dynamo keys the modules by id: this process's keys for the same module paths
            if id(stack) not in stacks:
                stacks[id(stack)] = (stack, {module_keys.get((path, kind_name(kind)), key): (path, kind)
                                             for key, (path, kind) in stack.items()})
            node_meta["nn_module_stack"] = stacks[id(stack)][1]
        node.meta.update(node_meta)  # (not `node.meta =`: a Node's setattr re-files it in the graph's lookup table)
        made.append(node)
    gm = LoadedGraphModule(attributes, graph, class_name)
    if code is not None and not fx_experimental_config.enrich_profiler_metadata:
        src, names, lineno_map, prologue_start = code
        gm.stored_code = fx.graph.PythonCode(src, names, lineno_map, prologue_start)
    gm.meta.update(meta)
    return gm


class LoadedGraphModule(_LazyGraphModule):
    """A graph from the disk cache. FX's code for it came with it (FX makes the same code from
    the same graph): `stored_code` until the first call or read of `.code` compiles it, so
    runtime/boxed.py reads the text without compiling FX's forward. A `recompile()` (the graph
    changed) drops it; a graph edited without one runs its old code, as any GraphModule does."""

    stored_code: fx.graph.PythonCode | None = None

    def recompile(self) -> None:
        self.__dict__.pop("stored_code", None)
        super().recompile()

    def __deepcopy__(self, memo):
        self.real_recompile()  # the stored code's globals hold modules, which do not copy
        return super().__deepcopy__(memo)

    def _real_recompile(self) -> fx.graph.PythonCode:
        stored = self.__dict__.pop("stored_code", None)
        if stored is None:
            return super()._real_recompile()
        self.graph.python_code = lambda *args, **kwargs: stored
        try:
            return super()._real_recompile()
        finally:
            self.graph.__dict__.pop("python_code", None)  # later recompiles generate the code as usual
