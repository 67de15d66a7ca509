"""Functions from generated Python source, their code objects kept on disk beside the graph cache.

aotgrad writes Python for each graph (runtime/boxed.py, runtime/wrapper.py, the compiled-autograd
matchers). Python's `compile` costs ~0.3 ms per KB of source, which is most of a warm disk-cache
compile, so the code objects are cached the way Python caches modules in .pyc files:

    <config.cache_dir>/code/3f/3f9c...e1    sha256 of the marshal bytes, then the bytes

keyed by the source and the Python version (marshal's format is the interpreter's own). A file
whose digest does not match is deleted and the source compiled again. The code comes back with
this call's file name, so tracebacks and `linecache` show the generated lines.
"""
from __future__ import annotations

import hashlib
import linecache
import logging
import marshal
import sys
import types
from pathlib import Path
from typing import Callable

from aotgrad import disk_cache

log = logging.getLogger("aotgrad")

_PYTHON = f"{sys.version}\n{sys.implementation.cache_tag}\n".encode()


def define(source: str, filename: str, namespace: dict, name: str) -> Callable:
    """Run `source` in `namespace` (a module's worth of definitions) and return its `name`."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile_source(source, filename), namespace)
    return namespace[name]


def compile_source(source: str, filename: str) -> types.CodeType:
    """`compile(source, filename, "exec", dont_inherit=True)`, read from the disk when a process
    compiled the same source before."""
    root = disk_cache.cache_root()
    if root is None:
        return compile(source, filename, "exec", dont_inherit=True)
    digest = hashlib.sha256(_PYTHON + source.encode()).hexdigest()
    path = root / "code" / digest[:2] / digest
    code = _read(path)
    if code is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        data = marshal.dumps(code)
        try:
            disk_cache._write_atomically(path, hashlib.sha256(data).digest() + data)
        except OSError as e:
            log.debug("aotgrad code cache: cannot write %s: %s", path, e)
        return code
    return _renamed(code, filename)


def _read(path: Path) -> types.CodeType | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    body = data[32:]
    try:
        if hashlib.sha256(body).digest() != data[:32]:
            raise ValueError("checksum mismatch")
        code = marshal.loads(body)
        if not isinstance(code, types.CodeType):
            raise ValueError(f"holds a {type(code).__name__}")
    except (ValueError, EOFError, TypeError) as e:
        log.warning("aotgrad code cache: rejected %s (%s); it is deleted and compiled again", path, e)
        disk_cache._remove(path)
        return None
    return code


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """`code` and the code objects inside it with `co_filename` = `filename`."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
