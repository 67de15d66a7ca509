"""The long fuzz sweep (`slow`) runs only when asked for: `python -m pytest -m slow tests/fuzz`."""
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="long fuzz sweep: run with `python -m pytest -m slow tests/fuzz`")
    for item in items:
        if "slow" in item.keywords and HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
