"""Generated source (aotgrad/persistence/generated.py): the code objects are kept on disk, so a second
process reads them instead of compiling; tracebacks name this call's file; a corrupt file is
rejected, deleted and compiled again; with the cache off nothing is written; in a folder others
may write nothing is read or written."""
from __future__ import annotations

import hashlib
import logging
import marshal
import os
import traceback
from types import SimpleNamespace
from pathlib import Path

import pytest

import aotgrad
from aotgrad.persistence import cache_folder, disk_cache, generated

SOURCE = "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return [x * i for i in range(3)]\n"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(aotgrad.config, "cache_dir", str(tmp_path / "cache"))
    return tmp_path / "cache"


def code_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("code/??/*") if not p.name.startswith("."))


def no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("compiled, not read from the disk")
    monkeypatch.setitem(generated.__dict__, "compile", refuse)


def test_a_second_define_reads_the_code_and_names_its_own_file(cache, monkeypatch):
    first = generated.define(SOURCE, "<first>", {}, "f")
    assert len(code_files(cache)) == 1
    no_compiling(monkeypatch)  # a later process: same source, another file name
    second = generated.define(SOURCE, "<second>", {}, "f")
    assert second(2) == first(2) == [0, 2, 4]
    with pytest.raises(ValueError) as error:
        second(-1)
    frame = traceback.extract_tb(error.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.line) == ("<second>", 3, "raise ValueError('negative')")
    with pytest.raises(AssertionError, match="compiled, not read"):  # another source is no hit
        generated.define(SOURCE.replace("x * i", "x + i"), "<third>", {}, "f")


@pytest.mark.parametrize("corruption", ["flipped byte", "truncated", "not code"])
def test_a_corrupt_code_file_is_rejected_deleted_and_compiled_again(cache, corruption, caplog):
    generated.define(SOURCE, "<first>", {}, "f")
    [path] = code_files(cache)
    data = path.read_bytes()
    if corruption == "flipped byte":
        data = data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:]
    elif corruption == "truncated":
        data = data[:40]
    else:  # a whole file, checksum right, of something that is not a code object
        body = marshal.dumps(42)
        data = hashlib.sha256(body).digest() + body
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        f = generated.define(SOURCE, "<again>", {}, "f")
    assert f(3) == [0, 3, 6]
    assert "rejected" in caplog.text
    assert path.read_bytes() != data  # compiled again and written back whole
    assert generated.define(SOURCE, "<third>", {}, "f")(1) == [0, 1, 2]


def test_the_cache_off_writes_nothing(cache, monkeypatch):
    monkeypatch.setattr(aotgrad.config, "cache_dir", None)
    assert generated.define(SOURCE, "<off>", {}, "f")(1) == [0, 1, 2]
    assert not cache.exists()


def test_clear_deletes_the_code_too(cache):
    generated.define(SOURCE, "<first>", {}, "f")
    assert disk_cache.clear() == 0  # no graph entries
    assert code_files(cache) == []


def test_code_in_a_folder_others_may_write_is_neither_read_nor_written(cache, monkeypatch, caplog):
    monkeypatch.setattr(cache_folder, "_warned", set())
    generated.define(SOURCE, "<first>", {}, "f")
    [path] = code_files(cache)
    os.chmod(cache / "code", 0o777)
    unmarshalled = []
    monkeypatch.setattr(generated, "marshal", SimpleNamespace(
        loads=lambda data: unmarshalled.append(data), dumps=marshal.dumps))
    with caplog.at_level(logging.WARNING, logger="aotgrad"):
        assert generated.define(SOURCE, "<again>", {}, "f")(2) == [0, 2, 4]  # compiled here
        assert generated.define(SOURCE.replace("x * i", "x + i"), "<other>", {}, "f")(2) == [2, 3, 4]
    assert unmarshalled == [] and code_files(cache) == [path]
    [warning] = [m for m in caplog.messages if m.startswith("aotgrad disk cache: not using")]
    assert f"not using {cache / 'code'}: its group and all users may write it" in warning


def test_reading_code_marks_it_used_for_the_size_limit(cache):
    generated.define(SOURCE, "<first>", {}, "f")
    [path] = code_files(cache)
    os.utime(path, (1000, 1000))  # (eviction deletes the oldest mtime first)
    generated.define(SOURCE, "<again>", {}, "f")
    assert path.stat().st_mtime > 1000
