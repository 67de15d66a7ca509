"""Functions from generated Python source, their code objects kept on disk as Python keeps .pyc files.

Python's `compile` is most of a warm disk-cache compile (aotgrad writes code for each graph:
runtime/boxed.py, the runtime's lowered steps, compiled autograd's matchers), so each code object is
stored in `<config.cache_dir>/code/3f/3f9c...` (SHA-256 of the marshal bytes, then the bytes),
keyed by the source and the interpreter (marshal's format, `-O`). A file whose digest does not
match is deleted and compiled again; the code comes back under this call's file name. Code runs,
so files are read, and written, only where no one else may write (cache_folder.py).
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

from aotgrad.persistence import cache_folder

log = logging.getLogger("aotgrad")

_PYTHON = f"{sys.version}\n{sys.implementation.cache_tag}\noptimize {sys.flags.optimize}\n".encode()


def define(source: str, filename: str, namespace: dict, name: str) -> Callable:
    """Run `source` in `namespace` (a module's worth of definitions) and return its `name`."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile_source(source, filename), namespace)
    return namespace[name]


def compile_source(source: str, filename: str) -> types.CodeType:
    """`compile(source, filename, "exec", dont_inherit=True)`, read from the disk when a process
    compiled the same source before."""
    root = cache_folder.root()
    if root is None:
        return compile(source, filename, "exec", dont_inherit=True)
    digest = hashlib.sha256(_PYTHON + source.encode()).hexdigest()
    path = root / "code" / digest[:2] / digest
    code = _read(path)
    if code is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        data = marshal.dumps(code)
        try:
            cache_folder.write_atomically(path, hashlib.sha256(data).digest() + data)
        except OSError as e:
            log.debug("aotgrad code cache: cannot write %s: %s", path, e)
        return code
    cache_folder.touch(path)  # used: the last to be evicted
    return _renamed(code, filename)


def _read(path: Path) -> types.CodeType | None:
    try:
        read = cache_folder.read_private(path)
    except OSError:
        return None
    if read is None:  # others may write it (warned): compiled here instead
        return None
    data, stat = read
    body = data[32:]
    try:
        if hashlib.sha256(body).digest() != data[:32]:
            raise ValueError("checksum mismatch")
        code = marshal.loads(body)
        if not isinstance(code, types.CodeType):
            raise ValueError(f"holds a {type(code).__name__}")
    except (ValueError, EOFError, TypeError) as e:
        log.warning("aotgrad code cache: rejected %s (%s); it is deleted and compiled again", path, e)
        cache_folder.remove_file(path, stat)  # (unless another process has replaced it since)
        return None
    return code


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """`code` and the code objects inside it with `co_filename` = `filename`."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
