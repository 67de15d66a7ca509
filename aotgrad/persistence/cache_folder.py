"""The disk cache's folder (`config.cache_dir`): who may write it, and its files.

In: paths under the folder, from disk_cache.py (graph entries, `3f/3f9c...`), generated.py
(code objects, `code/3f/3f9c...`) and inductor_keys.py (Inductor's keys, `inductor/3f/...`).
Out: their bytes, read only where no one else could have written them; files written whole
and private; the least recently used deleted past `config.cache_size_limit_mb`;
`aotgrad cache info|clear` (`main`).

Entries are pickles, and loading a pickle runs what it names: whoever can write the folder
could run code in every process that reads it. So, as ssh does for its keys, aotgrad reads a
file only when it and every folder from the cache root down to it belong to this user and no
one else may write them (`is_private`); otherwise it reads and writes nothing there, warns
once per path with the fix, and the compile goes on as with the cache off. Folders aotgrad
makes are private (0o700), files too (0o600).
"""
from __future__ import annotations

import argparse
import logging
import os
import stat as stat_module
import tempfile
from pathlib import Path

from aotgrad import config

log = logging.getLogger("aotgrad")

_warned: set[str] = set()  # the paths this process has warned about (once each)
# cache root -> the bytes it held when this process last counted, plus what its stores wrote since
_bytes_held: dict[str, int] = {}
# Past the limit, eviction deletes down to this fraction of it, so the stores that follow do not
# each count the folder again (0.2 s for 60k files on this project's machine).
EVICT_TO = 0.9
# Folders of other stores beside the graph entries: generated.py's code objects, inductor_keys.py's keys.
SUBFOLDERS = ("code", "inductor")


class NotPrivate(OSError):
    """A cache file or folder that someone else may write (the message says which and why)."""


def root() -> Path | None:
    return None if config.cache_dir is None else Path(config.cache_dir)


# -- who may write ------------------------------------------------------------------

def problem(path: Path, stat: os.stat_result | None = None) -> str | None:
    """Why someone else may write `path` (a file or folder; `stat`: its stat, if taken), or
    None when only this user may (or it does not exist: aotgrad makes it private)."""
    if not hasattr(os, "getuid"):
        # Windows: st_mode shows no owner or group bits (ACLs decide who may write), so there
        # is nothing here to check; the folder under the user's profile is private by default
        return None
    try:
        stat = os.stat(path) if stat is None else stat
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"aotgrad cannot look at it ({e.strerror})"
    if stat.st_uid != os.getuid():
        return f"it belongs to user id {stat.st_uid}, not to this process's user ({os.getuid()})"
    if stat.st_mode & 0o022:
        who = "its group and all users" if stat.st_mode & 0o022 == 0o022 else \
            "its group" if stat.st_mode & 0o020 else "all users"
        return f"{who} may write it (mode {stat_module.filemode(stat.st_mode)})"
    return None


def is_private(path: Path, stat: os.stat_result | None = None) -> bool:
    """Whether only this user may write `path` and each folder from the cache root down to it
    (`stat`: the path's own, from the open file). Warns once for the first that fails."""
    cache = root()
    chain = [cache / part for part in reversed(path.relative_to(cache).parents)] + [path]
    for i, step in enumerate(chain):
        why = problem(step, stat if i == len(chain) - 1 else None)
        if why is not None:
            _warn_once(step, why)
            return False
    return True


def _warn_once(path: Path, why: str) -> None:
    if str(path) in _warned:
        return
    _warned.add(str(path))
    if "belongs to" in why:
        fix = "set AOTGRAD_CACHE_DIR (or aotgrad.config.cache_dir) to a folder of your own"
    else:
        fix = (f"`chmod {700 if path.is_dir() else 600} {path}`, or set AOTGRAD_CACHE_DIR "
               f"(or aotgrad.config.cache_dir) to a folder of your own")
    log.warning("aotgrad disk cache: not using %s: %s. The cache holds pickles, and loading one runs the code "
                "it names, so whoever can write there could run code in this process; aotgrad reads and "
                "writes nothing there and compiles as with the cache off. To use the cache: %s.", path, why, fix)


# -- reading and writing ------------------------------------------------------------

def read_private(path: Path) -> tuple[bytes, os.stat_result] | None:
    """A cache file's bytes and stat; None, nothing read, when it or a folder above it is not
    private (warned). Raises OSError as open does (FileNotFoundError: no such file)."""
    if not is_private(path.parent):  # (first: an open could block on what others put there)
        return None
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        if not is_private(path, stat):
            return None
        return f.read(), stat


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a reader
    sees the old file, the new one or none, never part of one, whatever other writers do.
    Raises NotPrivate, writing nothing, where a folder on the way or the old file is not private."""
    if not is_private(path):  # (what exists of the way to it; what does not, make_folders makes private)
        raise NotPrivate(f"others may write {path} or a folder above it (see the warning)")
    make_folders(path.parent)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name[:16]}.", suffix=".tmp", dir=path.parent)  # 0o600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except BaseException:
        remove_file(Path(temporary))
        raise


def make_folders(folder: Path) -> None:
    """Make `folder` and the folders from the cache root down to it, each private (0o700;
    `parents=True` would give the root the usual mode). The root's own parents get the usual mode."""
    cache = root()
    cache.parent.mkdir(parents=True, exist_ok=True)
    for step in [cache / part for part in reversed(folder.relative_to(cache).parents)] + [folder]:
        step.mkdir(exist_ok=True, mode=0o700)


def remove_file(path: str | Path, stat: os.stat_result | None = None) -> None:
    """Delete `path`, unless (with `stat`) another writer has replaced it since it was read."""
    try:
        if stat is not None:
            now = os.stat(path)
            if (now.st_ino, now.st_mtime_ns, now.st_size) != (stat.st_ino, stat.st_mtime_ns, stat.st_size):
                return
        os.unlink(path)
    except OSError:
        pass


# -- size ---------------------------------------------------------------------------

def files() -> list[tuple[str, os.stat_result]]:
    """The folder's files, graph entries and code (not writers' temporary files), with their
    stat. Paths as str: a Path each would be most of the time (1.5 s for 86k files)."""
    cache, found = root(), []
    for parent in (cache, *(cache / name for name in SUBFOLDERS)):
        for folder in _scan(parent):
            if len(folder.name) == 2 and folder.is_dir(follow_symlinks=False):
                for file in _scan(folder.path):
                    try:
                        if not file.name.startswith(".") and file.is_file(follow_symlinks=False):
                            found.append((file.path, file.stat(follow_symlinks=False)))
                    except OSError:  # removed meanwhile
                        pass
    return found


def _scan(folder) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError:
        return []


def touch(path: Path) -> None:
    """Mark a file used now, for eviction: its mtime (file systems often do not keep atime)."""
    try:
        os.utime(path)
    except OSError:
        pass


def evict(keep: Path) -> int:
    """After storing `keep`: when the folder holds more than `config.cache_size_limit_mb`,
    delete the least recently used files (oldest mtime first), never `keep`, down to EVICT_TO
    of the limit. The folder is counted at a process's first store and when what it holds,
    by this process's count, passes the limit (other processes' writes show at the next
    count). Returns how many files were deleted."""
    limit = config.cache_size_limit_mb
    if limit is None:
        return 0
    counted, written = _bytes_held.get(str(root())), _size(keep)
    if counted is not None and counted + written <= limit * 2**20:
        _bytes_held[str(root())] = counted + written
        return 0
    found = sorted(files(), key=lambda item: item[1].st_mtime_ns)
    total, removed = sum(stat.st_size for _, stat in found), 0
    if total > limit * 2**20:
        for path, stat in found:
            if total <= limit * 2**20 * EVICT_TO:
                break
            if path != str(keep):
                remove_file(path, stat)
                total -= stat.st_size
                removed += 1
    _bytes_held[str(root())] = total
    return removed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def clear() -> int:
    """Delete every entry under the cache root, and generated.py's code; returns how many entries."""
    cache = root()
    removed = 0
    if cache is None or not cache.is_dir():
        return 0
    others = [cache / name for name in SUBFOLDERS]  # code objects and Inductor's keys, not counted
    for folder in [*cache.iterdir(), *(f for other in others if other.is_dir() for f in other.iterdir())]:
        if folder.is_dir() and len(folder.name) == 2:
            for path in folder.iterdir():
                remove_file(path)
                if folder.parent == cache:
                    removed += 1
    return removed


# -- aotgrad cache --------------------------------------------------------------------

def main(argv: list[str]) -> int:
    """`aotgrad cache info|clear`: describe the disk cache folder, or empty it."""
    parser = argparse.ArgumentParser(prog="aotgrad cache", description=(
        "aotgrad's disk cache of traced and partitioned graphs (aotgrad.config.cache_dir, set by "
        "AOTGRAD_CACHE_DIR). `info`: the folder, whether only you may write it (aotgrad uses it only "
        "then), its entries, size and limit (aotgrad.config.cache_size_limit_mb). `clear`: delete every "
        "entry and the generated code."))
    parser.add_argument("action", choices=("info", "clear"))
    action = parser.parse_args(argv).action
    cache = root()
    if cache is None:
        print("The disk cache is off: aotgrad.config.cache_dir is None (AOTGRAD_CACHE_DIR is set and empty).")
        return 0
    if not cache.is_dir():
        print(f"disk cache folder: {cache} (not made yet: the first compile stored makes it)")
        return 0
    if action == "clear":
        count = len(files())
        print(f"Deleted {clear()} entries ({count} files, generated code and Inductor's keys included) "
              f"from {cache}.")
        return 0
    print("\n".join(info_lines(cache)))
    return 0


def info_lines(cache: Path) -> list[str]:
    """What `aotgrad cache info` prints about the existing folder `cache`."""
    found = files()
    entries = [path for path, _ in found if os.path.dirname(os.path.dirname(path)) == str(cache)]
    size = sum(stat.st_size for _, stat in found)
    limit = config.cache_size_limit_mb
    folders = [cache, *(cache / name for name in SUBFOLDERS), *sorted({Path(os.path.dirname(path)) for path, _ in found})]
    problems = [(path, why) for path in folders if (why := problem(path)) is not None]
    problems += [(path, why) for path, stat in found if (why := problem(Path(path), stat)) is not None]
    lines = [f"disk cache folder: {cache}"]
    if problems:
        lines.append(f"private: no, so aotgrad neither reads nor writes it ({len(problems)} paths others may write)")
        lines += [f"  {path}: {why}" for path, why in problems[:5]]
        lines.append(f"  To use it: `chmod -R go-w {cache}` if it is yours, or set AOTGRAD_CACHE_DIR to a folder "
                     f"of your own.")
    else:
        lines.append("private: yes (only you may write it, and what is in it)")
    keys = sum(os.path.basename(os.path.dirname(os.path.dirname(path))) == "inductor" for path, _ in found)
    lines.append(f"entries: {len(entries)} graphs, {len(found) - len(entries) - keys} generated code files, "
                 f"{keys} Inductor keys")
    lines.append(f"size: {size / 2**20:.1f} MiB of " + ("no limit" if limit is None else f"{limit} MiB")
                 + " (aotgrad.config.cache_size_limit_mb)")
    return lines
