"""Inductor's graph-cache keys of `aotgrad_inductor`'s graphs, kept in aotgrad's cache folder.

Inductor finds a compiled graph in its FX graph cache by a key it hashes from the pickled graph,
its inputs and everything else that shapes the code (its config, torch's source, the machine).
A warm process would hash each graph again (llama: 0.37 s of a 4.5 s first step). aotgrad
already knows each graph by the disk-cache entry it came from, so on a miss it keeps, per graph,
the key Inductor stored the result under; a later process hands that key to Inductor, which
then loads as usual (`answering`). PyTorch's AOTAutograd cache does the same with its entries.

    <config.cache_dir>/inductor/3f/3f9c...   Inductor's key for (entry, role, Inductor context)
    <config.cache_dir>/inductor/70/70a0...   torch's source hash, with the files' sizes and times
    <config.cache_dir>/inductor/81/8118...   Triton's source hash alike, where Triton is installed

In: the graph's `gm.meta["aotgrad_cache_key"]` (its entry, set by pipeline.instantiate; absent
where the entry cannot be keyed) and its role (forward, backward with its tangents, inference).
The Inductor context (config, torch's source, determinism flags, the machine, the compile's
kwargs) is Inductor's own hash of an empty graph under the same settings (`_context_key`), so
whatever Inductor keys on is keyed here too. Out: the stored key or None.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import threading
from pathlib import Path

import torch
import torch.fx as fx

from aotgrad.observe.counting import counters
from aotgrad.persistence import cache_folder

log = logging.getLogger("aotgrad")

META_KEY = "aotgrad_cache_key"  # gm.meta: the disk-cache entry a graph came from (pipeline.instantiate)
FOLDER = "inductor"

_lock = threading.Lock()
_answers: dict[int, tuple[fx.GraphModule, str, bool]] = {}  # id(gm) -> (gm, Inductor key, hit only), in its compile
_wrapped: list = []  # Inductor's own FxGraphCache.prepare_key and load_with_key while `answering` wraps them
_source_keys_primed = False
_TORCH_KEY_EXTRA_FILES = ("codegen/aoti_runtime/interface.cpp", "script.ld")  # (torch_key reads them too)


def key_for(gm: fx.GraphModule, role: str, fx_kwargs: dict) -> str | None:
    """aotgrad's key for Inductor's compile of `gm` as `role` with `fx_kwargs`, under the
    Inductor settings now in force; None where the graph has no entry key or Inductor would
    not cache it (its context cannot be hashed)."""
    entry = gm.meta.get(META_KEY)
    if entry is None or not _inductor_caches() or _calls_higher_order_ops(gm):
        return None
    context = _context_key(fx_kwargs)
    if context is None:
        return None
    return hashlib.sha256(f"{entry}\n{role}\n{context}".encode()).hexdigest()


def known(key: str | None) -> str | None:
    """The Inductor key stored for `key` by an earlier compile, or None."""
    if key is None:
        return None
    try:
        read = cache_folder.read_private(_path(key))
    except OSError:
        return None
    if read is None:
        return None
    text = read[0].decode("ascii", errors="replace").strip()
    if not text.isalnum():
        log.warning("aotgrad: rejected the stored Inductor key %s (not a key); it is deleted", _path(key))
        cache_folder.remove_file(_path(key), read[1])
        return None
    counters["disk_cache"]["inductor_keys_known"] += 1
    return text


def remember(key: str | None, compiled) -> None:
    """Keep the key Inductor's cache stored `compiled` under (set by Inductor on a miss or a
    hit; absent where it bypassed its cache), for `key`."""
    inductor_key = getattr(compiled, "_fx_graph_cache_key", None)
    if key is None or not isinstance(inductor_key, str):
        return
    try:
        cache_folder.write_atomically(_path(key), inductor_key.encode("ascii"))
    except OSError as e:
        log.debug("aotgrad: cannot store an Inductor key in %s: %s", _path(key), e)
        return
    counters["disk_cache"]["inductor_keys_stored"] += 1


class NotStored(Exception):
    """Inductor's cache holds no graph that fits under a stored key (lost, or its guards fail);
    raised out of Inductor's lookup under `answering(..., hit_only=True)`, before it compiles."""


@contextlib.contextmanager
def answering(gm: fx.GraphModule, inductor_key: str | None, hit_only: bool = False):
    """Inductor's cache lookup for `gm` (only) answered with `inductor_key` inside the block:
    Inductor loads the graph stored under it as on any hit (its guards checked, its post-compile
    steps run), or on a miss compiles `gm` and stores it there; with `hit_only` a miss raises
    NotStored instead (the caller gave Inductor a graph it must not compile). While a block is
    open anywhere, Inductor's `FxGraphCache.prepare_key` and `load_with_key` are wrapped (other
    graphs, other threads' included, get Inductor's own); after the last one they are
    Inductor's own again."""
    from torch._inductor.codecache import FxGraphCache

    with _lock:
        original = FxGraphCache.__dict__.get("prepare_key")  # (our wrapper while another block is open)
        active = inductor_key is not None and isinstance(original, staticmethod)  # (else another Inductor)
        if active and not _answers:
            load = FxGraphCache.__dict__["load_with_key"]
            _wrapped.extend((original, load))
            FxGraphCache.prepare_key = staticmethod(functools.partial(_prepare_key, original.__func__))
            FxGraphCache.load_with_key = staticmethod(functools.partial(_load_with_key, load.__func__))
        if active:
            _answers[id(gm)] = (gm, inductor_key, hit_only)
    if not active:
        yield
        return
    try:
        yield
    finally:
        with _lock:
            del _answers[id(gm)]
            if not _answers:
                FxGraphCache.load_with_key = _wrapped.pop()
                FxGraphCache.prepare_key = _wrapped.pop()


def _prepare_key(inductors_own, gm, example_inputs, fx_kwargs, inputs_to_check, remote):
    """Inductor's `prepare_key` while `answering`: the stored key for the graphs given one."""
    answer = _answers.get(id(gm))
    if answer is None or answer[0] is not gm or remote:
        return inductors_own(gm, example_inputs, fx_kwargs, inputs_to_check, remote)
    return (answer[1], [f"aotgrad: the key stored for this graph's disk-cache entry: {answer[1]}"]), {}


def _load_with_key(inductors_own, key, *args, **kwargs):
    """Inductor's `load_with_key` while `answering`: NotStored on a miss of a `hit_only` graph's
    key (the graph Inductor would compile is known by Inductor's constants where they hold it)."""
    compiled, info = inductors_own(key, *args, **kwargs)
    if compiled is None:
        graph = getattr(kwargs.get("constants"), "gm", None)
        with _lock:
            missed = any(hit_only and stored == key and (graph is None or graph is gm)
                         for gm, stored, hit_only in _answers.values())
        if missed:
            raise NotStored(key)
    return compiled, info


def _calls_higher_order_ops(gm: fx.GraphModule) -> bool:
    """Does `gm` call a higher-order op? Inductor's key may cover code outside the graph for
    them (a user's Triton kernel's source) that the entry's key does not: those graphs keep
    Inductor's own key."""
    return any(node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)
               for node in gm.graph.nodes)


def _inductor_caches() -> bool:
    """Would Inductor look its graph cache up (locally) for a compile now?"""
    from torch._inductor import config as inductor_config
    return (cache_folder.root() is not None and bool(inductor_config.fx_graph_cache)
            and not inductor_config.force_disable_caches)


def _context_key(fx_kwargs: dict) -> str | None:
    """Inductor's key for an empty graph compiled with `fx_kwargs` now: it covers all Inductor
    keys on besides the graph and its inputs (config, torch's source, determinism and matmul
    flags, the device and compiler, custom passes). None if Inductor would not cache."""
    from torch._inductor.codecache import FxGraphHashDetails, FxGraphCachePickler

    _prime_source_keys()
    graph = fx.Graph()
    graph.output(())
    empty = fx.GraphModule(torch.nn.Module(), graph)
    try:
        details = FxGraphHashDetails(empty, [], fx_kwargs, [])
        return FxGraphCachePickler(empty).get_key(details)
    except Exception as e:  # Inductor's bypass (a custom pass it cannot key, ...) or another Inductor
        log.debug("aotgrad: no Inductor context key (%s: %s); Inductor keys each graph itself", type(e).__name__, e)
        return None


# -- torch's and Triton's source hashes ---------------------------------------------

def _prime_source_keys() -> None:
    """Give Inductor its hashes of torch's source (`torch_key`: 0.1-0.2 s to read and hash every
    module) and, where Triton is installed, of Triton's (`triton_key`: 0.36 s, most of it the
    505 MB libtriton.so of torch 2.14's CUDA wheel) from the cache folder when no file they read
    changed since they were stored: the test Python makes before it uses a .pyc (each file's
    size and modification time). Else Inductor computes them, and they are stored for the next
    process. Once per process."""
    global _source_keys_primed
    if _source_keys_primed:
        return
    _source_keys_primed = True
    try:
        from torch._inductor import codecache
    except ImportError:
        return
    _prime("torch_key", getattr(codecache, "torch_key", None), _torch_files_digest)
    triton = _triton_folder()
    if triton is not None:
        _prime("triton_key", getattr(codecache, "triton_key", None), lambda: _files_digest(triton))


def _prime(name: str, inductors_key, files_digest) -> None:
    """Inductor's cached `inductors_key()` (a prefetchable cache, with `set`) from the file kept
    for `name`, or computed and kept; `files_digest()` stands for the files it reads."""
    if not hasattr(inductors_key, "set"):
        return
    path = _path(hashlib.sha256(name.encode()).hexdigest())  # (laid out as the keys are: evicted, cleared alike)
    files = files_digest()
    stored = _read_json(path)
    if stored is not None and stored.get("files") == files and stored.get("torch") == torch.__version__:
        try:
            inductors_key.set(_decoded(stored["key"]))
            return
        except RuntimeError:  # (computed in this process already)
            return
        except (ValueError, KeyError, TypeError):  # (not what this code writes: computed and written again)
            pass
    value = inductors_key()
    data = json.dumps({"torch": torch.__version__, "files": files, "key": _encoded(value)}).encode()
    with contextlib.suppress(OSError):
        cache_folder.write_atomically(path, data)


def _encoded(value) -> list:
    """A key's value for JSON, with its type: bytes (torch_key), str or None (triton_key)."""
    return ["bytes", value.hex()] if isinstance(value, bytes) else ["str" if value is not None else "none", value]


def _decoded(stored: list):
    kind, value = stored
    if kind == "bytes":
        return bytes.fromhex(value)
    if (kind == "str" and isinstance(value, str)) or (kind == "none" and value is None):
        return value
    raise ValueError(f"not a stored key: {stored!r}")


def _triton_folder() -> str | None:
    """Triton's package folder, found without importing it; None where it is not installed."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _files_digest(root: str) -> str:
    """A digest of the path, size and modification time of every module and library under
    `root`, every folder included (Triton's key reads some of them, and its libtriton)."""
    hasher = hashlib.sha256(root.encode())
    for folder, subfolders, names in os.walk(root):
        subfolders.sort()
        _add_files(hasher, [os.path.join(folder, name) for name in sorted(names) if name.endswith((".py", ".so", ".pyd"))])
    return hasher.hexdigest()


def _add_files(hasher, paths: list) -> None:
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        hasher.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())


def _torch_files_digest(root: str | None = None) -> str:
    """A digest of the path, size and modification time of every file Inductor's `torch_key`
    reads under torch's folder: the modules of torch's packages (folders with an `__init__.py`,
    the ones it walks) and two files of Inductor's own."""
    root = root or os.path.dirname(torch.__file__)
    hasher = hashlib.sha256(root.encode())
    extra = [os.path.join(root, "_inductor", *name.split("/")) for name in _TORCH_KEY_EXTRA_FILES]
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if os.path.exists(os.path.join(folder, d, "__init__.py")))
        paths = [os.path.join(folder, name) for name in sorted(names) if name.endswith((".py", ".so", ".pyd"))]
        _add_files(hasher, paths + (extra if folder == root else []))
    return hasher.hexdigest()


def _read_json(path: Path) -> dict | None:
    try:
        read = cache_folder.read_private(path)
        return None if read is None else json.loads(read[0])
    except (OSError, ValueError):
        return None


def _path(key: str) -> Path:
    return cache_folder.root() / FOLDER / key[:2] / key
