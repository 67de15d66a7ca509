"""aotgrad.config: knobs checked as they are set (a typo names the closest knob, a bad value the
values the knob takes), config.patch for a block or a function, and the defaults at import."""
import fractions
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

import aotgrad
from aotgrad import config
from aotgrad.config import ConfigError, UnknownKnobError

PACKAGE = pathlib.Path(aotgrad.__file__).parent

# The defaults config.py documents, with AOTGRAD_LOG and AOTGRAD_CACHE_DIR unset and
# XDG_CACHE_HOME=<folder> (cache_dir is <folder>/aotgrad)
DEFAULTS = {"partitioner": "default", "activation_memory_budget": 1.0, "activation_memory_budget_bytes": None,
            "optimize_ddp": True, "compiled_autograd_verbose": False, "log_level": "warning",
            "check_graphs": False, "cache_size_limit_mb": 1024, "lazy_backward": True}


@pytest.fixture(autouse=True)
def knobs_restored():
    """Each test leaves the knobs as it found them (written back unchecked, as they were)."""
    before = {name: getattr(config, name) for name in config._KNOBS}
    yield
    vars(config).update(before)


# -- setting and reading --------------------------------------------------------------------

def test_a_misspelt_knob_is_refused_when_set_naming_the_closest_and_every_knob():
    with pytest.raises(UnknownKnobError) as caught:
        aotgrad.config.activation_memory_bugdet = 0.5
    message = str(caught.value)
    assert message.startswith("aotgrad.config has no knob 'activation_memory_bugdet'; "
                              "did you mean 'activation_memory_budget'?")
    assert "would change nothing" in message and "To continue: use one of the knobs: partitioner, " in message
    assert all(name in message for name in config._KNOBS)
    assert "activation_memory_bugdet" not in vars(config)


def test_an_unknown_knob_is_a_value_error_and_an_attribute_error():
    for kind in (ValueError, TypeError, AttributeError):
        with pytest.raises(kind):
            config.no_such_knob = 1


def test_reading_a_misspelt_knob_raises_attribute_error_naming_the_closest():
    with pytest.raises(AttributeError, match=r"^aotgrad.config has no knob 'partitoner'; did you mean "
                                             r"'partitioner'\? To continue: use one of the knobs: partitioner, "):
        config.partitoner
    assert not hasattr(config, "partitoner") and getattr(config, "partitoner", "absent") == "absent"


def test_reading_a_private_or_dunder_name_raises_a_plain_attribute_error():
    with pytest.raises(AttributeError) as caught:
        config.__path__
    assert type(caught.value) is AttributeError


def test_knobs_read_as_plain_module_attributes():
    from aotgrad.config import partitioner

    assert partitioner == config.partitioner == vars(config)["partitioner"]
    assert isinstance(config, types.ModuleType) and sys.modules["aotgrad.config"] is config


INVALID = [
    ("activation_memory_budget", 1.5, "a real number from 0 to 1"),
    ("activation_memory_budget", -0.1, "a real number from 0 to 1"),
    ("activation_memory_budget", float("nan"), "a real number from 0 to 1"),
    ("activation_memory_budget", True, "not a bool"),
    ("activation_memory_budget", "0.5", "a real number from 0 to 1"),
    ("activation_memory_budget", None, "a real number from 0 to 1"),
    ("activation_memory_budget_bytes", -1, "None (no bound) or a non-negative int"),
    ("activation_memory_budget_bytes", 1.5, "None (no bound) or a non-negative int"),
    ("activation_memory_budget_bytes", True, "not a bool"),
    ("partitioner", "mincut", "'default' or 'min_cut'. Did you mean 'min_cut'?"),
    ("partitioner", "MIN_CUT", "'default' or 'min_cut'. Did you mean 'min_cut'?"),
    ("partitioner", None, "'default' or 'min_cut'"),
    ("partitioner", aotgrad.min_cut_rematerialization_partition, "'default' or 'min_cut'"),
    ("optimize_ddp", 1, "True or False"),
    ("optimize_ddp", "False", "True or False"),
    ("compiled_autograd_verbose", None, "True or False"),
    ("check_graphs", 0, "True or False"),
    ("log_level", "verbose", "'warning', 'info' or 'debug' (any case)"),
    ("log_level", "DEGUB", "'warning', 'info' or 'debug' (any case). Did you mean 'debug'?"),
    ("log_level", 10, "'warning', 'info' or 'debug'"),
    ("cache_dir", "", "None (no disk cache) or a directory's path"),
    ("cache_dir", 3, "None (no disk cache) or a directory's path"),
    ("cache_dir", b"/tmp/aotgrad", "None (no disk cache) or a directory's path"),
    ("cache_size_limit_mb", -1, "None (no limit) or a non-negative number of MiB"),
    ("cache_size_limit_mb", "1G", "None (no limit) or a non-negative number of MiB"),
    ("cache_size_limit_mb", False, "not a bool"),
]


@pytest.mark.parametrize("name, value, must_be", INVALID, ids=lambda v: repr(v)[:20])
def test_an_invalid_value_is_refused_when_set_naming_the_knob_and_what_it_takes(name, value, must_be):
    before = getattr(config, name)
    with pytest.raises(ConfigError) as caught:
        setattr(config, name, value)
    message = str(caught.value)
    assert message.startswith(f"aotgrad.config.{name} cannot be {value!r}: it must be ")
    assert must_be in message
    assert message.endswith(f"It keeps its value, {before!r}. To continue: give it such a value.")
    assert getattr(config, name) is before


VALID = [
    ("activation_memory_budget", 0), ("activation_memory_budget", 1), ("activation_memory_budget", 0.25),
    ("activation_memory_budget", fractions.Fraction(1, 2)),
    ("activation_memory_budget_bytes", None), ("activation_memory_budget_bytes", 0),
    ("activation_memory_budget_bytes", 1 << 20),
    ("partitioner", "min_cut"), ("partitioner", "default"),
    ("optimize_ddp", False), ("compiled_autograd_verbose", True), ("check_graphs", True),
    ("log_level", "DeBuG"), ("log_level", " info "), ("log_level", "warning"),
    ("cache_dir", None), ("cache_dir", "/tmp/aotgrad-cache"), ("cache_dir", pathlib.Path("/tmp/aotgrad-cache")),
    ("cache_size_limit_mb", None), ("cache_size_limit_mb", 0), ("cache_size_limit_mb", 0.5),
    ("cache_size_limit_mb", 4096),
]


@pytest.mark.parametrize("name, value", VALID, ids=lambda v: repr(v)[:20])
def test_a_valid_value_is_set_as_given(name, value):
    setattr(config, name, value)
    assert getattr(config, name) is value


def test_a_log_level_the_knob_takes_is_one_logs_applies():
    from aotgrad.observe import logs

    config.log_level = " Info "
    try:
        logs.apply_log_level()
        assert logs.log.level == logs.logging.INFO
    finally:
        config.log_level = "warning"
        logs.apply_log_level()


def test_deleting_a_knob_is_refused():
    with pytest.raises(ConfigError, match=r"^aotgrad.config.partitioner cannot be deleted: .* To continue: "):
        del config.partitioner
    assert config.partitioner == "default"


def _public_values() -> set[str]:
    return {name for name, value in vars(config).items() if not name.startswith("_")
            and not isinstance(value, types.ModuleType) and not callable(value)}


def test_every_value_config_defines_is_a_checked_knob():
    assert _public_values() == set(config._KNOBS)


_READ = re.compile(r"(?:(?<![\w.])config|aotgrad\.config)\.(\w+)")


def test_every_config_name_aotgrad_reads_is_a_knob():
    """`config.<name>` anywhere in aotgrad/ (code or text) names a knob or a config function."""
    read = {(path.name, name) for path in PACKAGE.rglob("*.py") for name in _READ.findall(path.read_text())}
    assert {name for _, name in read} >= {"partitioner", "cache_dir", "log_level", "optimize_ddp"}
    assert [(file, name) for file, name in read if name not in config._KNOBS
            and not callable(getattr(config, name, None))] == []


# -- patch -------------------------------------------------------------------------------------

def test_patch_sets_knobs_for_the_block_and_restores_them():
    with config.patch(partitioner="min_cut", activation_memory_budget=0.5):
        assert (config.partitioner, config.activation_memory_budget) == ("min_cut", 0.5)
    assert (config.partitioner, config.activation_memory_budget) == ("default", 1.0)


def test_patch_takes_a_name_and_value_or_a_dict():
    with config.patch("partitioner", "min_cut"):
        assert config.partitioner == "min_cut"
    with config.patch({"activation_memory_budget_bytes": 100}, check_graphs=True):
        assert (config.activation_memory_budget_bytes, config.check_graphs) == (100, True)
    assert (config.partitioner, config.activation_memory_budget_bytes, config.check_graphs) == \
        ("default", None, False)


def test_patch_restores_the_knobs_when_the_block_raises():
    before = (config.optimize_ddp, config.log_level)
    with pytest.raises(KeyError):
        with config.patch(optimize_ddp=not before[0], log_level="debug"):
            raise KeyError("from the block")
    assert (config.optimize_ddp, config.log_level) == before


def test_patch_restores_what_it_found_not_the_default():
    config.activation_memory_budget = 0.75
    with config.patch(activation_memory_budget=0.25):
        config.activation_memory_budget = 0.5  # set inside the block: also undone
    assert config.activation_memory_budget == 0.75


def test_patch_decorates_a_function_for_each_call():
    @config.patch(compiled_autograd_verbose=True)
    def verbose(depth=0):
        assert config.compiled_autograd_verbose is True
        if depth < 2:
            verbose(depth + 1)  # entered again while active: each exit restores its own entry's
        return depth

    assert verbose() == 0 and verbose() == 0
    assert config.compiled_autograd_verbose is False


def test_nested_patches_restore_in_order():
    with config.patch(partitioner="min_cut"):
        with config.patch(partitioner="default", check_graphs=True):
            assert (config.partitioner, config.check_graphs) == ("default", True)
        assert (config.partitioner, config.check_graphs) == ("min_cut", False)
    assert config.partitioner == "default"


def test_patch_checks_every_change_before_setting_any():
    with pytest.raises(ConfigError, match=r"^aotgrad.config.partitioner cannot be 'mincut': .* "
                                          r"Did you mean 'min_cut'\?"):
        config.patch(check_graphs=True, partitioner="mincut")
    with pytest.raises(UnknownKnobError, match=r"has no knob 'activation_memory_bugdet'; did you mean "
                                               r"'activation_memory_budget'\?"):
        config.patch(activation_memory_bugdet=0.5)
    assert config.check_graphs is False and config.partitioner == "default"


def test_patch_restores_a_value_written_around_the_checks():
    vars(config)["log_level"] = "loud"  # (AOTGRAD_LOG=loud would fail the import instead)
    with config.patch(log_level="info"):
        assert config.log_level == "info"
    assert config.log_level == "loud"


def test_patch_with_a_name_and_no_value_says_how_to_call_it():
    with pytest.raises(TypeError, match=r"patch\('partitioner'\) got a knob without a value\. To continue: "):
        config.patch("partitioner")


# -- defaults ----------------------------------------------------------------------------------

_DEFAULTS_PROBE = """
import json, aotgrad
print(json.dumps({name: getattr(aotgrad.config, name) for name in aotgrad.config._KNOBS}))
"""


def test_importing_aotgrad_leaves_every_knob_at_its_documented_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("AOTGRAD_LOG", "AOTGRAD_CACHE_DIR")}
    env.update(XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=str(PACKAGE.parent))
    done = subprocess.run([sys.executable, "-c", _DEFAULTS_PROBE], cwd=PACKAGE.parent, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    knobs = json.loads(done.stdout.strip().splitlines()[-1])
    assert knobs == {**DEFAULTS, "cache_dir": os.path.join(str(tmp_path), "aotgrad")}
