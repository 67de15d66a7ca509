"""The whole test run uses a fresh disk cache (aotgrad.config.cache_dir) in a temporary folder.

Tests never read or write the user's ~/.cache/aotgrad, and a graph that several tests (or one
test twice) compile is loaded from disk the second time, so the load path runs everywhere.
Subprocesses the tests start find the same folder through AOTGRAD_CACHE_DIR.
"""
import os

import pytest

import aotgrad


@pytest.fixture(autouse=True, scope="session")
def _disk_cache_in_a_temporary_folder(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("aotgrad-cache"))
    previous_dir, previous_env = aotgrad.config.cache_dir, os.environ.get("AOTGRAD_CACHE_DIR")
    aotgrad.config.cache_dir = os.environ["AOTGRAD_CACHE_DIR"] = folder
    yield folder
    aotgrad.config.cache_dir = previous_dir
    if previous_env is None:
        os.environ.pop("AOTGRAD_CACHE_DIR", None)
    else:
        os.environ["AOTGRAD_CACHE_DIR"] = previous_env
