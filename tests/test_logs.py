"""Logs and progress: config.log_level / AOTGRAD_LOG drive the `aotgrad` loggers; long compiles
on a terminal say which phase they are in."""
import io
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import torch

import aotgrad
from aotgrad import config, logs
from aotgrad.phases import Phases

log = logging.getLogger("aotgrad")


class Records(logging.Handler):
    """Collects what reaches it, without changing any logger's level."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


class LogLevelTest(unittest.TestCase):
    def setUp(self):
        self.knob, self.level = config.log_level, log.level
        self.records = Records()
        log.addHandler(self.records)

    def tearDown(self):
        log.removeHandler(self.records)
        config.log_level = "warning"
        logs.apply_log_level()
        config.log_level = self.knob
        log.setLevel(self.level)


class LogLevel(LogLevelTest):
    def test_debug_logs_name_each_phase_and_its_time(self):
        config.log_level = "debug"
        g = aotgrad.aot_function(lambda x: x.sin() * 2, aotgrad.nop)
        g(torch.randn(3, requires_grad=True))
        messages = [r.getMessage() for r in self.records.records]
        for phase in ("trace", "functionalize", "partition", "compile"):
            self.assertTrue(any(f": {phase} " in m and m.endswith(" ms") for m in messages), (phase, messages))
        self.assertTrue(any(m.startswith("aotgrad: compiled forward and backward of ") for m in messages), messages)

    def test_info_shows_info_but_not_debug(self):
        config.log_level = "info"
        logs.apply_log_level()
        log.debug("hidden")
        logging.getLogger("aotgrad.partition.min_cut").info("shown")
        self.assertEqual([r.getMessage() for r in self.records.records], ["shown"])

    def test_warning_restores_the_level_logging_had(self):
        log.setLevel(logging.ERROR)  # the user's own choice, before aotgrad raised it
        config.log_level = "debug"
        logs.apply_log_level()
        self.assertEqual(log.level, logging.DEBUG)
        config.log_level = "warning"
        logs.apply_log_level()
        self.assertEqual(log.level, logging.ERROR)

    def test_level_names_are_case_insensitive(self):
        config.log_level = "DeBuG"
        logs.apply_log_level()
        self.assertEqual(log.level, logging.DEBUG)

    def test_child_loggers_inherit_the_level(self):
        config.log_level = "debug"
        logs.apply_log_level()
        for name in ("aotgrad.compiled_autograd", "aotgrad.distributed", "aotgrad.partition.min_cut"):
            self.assertTrue(logging.getLogger(name).isEnabledFor(logging.DEBUG), name)

    def test_unknown_level_is_an_error_naming_the_knob_when_set(self):
        with self.assertRaisesRegex(ValueError, r"^aotgrad.config.log_level cannot be 'verbose': it must be "
                                                r"'warning', 'info' or 'debug'"):
            config.log_level = "verbose"

    def test_a_level_written_around_the_checks_is_an_error_naming_the_knob(self):
        vars(config)["log_level"] = "loud"  # (setting the knob, or AOTGRAD_LOG at import, would refuse it)
        with self.assertRaisesRegex(ValueError, r"^aotgrad.config.log_level is 'loud'.*To continue: set "):
            logs.apply_log_level()


def _sine(x):
    return x.sin()


class OneLinePerCompile(LogLevelTest):
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records.records]

    def test_info_is_one_line_per_compile_naming_the_graphs_the_function_its_file_and_the_time(self):
        config.log_level = "info"
        g = aotgrad.aot_function(_sine, aotgrad.nop)
        g(torch.randn(3, requires_grad=True))
        g(torch.randn(3, requires_grad=True))  # (no compile)
        where = f"{_sine.__code__.co_filename}:{_sine.__code__.co_firstlineno}"
        self.assertEqual(len(self.messages()), 1, self.messages())
        self.assertRegex(self.messages()[0], rf"^aotgrad: compiled forward and backward of _sine at {re.escape(where)} "
                                             r"in \d+\.\d ms \(trace \d+\.\d, functionalize \d+\.\d, partition "
                                             r"\d+\.\d, compile \d+\.\d\)$")

    def test_a_compile_without_backward_says_inference_graph(self):
        config.log_level = "info"
        with torch.no_grad():
            aotgrad.aot_function(_sine, aotgrad.nop)(torch.randn(3, requires_grad=True))
        self.assertEqual(len(self.messages()), 1, self.messages())
        self.assertRegex(self.messages()[0], r"^aotgrad: compiled inference graph of _sine at \S+test_logs.py:\d+ in ")

    def test_a_module_is_located_by_its_forward(self):
        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * 2

        config.log_level = "info"
        aotgrad.aot_module(Scale(), aotgrad.nop)(torch.randn(3, requires_grad=True))
        where = f"{Scale.forward.__code__.co_filename}:{Scale.forward.__code__.co_firstlineno}"
        self.assertEqual(len(self.messages()), 1, self.messages())
        self.assertIn(f" of Scale.forward at {where} in ", self.messages()[0])


class StderrHandler(LogLevelTest):
    def setUp(self):
        super().setUp()
        log.removeHandler(self.records)  # no handler anywhere: aotgrad must add its own
        self.root_handlers = logging.root.handlers[:]
        logging.root.handlers.clear()
        self.stderr = sys.stderr
        sys.stderr = io.StringIO()

    def tearDown(self):
        sys.stderr = self.stderr
        logging.root.handlers[:] = self.root_handlers
        log.addHandler(self.records)
        super().tearDown()

    def test_added_once_when_nothing_would_show_the_records_and_removed_at_warning(self):
        config.log_level = "debug"
        logs.apply_log_level()
        config.log_level = "DEBUG"
        logs.apply_log_level()  # a new value, the same level: still one handler
        self.assertEqual(len(log.handlers), 1)
        log.debug("aotgrad f: trace 1.0 ms")
        self.assertEqual(sys.stderr.getvalue(), "aotgrad f: trace 1.0 ms\n")
        config.log_level = "warning"
        logs.apply_log_level()
        self.assertEqual(log.handlers, [])

    def test_not_added_when_the_application_has_a_handler(self):
        logging.root.addHandler(logging.NullHandler())
        config.log_level = "info"
        logs.apply_log_level()
        self.assertEqual(log.handlers, [])


def _python(code: str, **environment: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **environment}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


class Environment(unittest.TestCase):
    def test_an_unknown_AOTGRAD_LOG_fails_the_import_naming_the_variable_and_its_values(self):
        done = _python("import aotgrad", AOTGRAD_LOG="verbose")
        self.assertNotEqual(done.returncode, 0)
        self.assertRegex(done.stderr.strip().splitlines()[-1],
                         r"ConfigError: AOTGRAD_LOG is 'verbose', which is no log level: it must be 'warning', "
                         r"'info' or 'debug' \(any case\)\. aotgrad reads it when it is imported\. To continue: "
                         r"unset AOTGRAD_LOG or set it to one of those")

    def test_a_misspelt_AOTGRAD_LOG_names_the_closest_level(self):
        done = _python("import aotgrad", AOTGRAD_LOG="debg")
        self.assertIn("AOTGRAD_LOG is 'debg', which is no log level", done.stderr)
        self.assertIn("Did you mean 'debug'?", done.stderr)

    def test_AOTGRAD_LOG_debug_prints_phase_times_to_stderr(self):
        code = ("import torch, aotgrad\n"
                "aotgrad.aot_function(lambda x: x.cos(), aotgrad.nop)(torch.randn(2, requires_grad=True))\n")
        env = {**os.environ, "AOTGRAD_LOG": "debug"}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stderr, r"aotgrad <lambda>: trace \d+\.\d ms")
        self.assertRegex(done.stderr, r"aotgrad: compiled forward and backward of <lambda> in \d+\.\d ms \(trace ")


_TWO_COMPILES = """
import torch


def step(x, w):
    return (x @ w).relu().sum()


compiled = torch.compile(step, backend="aotgrad")
w = torch.randn(3, 2, requires_grad=True)
compiled(torch.randn(4, 3), w).backward()
with torch.no_grad():
    compiled(torch.randn(4, 3), w)  # grad mode is guarded: a second compile, an inference graph
compiled(torch.randn(4, 3), w).backward()  # no compile
"""


class TorchCompileInfo(unittest.TestCase):
    def test_AOTGRAD_LOG_info_gives_one_line_per_torch_compile_compile_naming_the_frame(self):
        with tempfile.TemporaryDirectory() as directory:
            script = os.path.join(directory, "two_compiles.py")
            with open(script, "w") as f:
                f.write(_TWO_COMPILES)
            env = {**os.environ, "AOTGRAD_LOG": "info", "AOTGRAD_CACHE_DIR": ""}
            done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("aotgrad")]
        self.assertEqual(len(lines), 2, done.stderr)
        where = re.escape(f"{script}:5")
        self.assertRegex(lines[0], rf"^aotgrad: compiled forward and backward of step at {where} \(torch.compile "
                                   r"frame 0/0\) in \d+\.\d ms \(")
        self.assertRegex(lines[1], rf"^aotgrad: compiled inference graph of step at {where} \(torch.compile "
                                   r"frame 0/1\) in \d+\.\d ms \(")


class Terminal(io.StringIO):
    """A stream that says it is a terminal; `wrote` is set on each write."""

    def __init__(self):
        super().__init__()
        self.wrote = threading.Event()

    def isatty(self):
        return True

    def write(self, text):
        n = super().write(text)
        self.wrote.set()
        return n


class Progress(unittest.TestCase):
    def run_phases(self, stream, after: float, names=("trace", "partition", "compile")) -> str:
        phases = Phases("step", stream=stream, progress_after=after)
        for name in names:
            with phases(name):
                pass
        phases.finish()
        return stream.getvalue()

    def test_a_long_compile_on_a_terminal_names_each_phase_then_the_total(self):
        lines = self.run_phases(Terminal(), after=0.0).splitlines()
        self.assertEqual(len(lines), 4, lines)
        for line, phase in zip(lines, ("trace", "partition", "compile")):
            self.assertRegex(line, rf"^aotgrad: compiling step — {phase} \(\d+\.\d s\)$")
        self.assertRegex(lines[3], r"^aotgrad: compiled step in \d+\.\d s$")

    def test_a_fast_compile_prints_nothing(self):
        self.assertEqual(self.run_phases(Terminal(), after=60.0), "")

    def test_a_stream_that_is_no_terminal_gets_nothing(self):
        self.assertEqual(self.run_phases(io.StringIO(), after=0.0), "")

    def test_a_phase_running_past_the_threshold_is_named_while_it_runs(self):
        stream = Terminal()
        phases = Phases("step", stream=stream, progress_after=0.05)
        with phases("trace"):
            self.assertTrue(stream.wrote.wait(10))  # the timer printed, inside the phase
            self.assertRegex(stream.getvalue(), r"^aotgrad: compiling step — trace \(\d+\.\d s\)\n$")
        with phases("partition"):
            pass
        phases.finish()
        self.assertEqual(len(stream.getvalue().splitlines()), 3)

    def test_a_failed_compile_stops_its_progress(self):
        stream = Terminal()
        phases = Phases("step", stream=stream, progress_after=0.0)
        with self.assertRaises(RuntimeError):
            with phases("trace"):
                raise RuntimeError("trace failed")
        time.sleep(0.05)  # (a timer left running would have had time to print)
        phases.finish()  # (not called by a failed compile; if it were, it would say nothing more)
        self.assertRegex(stream.getvalue(), r"^aotgrad: compiling step — trace \(\d+\.\d s\)\n$")
        self.assertFalse(phases.progress.timer.is_alive())
