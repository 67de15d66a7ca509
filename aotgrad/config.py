"""aotgrad's knobs: plain module attributes, read by the entry points only.

    import aotgrad
    aotgrad.config.partitioner = "min_cut"
    with aotgrad.config.patch(activation_memory_budget=0.5):   # for a block, then restored
        ...

Each knob is checked as it is set: a name that is no knob (a typo) or a value the knob cannot
take raises at once, naming the closest knob or the values it takes (`_KNOBS`). The defaults,
below, are set at import; the one an environment variable can make wrong, AOTGRAD_LOG, is
checked at the end of the module, so a bad value fails `import aotgrad` (`_check_environment`).
"""
import contextlib
import difflib
import numbers
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

# Which partitioner the `aotgrad` backend uses: "default" or "min_cut".
partitioner = "default"
# Min-cut partitioner, read per call when its memory_budget is None: 1.0 is the default
# policy (the min cut at the lowest price that recomputes no matmul, convolution or
# attention); below, a bound on the saved bytes as a fraction of those saved when nothing
# is recomputed (partition/min_cut.py). Below 1 (or with a byte bound) the `aotgrad`
# backend uses the min-cut partitioner too.
activation_memory_budget = 1.0
# Absolute bound on the min-cut partitioner's saved bytes (inputs free), or None; read per call.
activation_memory_budget_bytes = None
# Split graphs at DDP bucket boundaries under torch.compile (issue 7), where PyTorch's splitter has
# not (torch._dynamo.config.optimize_ddp off; aotgrad leaves that flag alone).
optimize_ddp = True
# Compile a training graph's backward at its first call, knowing which outputs got a gradient
# (a step that backpropagates only the loss compiles only what that needs), instead of with the
# forward. Backwards with symbolic shapes are compiled with the forward either way. Read per compile.
lazy_backward = True
# Print compiled-autograd graphs (issue 6).
compiled_autograd_verbose = False


def _default_cache_dir() -> str | None:
    """$AOTGRAD_CACHE_DIR (empty: no cache), else $XDG_CACHE_HOME/aotgrad, else ~/.cache/aotgrad."""
    if "AOTGRAD_CACHE_DIR" in os.environ:
        return os.environ["AOTGRAD_CACHE_DIR"] or None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "aotgrad")


# The disk cache of traced and partitioned graphs (disk_cache.py): a second process that compiles
# the same torch.compile graph for the same inputs skips tracing and partitioning. A directory
# (created on first store, private: entries are pickles, so aotgrad uses no folder that others
# may write), or None for no disk cache. Read on every compile. `python -m aotgrad cache clear`
# (or `aotgrad.persistence.disk_cache.clear()`) empties it.
cache_dir = _default_cache_dir()
# The most the disk cache folder may hold, in MiB (2**20 bytes), or None for no limit: after each
# store, the least recently used files (entries and code; a hit counts as a use) are deleted
# until it fits. Read on every store.
cache_size_limit_mb = 1024
# Level of the `aotgrad` loggers: "warning", "info" or "debug"; AOTGRAD_LOG overrides (checked at import).
log_level = os.environ.get("AOTGRAD_LOG", "warning")
# Lint every stage's graph and check aotgrad's invariants (slower; for debugging).
check_graphs = False


# -- checking the knobs ------------------------------------------------------------------------

class ConfigError(ValueError, TypeError):
    """A knob set to a value it cannot take. Both a ValueError (out of range) and a TypeError
    (wrong type), so either `except` catches it."""


class UnknownKnobError(ConfigError, AttributeError):
    """A name that is no knob of aotgrad.config, set or read. Also an AttributeError, so that
    `hasattr(aotgrad.config, name)` and `getattr(aotgrad.config, name, default)` keep working."""


def _is_real_fraction(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value <= 1


def _is_byte_count(value) -> bool:
    return value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0)


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _is_partitioner(value) -> bool:
    return isinstance(value, str) and value in ("default", "min_cut")


_LOG_LEVELS = ("warning", "info", "debug")  # (logs.py maps each to logging's level)


def _is_log_level(value) -> bool:
    return isinstance(value, str) and value.strip().lower() in _LOG_LEVELS


def _is_size_limit(value) -> bool:
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= 0)


def _is_directory(value) -> bool:
    # "" would be Path(""), the current directory: AOTGRAD_CACHE_DIR="" means no cache, so say None
    return value is None or (isinstance(value, (str, os.PathLike)) and os.fspath(value) != "")


@dataclass(frozen=True)
class _Knob:
    accepts: Callable[[Any], bool]
    must_be: str  # completes "it must be ..."
    choices: tuple[str, ...] = ()  # the strings it takes, for "did you mean"


_BOOL = _Knob(_is_bool, "True or False")

# Every knob and what it takes. A new knob gets a line here (tests/test_config.py checks that each
# public value above has one).
_KNOBS: dict[str, _Knob] = {
    "partitioner": _Knob(_is_partitioner, "'default' or 'min_cut'", ("default", "min_cut")),
    "activation_memory_budget": _Knob(
        _is_real_fraction, "a real number from 0 to 1, not a bool (the min-cut partitioner saves at most "
        "that fraction of the bytes it saves when nothing is recomputed; 1.0: its default policy)"),
    "activation_memory_budget_bytes": _Knob(
        _is_byte_count, "None (no bound) or a non-negative int, not a bool (the most bytes the "
        "min-cut partitioner may save)"),
    "optimize_ddp": _BOOL,
    "compiled_autograd_verbose": _BOOL,
    "lazy_backward": _BOOL,
    "cache_dir": _Knob(_is_directory, "None (no disk cache) or a directory's path, a non-empty str "
                       "or os.PathLike"),
    "cache_size_limit_mb": _Knob(_is_size_limit, "None (no limit) or a non-negative number of MiB, not a "
                                 "bool (the most the disk cache folder may hold)"),
    "log_level": _Knob(_is_log_level, "'warning', 'info' or 'debug' (any case)", _LOG_LEVELS),
    "check_graphs": _BOOL,
}


def _closest(name: str, candidates) -> str | None:
    by_lower = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return by_lower[match[0]] if match else None


def _unknown_knob_message(name, setting: bool) -> str:
    close = _closest(str(name), _KNOBS)
    return (f"aotgrad.config has no knob {name!r}" + (f"; did you mean {close!r}?" if close else ".")
            + (" aotgrad reads only its knobs, so a value under another name would change nothing."
               if setting else "")
            + f" To continue: use one of the knobs: {', '.join(_KNOBS)}.")


def _checked(name: str, value):
    """`value` if knob `name` takes it; raises UnknownKnobError or ConfigError otherwise."""
    knob = _KNOBS.get(name)
    if knob is None:
        raise UnknownKnobError(_unknown_knob_message(name, setting=True))
    if not knob.accepts(value):
        close = _closest(value, knob.choices) if isinstance(value, str) and knob.choices else None
        raise ConfigError(f"aotgrad.config.{name} cannot be {value!r}: it must be {knob.must_be}."
                          + (f" Did you mean {close!r}?" if close else "")
                          + f" It keeps its value, {globals()[name]!r}. To continue: give it such a value.")
    return value


class _ConfigModule(types.ModuleType):
    """aotgrad.config's type: checks each knob as it is set, and names the closest knob when a
    name is none. Names starting with "_" are the module's own (import machinery, helpers)."""

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value if name.startswith("_") else _checked(name, value))

    def __delattr__(self, name: str) -> None:
        if name in _KNOBS:
            raise ConfigError(f"aotgrad.config.{name} cannot be deleted: aotgrad reads it on every "
                              f"compile. To continue: set it to another value, or use "
                              f"aotgrad.config.patch({name}=...) to change it for a block.")
        super().__delattr__(name)

    def __getattr__(self, name: str):  # only for names the module does not have
        if name.startswith("_"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        raise UnknownKnobError(_unknown_knob_message(name, setting=False))


# -- patch -------------------------------------------------------------------------------------

_NOTHING = object()


class _Patch(contextlib.ContextDecorator):
    """patch()'s result: a context manager and decorator that sets `changes` (checked) on entry
    and puts the previous values back on exit. Entered again while active (nesting, recursion
    of a decorated function), each exit restores what its own entry found."""

    def __init__(self, changes: dict[str, Any]):
        self.changes = changes
        self._saved: list[dict[str, Any]] = []

    def __enter__(self) -> "_Patch":
        knobs = globals()
        self._saved.append({name: knobs[name] for name in self.changes})
        knobs.update(self.changes)  # checked in patch(); written directly, as the restore is
        return self

    def __exit__(self, *exc_info) -> bool:
        # the previous values go back unchecked: they were there (written around the checks, maybe)
        globals().update(self._saved.pop())
        return False

    def __repr__(self) -> str:
        return "aotgrad.config.patch(" + ", ".join(f"{k}={v!r}" for k, v in self.changes.items()) + ")"


def patch(name_or_changes: str | dict[str, Any] | None = None, value: Any = _NOTHING, /, **changes) -> _Patch:
    """Set knobs for a `with` block or a decorated function, then restore their previous values
    (also when the block raises), like torch._dynamo.config.patch.

        with aotgrad.config.patch(partitioner="min_cut", activation_memory_budget=0.5):
            compiled(x).sum().backward()

        @aotgrad.config.patch("log_level", "debug")        # or patch({"log_level": "debug"})
        def test_compile_logs_its_phases(): ...

    Every change is checked when patch() is called: a misspelt knob or a value it cannot take
    raises there (UnknownKnobError, ConfigError), before anything is set.
    """
    if isinstance(name_or_changes, str):
        if value is _NOTHING:
            raise TypeError(f"aotgrad.config.patch({name_or_changes!r}) got a knob without a value. "
                            f"To continue: patch({name_or_changes!r}, value) or patch({name_or_changes}=value).")
        changes = {name_or_changes: value, **changes}
    elif isinstance(name_or_changes, dict):
        changes = {**name_or_changes, **changes}
    elif name_or_changes is not None or value is not _NOTHING:
        raise TypeError(f"aotgrad.config.patch takes a knob's name and a value, a dict of changes or "
                        f"keyword arguments, not {name_or_changes!r}. To continue: "
                        f"patch(partitioner='min_cut'), patch('partitioner', 'min_cut') or "
                        f"patch({{'partitioner': 'min_cut'}}).")
    return _Patch({name: _checked(name, v) for name, v in changes.items()})


# -- the environment ---------------------------------------------------------------------------

def _check_environment() -> None:
    """Raise ConfigError if AOTGRAD_LOG, read above as log_level's default, is no log level: at
    import, before anything was compiled with a level nobody asked for."""
    value = log_level
    if not _is_log_level(value):
        close = _closest(value, _KNOBS["log_level"].choices)
        raise ConfigError(f"AOTGRAD_LOG is {value!r}, which is no log level: it must be "
                          f"{_KNOBS['log_level'].must_be}." + (f" Did you mean {close!r}?" if close else "")
                          + " aotgrad reads it when it is imported. To continue: unset AOTGRAD_LOG or set "
                          "it to one of those (or set aotgrad.config.log_level in code).")


_check_environment()
sys.modules[__name__].__class__ = _ConfigModule
