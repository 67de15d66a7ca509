"""The `aotgrad` loggers' level: `aotgrad.config.log_level`, set from AOTGRAD_LOG at import.

    AOTGRAD_LOG=debug python train.py          # or, in code:
    aotgrad.config.log_level = "info"

"warning" (the default) leaves the loggers as Python's logging configured them; "info"
and "debug" set the level of `aotgrad`, which its children (`aotgrad.compiled_autograd`,
`aotgrad.partition.min_cut`, ...) inherit, and print to stderr if no handler would show the
records otherwise. Each compile calls `apply_log_level()`; it does work only when the knob
changed since the last call.
"""
from __future__ import annotations

import logging
import sys

LEVELS = {"warning": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}  # config.log_level's values

log = logging.getLogger("aotgrad")

_applied_value = "warning"  # the knob's value at the last call
_applied_level = logging.WARNING  # and the level it named
_level_before = logging.NOTSET  # the `aotgrad` logger's own level before we last raised it
_handler: logging.Handler | None = None  # ours, while we print


class _Stderr(logging.StreamHandler):
    """Prints to whatever `sys.stderr` is at the time (pytest and notebooks replace it)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def apply_log_level() -> None:
    """Give the `aotgrad` loggers the level `aotgrad.config.log_level` names.

    Case-insensitive "warning", "info" or "debug"; the knob checks the value as it is set (and
    AOTGRAD_LOG at import), so anything else got there around the checks and raises ValueError
    naming the knob. Cheap when nothing changed (one comparison), so call it per compile."""
    from aotgrad import config

    value = config.log_level
    if value == _applied_value:
        return
    _apply(_level_of(value), value)


def _level_of(value) -> int:
    level = LEVELS.get(str(value).strip().lower()) if isinstance(value, str) else None
    if level is None:
        raise ValueError(f"aotgrad.config.log_level is {value!r}; it must be one of 'warning', 'info' or "
                         "'debug' (any case). To continue: set aotgrad.config.log_level to one of those.")
    return level


def _apply(level: int, value: str) -> None:
    global _applied_value, _applied_level, _level_before, _handler
    if level == logging.WARNING:  # back to how logging had it
        if _applied_level != logging.WARNING:
            log.setLevel(_level_before)
        if _handler is not None:
            log.removeHandler(_handler)
            _handler = None
    else:
        if _applied_level == logging.WARNING:
            _level_before = log.level
        log.setLevel(level)
        if _handler is None and not _has_handler():
            _handler = _Stderr()
            log.addHandler(_handler)
    _applied_value, _applied_level = value, level


def _has_handler() -> bool:
    """Would a record of the `aotgrad` logger reach a handler other than logging's last resort?"""
    logger: logging.Logger | None = log
    while logger is not None:
        if logger.handlers:
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False
