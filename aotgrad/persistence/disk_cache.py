"""The disk cache of traced and partitioned graphs: a second process skips trace and partition.

In: a torch.compile graph, keyed by `graph_key` (its code and source lines, its constants, the
options that change tracing or partitioning, global modes such as autocast, the Python, torch
and aotgrad versions and a digest of aotgrad's source), and per call by `entry_key` (what
front/keys.py keys the in-memory cache on: sizes, strides, dtypes, requires_grad, duplicated inputs,
grad mode). Out: `load` gives back the `Partitioned` graphs and the output spec that `store`
wrote, rebuilt in the caller's fake mode, or None.

    <config.cache_dir>/3f/3f9c...e1    magic, format, JSON header (versions, key, sha256), payload

Graphs are stored before compilation, so the compilers are no part of the key; the payload is
graph_pickle.py's, unpickled with the garbage collector paused. The folder's files are
cache_folder.py's: read only where no one else may write, written whole (readers never see half
an entry, whatever other processes do), the least recently used evicted past the size limit.
An entry that is corrupt, from another version or inconsistent is counted
(`aotgrad.counters["disk_cache"]["rejected"]`), logged, deleted and rebuilt by the caller, never
used. What the cache cannot key or store is compiled as usual, and not stored: the compile's
record (`disk_cache`, shown by `python -m aotgrad report`) and an INFO line say why.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import logging
import operator
import os
import re
import struct
import sys
import types
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor

from aotgrad import config
from aotgrad.observe.counting import counters
from aotgrad.persistence import cache_folder, graph_pickle
from aotgrad.persistence.graph_pickle import BadPayload, NotStorable, fetch_attr, kind_name, stable_repr, tensor_data

log = logging.getLogger("aotgrad")


MAGIC = b"AOTGRAD-CACHE\n"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<II")  # format version, length of the JSON header that follows

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr naming an object by address: no stable key


class NotCacheable(Exception):
    """The graph or an option cannot be keyed (the message says why)."""


class GraphKey(str):
    """graph_key's digest, with what a hit needs from this process: the module keys dynamo's
    `nn_module_stack` gave each (module path, type) here, which differ between processes."""

    module_keys: dict


class NotKeyed(str):
    """graph_key's answer for a graph the cache cannot key: why. Its compiles are traced as
    usual and not stored; their record and an INFO line say why (pipeline.py)."""


class EntryKey(str):
    """entry_key's digest; `text` is what it digests (checked against the stored entry)."""

    text: str
    module_keys: dict
    cacheable: bool


def clear() -> int:
    """Delete every entry under `config.cache_dir`, and generated.py's code; returns how many entries."""
    return cache_folder.clear()


# -- keys ---------------------------------------------------------------------

def graph_key(gm, options) -> GraphKey | NotKeyed | None:
    """The key of `gm` compiled with `options` (api.Options); None when the cache is off;
    NotKeyed (why) when something in them cannot be keyed."""
    if config.cache_dir is None:
        return None
    if not cache_folder.is_private(cache_folder.root()):
        return NotKeyed(f"others may write the cache folder {config.cache_dir} (see the warning)")
    if options.dynamic:
        return NotKeyed("the graphs have symbolic sizes")
    module_keys: dict = {}
    try:
        text = "\n".join([_versions(), _options_text(options), _ambient_text(), _graph_text(gm, module_keys)])
    except NotCacheable as e:
        return NotKeyed(str(e))
    address = _ADDRESS.search(text)
    if address is not None:
        line = text[text.rfind("\n", 0, address.start()) + 1:text.find("\n", address.end())]
        return NotKeyed(f"its key would name an object by address: {line[-300:]}")
    key = GraphKey(hashlib.sha256(text.encode()).hexdigest())
    key.module_keys = module_keys
    return key


def entry_key(graph: str, call_key: tuple) -> EntryKey:
    """The key of one compile: the graph's key and the call's (front/keys.py's in-memory key)."""
    text = f"{graph}\n{call_key!r}"
    key = EntryKey(hashlib.sha256(text.encode()).hexdigest())
    key.text = text
    key.module_keys = getattr(graph, "module_keys", {})
    key.cacheable = _ADDRESS.search(text) is None
    return key


def _digest_of_source(package: Path = Path(__file__).resolve().parent.parent) -> str:
    """sha256 of every module of the `aotgrad` package (this module's parent's folder), by
    path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


# sha256 of aotgrad's source files, read when aotgrad is imported (the code this process runs):
# editing aotgrad invalidates every entry
SOURCE_DIGEST = _digest_of_source()


def _aotgrad_version() -> str:
    return getattr(sys.modules.get("aotgrad"), "__version__", "?")


def _versions() -> str:
    return (f"format {FORMAT_VERSION} python {sys.version} torch {torch.__version__} "
            f"aotgrad {_aotgrad_version()} source {SOURCE_DIGEST}")


def _options_text(options) -> str:
    """What in the options changes the trace or the partition (not the compilers)."""
    partition_fn = options.partition_fn
    return repr(("partition", "default" if partition_fn is None else _callable_text(partition_fn),
                 "budget", config.activation_memory_budget, config.activation_memory_budget_bytes,
                 "decompositions", _decompositions_text(options.decompositions), "dynamic", options.dynamic))


def _decompositions_text(table) -> str:
    if table is None:
        return "none"
    digest = hashlib.sha256()
    for op, fn in sorted(((str(op), fn) for op, fn in table.items()), key=operator.itemgetter(0)):
        digest.update(f"{op}={_callable_text(fn)};".encode())
    return digest.hexdigest()


def _callable_text(fn) -> str:
    """A function by qualified name; one from outside torch and aotgrad also by its code."""
    if isinstance(fn, functools.partial):
        return f"partial({_callable_text(fn.func)}, {stable_repr(fn.args)}, {stable_repr(fn.keywords)})"
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if module is None or qualname is None:
        raise NotCacheable(f"{fn!r} has no qualified name to key on")
    name = f"{module}.{qualname}"
    if module.split(".")[0] in ("torch", "aotgrad"):
        return name
    code = getattr(fn, "__code__", None)
    if code is None:
        raise NotCacheable(f"{name} is no Python function: its code cannot be keyed")
    return f"{name}:{_code_text(code)}"


def _code_text(code: types.CodeType) -> str:
    consts = [_code_text(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.sha256(repr((code.co_code, code.co_names, consts)).encode()).hexdigest()[:16]


def _ambient_text() -> str:
    """Global modes that change what the trace records (grad mode is in the call's key)."""
    autocast = [(device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
                for device in ("cpu", "cuda")]
    return repr(("autocast", autocast, "inference_mode", torch.is_inference_mode_enabled(),
                 "deterministic", torch.are_deterministic_algorithms_enabled(),
                 "default dtype", torch.get_default_dtype(), "default device", torch.get_default_device()))


def _graph_text(gm, module_keys: dict) -> str:
    """The graph's code, each node's source metadata (copied into the traced graph), the names
    of its parameters and buffers (inputs of the trace), its constants by value, its subgraphs."""
    if not isinstance(gm, fx.GraphModule):
        raise NotCacheable(f"a {type(gm).__name__} is no GraphModule")
    state = [name for name, _ in gm.named_parameters(remove_duplicate=False)]
    state += [name for name, _ in gm.named_buffers(remove_duplicate=False)]
    lines = [gm.code, repr(state)]
    texts: dict[int, tuple] = {}  # id(metadata value) -> (value, its text): nodes share their stacks

    def text_of(value, stack: bool = False) -> str:
        if id(value) not in texts:
            if stack:  # dynamo keys nn_module_stack by module ids: those are no part of the key
                module_keys.update({(path, kind_name(kind)): key for key, (path, kind) in value.items()})
            texts[id(value)] = (value, stable_repr(list(value.values()) if stack else value))
        return texts[id(value)][1]

    for node in gm.graph.nodes:
        _check_target(node)
        meta = node.meta
        lines.append(f"{node.name} {meta.get('stack_trace')!r} {text_of(meta.get('nn_module_stack') or {}, True)} "
                     f"{text_of(meta.get('source_fn_stack'))}")
        if node.op == "get_attr":
            lines.append(f"{node.target} = {_attribute_text(gm, node.target, set(state), module_keys)}")
        elif node.op == "call_module":
            lines.append(f"{node.target} = {_graph_text(gm.get_submodule(node.target), module_keys)}")
    return "\n".join(lines)


def _check_target(node: fx.Node) -> None:
    """Refuse calls whose behaviour the key cannot see: of a user's Python function, or with
    one as an argument (its code may change while the graph's stays the same)."""
    if node.op == "call_function" and not _known_callable(node.target):
        raise NotCacheable(f"node {node.name} calls {stable_repr(node.target)}, whose code the key cannot see")

    def check(value):
        if callable(value) and not isinstance(value, (fx.Node, torch.Tensor)) and not _known_callable(value):
            raise NotCacheable(f"node {node.name} takes {stable_repr(value)}, whose code the key cannot see")
        return value
    fx.node.map_aggregate((node.args, node.kwargs), check)


def _known_callable(target) -> bool:
    """An op, or a function or class of torch, operator, math or builtins (versioned with them)."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator,
                           types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                           types.WrapperDescriptorType, types.MethodWrapperType)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "operator", "_operator", "math", "builtins")


def _attribute_text(gm: fx.GraphModule, target: str, state: set[str], module_keys: dict) -> str:
    if target in state:
        return "input"
    value = fetch_attr(gm, target)
    if isinstance(value, fx.GraphModule):
        return _graph_text(value, module_keys)
    if isinstance(value, torch.Tensor):
        if isinstance(value, FakeTensor) or value.is_meta or value.layout != torch.strided or value.is_quantized:
            raise NotCacheable(f"constant {target} is a {type(value).__name__} without plain data")
        return repr((value.dtype, tuple(value.shape), value.stride(), value.requires_grad, type(value).__name__,
                     hashlib.sha256(tensor_data(value)).hexdigest()))
    if isinstance(value, (int, float, bool, str, type(None))):
        return repr(value)
    raise NotCacheable(f"attribute {target} is a {type(value).__name__}")


# -- files --------------------------------------------------------------------

def _path(entry: str) -> Path:
    return cache_folder.root() / entry[:2] / entry


def store(entry: EntryKey, partitioned, out_spec) -> str:
    """Write one entry; returns "stored", or "not stored: <why>" (nothing written). Never raises."""
    if config.cache_dir is None:
        return "off"
    if not getattr(entry, "cacheable", False):
        return "not stored: the call's key names an object by address"
    try:
        payload = graph_pickle.dumps({"partitioned": partitioned, "outputs": _skeleton(out_spec)},
                                     [partitioned.forward, partitioned.backward])
    except Exception as e:  # anything unpicklable: the compile goes on, uncached
        reason = str(e) if isinstance(e, NotStorable) else f"{type(e).__name__}: {e}"
        log.debug("aotgrad disk cache: not storing %s", entry, exc_info=not isinstance(e, NotStorable))
        return f"not stored: {reason}"
    header = json.dumps({"torch": torch.__version__, "aotgrad": _aotgrad_version(), "key": entry.text,
                         "sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload)}).encode()
    data = MAGIC + _HEADER.pack(FORMAT_VERSION, len(header)) + header + payload
    try:
        cache_folder.write_atomically(_path(entry), data)
    except cache_folder.NotPrivate as e:
        return f"not stored: {e}"
    except OSError as e:
        log.warning("aotgrad disk cache: cannot write to %s: %s", config.cache_dir, e)
        return f"not stored: {e}"
    counters["disk_cache"]["stores"] += 1
    evicted = cache_folder.evict(keep=_path(entry))
    if evicted:
        counters["disk_cache"]["evicted"] += evicted
        log.debug("aotgrad disk cache: %d least recently used files deleted (cache_size_limit_mb=%s)",
                  evicted, config.cache_size_limit_mb)
    return "stored"


def load(entry: EntryKey, fake_mode) -> tuple[Any, Any] | None:
    """The (Partitioned, out_spec) stored for `entry`, its fake tensors made in `fake_mode`;
    None on a miss, or when the entry is rejected (deleted, so the caller's compile replaces it)."""
    if config.cache_dir is None or not getattr(entry, "cacheable", False):
        return None
    path = _path(entry)
    try:
        read = cache_folder.read_private(path)
    except FileNotFoundError:
        counters["disk_cache"]["misses"] += 1
        return None
    except OSError as e:
        log.warning("aotgrad disk cache: cannot read %s: %s", path, e)
        counters["disk_cache"]["misses"] += 1
        return None
    if read is None:  # others may write it: not read, as with the cache off
        return None
    data, stat = read
    try:
        with collector_paused():
            payload = _payload(data, entry)
            loaded = graph_pickle.loads(payload, fake_mode, entry.module_keys)
            partitioned, out_spec = loaded["partitioned"], pytree.tree_structure(loaded["outputs"])
            _validate(partitioned, fake_mode)
    except Exception as e:  # corrupt, foreign or inconsistent: never used
        counters["disk_cache"]["rejected"] += 1
        log.warning("aotgrad disk cache: rejected %s (%s: %s); it is deleted and compiled again",
                    path, type(e).__name__, e)
        cache_folder.remove_file(path, stat)
        return None
    counters["disk_cache"]["hits"] += 1
    cache_folder.touch(path)  # used: the last to be evicted
    return partitioned, out_spec


@contextlib.contextmanager
def collector_paused():
    """Python's garbage collector off for the block, then as it was. A load makes tens of
    thousands of objects and frees few: with the collector on, their allocations set off
    young collections and, every few loads, a full one over the whole heap (0.3-0.5 s with
    torch's ~400k objects; docs/benchmarks.md). After the block, one young collection takes
    them all, and counts as one towards the next full collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def stored_key(path: str | os.PathLike) -> EntryKey:
    """The key an entry file was stored under (from its header), e.g. to `load` it."""
    header, _ = _split(Path(path).read_bytes())
    key = EntryKey(Path(path).name)
    key.text, key.module_keys, key.cacheable = header["key"], {}, True
    return key


def _split(data: bytes) -> tuple[dict, bytes]:
    """An entry's header and payload."""
    if not data.startswith(MAGIC):
        raise BadPayload("no aotgrad cache header")
    start = len(MAGIC)
    if len(data) < start + _HEADER.size:
        raise BadPayload("truncated header")
    version, length = _HEADER.unpack_from(data, start)
    if version != FORMAT_VERSION:
        raise BadPayload(f"format {version}, this aotgrad reads {FORMAT_VERSION}")
    start += _HEADER.size
    return json.loads(data[start:start + length]), data[start + length:]


def _payload(data: bytes, entry: EntryKey) -> bytes:
    header, payload = _split(data)
    if header.get("torch") != torch.__version__ or header.get("aotgrad") != _aotgrad_version():
        raise BadPayload(f"written by torch {header.get('torch')}, aotgrad {header.get('aotgrad')}")
    if header.get("key") != entry.text:
        raise BadPayload("stored for another key")
    if header.get("size") != len(payload) or header.get("sha256") != hashlib.sha256(payload).hexdigest():
        raise BadPayload("checksum mismatch (truncated or overwritten)")
    return payload


def _skeleton(out_spec) -> Any:
    """The output spec as a pytree of ints (pickled as plain containers; pytree's own spec
    objects warn when unpickled)."""
    return pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)


def _validate(p, fake_mode) -> None:
    """Cheap consistency checks of a loaded `Partitioned` before anything runs it."""
    for gm in (p.forward, p.backward):
        if gm is None:
            continue
        gm.graph.lint()
        for node in gm.graph.find_nodes(op="placeholder"):
            val = node.meta.get("val")
            if isinstance(val, FakeTensor) and val.fake_mode is not fake_mode:
                raise BadPayload(f"placeholder {node.name} is not in the caller's fake mode")
    if p.backward is None:
        return
    forward_inputs = len(p.forward.graph.find_nodes(op="placeholder"))
    saved_by_forward = len(_outputs(p.forward)) - p.num_forward_outputs
    saved_by_backward = len(p.backward.graph.find_nodes(op="placeholder")) - len(p.tangent_sources)
    if forward_inputs != p.num_primals or saved_by_forward != saved_by_backward \
            or p.forward.meta.get("num_saved", saved_by_forward) != saved_by_forward:
        raise BadPayload(f"the graphs disagree with their facts: the forward takes {forward_inputs} inputs "
                         f"for {p.num_primals} primals and saves {saved_by_forward} values, the backward "
                         f"reads {saved_by_backward}")


def _outputs(gm: fx.GraphModule) -> list:
    output = gm.graph.find_nodes(op="output")[0].args[0]
    return list(output) if isinstance(output, (tuple, list)) else [output]
