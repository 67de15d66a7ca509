"""Logs and progress: config.log_level / AOTGRAD_LOG drive the `aotgrad` loggers; long compiles
on a terminal say which phase they are in."""
import importlib.metadata
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
from aotgrad import config
from aotgrad.observe import logs
from aotgrad.observe.phases import Phases

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
        self.assertTrue(any(m.startswith("aotgrad: compiled forward (backward at its first call) of ") for m in messages), messages)

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

    def test_every_level_the_knob_takes_has_a_logging_level(self):
        """config.py says which names log_level takes, logs.py what each means: the same names."""
        self.assertEqual(set(logs.LEVELS), set(config._LOG_LEVELS))
        for name in config._LOG_LEVELS:
            config.log_level = name.upper()
            logs.apply_log_level()
            self.assertEqual(logging.getLogger("aotgrad").getEffectiveLevel() if name != "warning" else
                             logs._applied_level, logs.LEVELS[name])


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
        self.assertRegex(self.messages()[0], rf"^aotgrad: compiled forward \(backward at its first call\) of _sine at {re.escape(where)} "
                                             r"in \d+\.\d ms \(trace \d+\.\d, functionalize \d+\.\d, partition "
                                             r"\d+\.\d, compile \d+\.\d\)$")

    def test_a_compile_without_backward_says_inference_graph(self):
        config.log_level = "info"
        with torch.no_grad():
            aotgrad.aot_function(_sine, aotgrad.nop)(torch.randn(3, requires_grad=True))
        self.assertEqual(len(self.messages()), 1, self.messages())
        self.assertRegex(self.messages()[0], r"^aotgrad: compiled inference graph of _sine at \S+test_logs.py:\d+ in ")

    def test_a_backward_compiled_later_for_missing_grads_gets_its_own_line(self):
        config.log_level = "info"
        x = torch.randn(4, 3)
        w = torch.randn(3, 2, requires_grad=True)
        loss, _ = aotgrad.aot_function(_two_outputs, aotgrad.nop)(x, w)
        loss.backward()  # no grad for the second output: a backward without tangents_2 is compiled
        self.assertEqual(len(self.messages()), 2, self.messages())
        self.assertRegex(self.messages()[1], r"^aotgrad: compiled backward without tangents_2 of _two_outputs at "
                                             r"\S+test_logs.py:\d+ in \d+\.\d ms$")

    def test_a_module_is_located_by_its_forward(self):
        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * 2

        config.log_level = "info"
        aotgrad.aot_module(Scale(), aotgrad.nop)(torch.randn(3, requires_grad=True))
        where = f"{Scale.forward.__code__.co_filename}:{Scale.forward.__code__.co_firstlineno}"
        self.assertEqual(len(self.messages()), 1, self.messages())
        self.assertIn(f" of Scale.forward at {where} in ", self.messages()[0])

    def test_a_compile_after_dynamos_names_dynamos_frame_too(self):
        config.log_level = "info"
        torch._dynamo.reset()
        base, w = torch.randn(5), torch.randn(4, requires_grad=True)
        compiled = torch.compile(lambda x, w: (x * w).sum(), backend="aotgrad")
        compiled(base[1:], w)
        compiled(base[:-1], w)  # aotgrad compiles again, at run time (Dynamo does not guard offsets)
        self.assertEqual(len(self.messages()), 2, self.messages())
        for message in self.messages():
            self.assertRegex(message, r" of <lambda> at \S+test_logs.py:\d+ \(torch.compile frame 0/0\) in ")

    def test_under_torch_compile_a_module_is_named_by_its_class_and_forward(self):
        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * 2

        config.log_level = "info"
        torch._dynamo.reset()
        torch.compile(Scale(), backend="aotgrad")(torch.randn(3, requires_grad=True))
        where = f"{Scale.forward.__code__.co_filename}:{Scale.forward.__code__.co_firstlineno}"
        self.assertIn(f" of Scale.forward at {where} (torch.compile frame 0/0) in ", self.messages()[-1])


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


def _run_script(directory: str, name: str, source: str, **environment: str) -> tuple[str, subprocess.CompletedProcess]:
    """Write `source` to `directory`/`name` and run it in a new process with `environment` added
    (and aotgrad's disk cache off); the script's path and the finished process."""
    script = os.path.join(directory, name)
    with open(script, "w") as f:
        f.write(source)
    env = {**os.environ, "AOTGRAD_CACHE_DIR": "", **environment}
    return script, subprocess.run([sys.executable, script], env=env, capture_output=True, text=True, timeout=300)


# The scripts below name backend="aotgrad" without importing aotgrad, as users of the installed
# package do: torch.compile finds it through the package's torch_dynamo_backends entry point.
_needs_entry_point = unittest.skipUnless(
    any(ep.name == "aotgrad" for ep in importlib.metadata.entry_points(group="torch_dynamo_backends")),
    "aotgrad is not installed (only on the path), so its torch_dynamo_backends entry point is missing")


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
        self.assertRegex(done.stderr, r"aotgrad: compiled forward \(backward at its first call\) of <lambda> in \d+\.\d ms \(trace ")


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
    @_needs_entry_point
    def test_AOTGRAD_LOG_info_gives_one_line_per_torch_compile_compile_naming_the_frame(self):
        with tempfile.TemporaryDirectory() as directory:
            script, done = _run_script(directory, "two_compiles.py", _TWO_COMPILES, AOTGRAD_LOG="info")
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = [line for line in done.stderr.splitlines() if line.startswith("aotgrad")]
        self.assertEqual(len(lines), 3, done.stderr)
        where = re.escape(f"{script}:5")
        self.assertRegex(lines[0], rf"^aotgrad: compiled forward \(backward at its first call\) of step at {where} "
                                   r"\(torch.compile frame 0/0\) in \d+\.\d ms \(")
        self.assertRegex(lines[1], rf"^aotgrad: compiled backward \(at its first call\) of step at {where} "
                                   r"\(torch.compile frame 0/0\) in \d+\.\d ms$")
        self.assertRegex(lines[2], rf"^aotgrad: compiled inference graph of step at {where} \(torch.compile "
                                   r"frame 0/1\) in \d+\.\d ms \(")


# -- PyTorch's logs: TORCH_LOGS artifacts and the TORCH_TRACE trace -----------------------------

from torch._logging._internal import trace_log  # noqa: E402  (PyTorch's structured trace)

from aotgrad.observe import torch_logs  # noqa: E402


def _step(x, w):
    return (x @ w).relu().sum()


def _two_outputs(x, w):
    y = (x @ w).relu()
    return y.sum(), y.exp()


class Trace(logging.Handler):
    """Collects (name, metadata, payload) of what torch._logging.trace_structured emits."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.events: list[tuple[str, dict, str]] = []

    def emit(self, record):
        metadata = record.metadata
        name = next(iter(metadata))
        if name == "artifact":
            name = metadata["artifact"]["name"]
        self.events.append((name, metadata, record.payload or ""))

    def payload(self, name: str) -> str:
        payloads = [payload for event, _, payload in self.events if event == name]
        assert len(payloads) == 1, (name, [event for event, _, _ in self.events])
        return payloads[0]


class TorchLogs(unittest.TestCase):
    """What TORCH_LOGS / torch._logging.set_logs and TORCH_TRACE show of aotgrad's graphs."""

    def setUp(self):
        torch._dynamo.reset()
        self.patch = config.patch(cache_dir=None)  # (a graph from the disk cache has no joint to show)
        self.patch.__enter__()
        self.x, self.w = torch.randn(4, 3), torch.randn(3, 2, requires_grad=True)
        self.trace_handlers = trace_log.handlers[:]

    def tearDown(self):
        trace_log.handlers[:] = self.trace_handlers
        torch._logging.set_logs()  # PyTorch's defaults again
        self.patch.__exit__(None, None, None)
        torch._dynamo.reset()

    def logs_of(self, fn, **artifacts) -> str:
        """What PyTorch's handlers print while `fn` is compiled and run with `artifacts` on."""
        stderr, sys.stderr = sys.stderr, io.StringIO()
        try:
            torch._logging.set_logs(**artifacts)  # (its handlers write to sys.stderr as it is now)
            fn()
            return sys.stderr.getvalue()
        finally:
            sys.stderr = stderr

    def train_step(self, fn=_step):
        out = torch.compile(fn, backend="aotgrad")(self.x, self.w)
        (out[0] if isinstance(out, tuple) else out).backward()

    def test_aot_graphs_prints_the_forward_and_backward_with_source_lines(self):
        text = self.logs_of(self.train_step, aot_graphs=True)
        where = f"{_step.__code__.co_filename}:{_step.__code__.co_firstlineno}"
        line = f"test_logs.py:{_step.__code__.co_firstlineno + 1}  return (x @ w).relu().sum()"
        self.assertIn(f"[__aot_graphs]  ===== aotgrad: Forward graph of _step at {where} (torch.compile frame 0/0)",
                      text)
        self.assertIn('[__aot_graphs] def forward(self, primals_1: "f32[4, 3]", primals_2: "f32[3, 2]"):', text)
        self.assertRegex(text, rf'\[__aot_graphs\]     mm: "f32\[4, 2\]" = aten.mm.default\(primals_1, primals_2\)  '
                               rf"# {re.escape(line)}\n")
        self.assertIn("[__aot_graphs]  ===== aotgrad: Backward graph of _step at ", text)
        self.assertRegex(text, rf"\[__aot_graphs\]     mm_1: .* # {re.escape(line)}  <- aten.mm.default\n")
        self.assertNotIn("Joint graph", text)

    def test_aot_joint_graph_prints_the_joint_graph_only(self):
        text = self.logs_of(self.train_step, aot_joint_graph=True)
        self.assertIn("[__aot_joint_graph]  ===== aotgrad: Joint graph of _step at ", text)
        self.assertIn('[__aot_joint_graph] def joint(self, primals_1: "f32[4, 3]", primals_2: "f32[3, 2]", '
                      'tangents_1: "f32[]"):', text)
        self.assertNotIn("[__aot_graphs]", text)

    def test_pytorchs_aot_log_shows_aotgrads_graphs_as_it_shows_aotautograds(self):
        text = self.logs_of(self.train_step, aot=logging.INFO)
        self.assertIn("[__aot_joint_graph]  ===== aotgrad: Joint graph of _step at ", text)
        self.assertIn("[__aot_graphs]  ===== aotgrad: Forward graph of _step at ", text)

    def test_a_graph_without_backward_is_the_inference_graph(self):
        def run():
            with torch.no_grad():
                torch.compile(_step, backend="aotgrad")(self.x, self.w)
        text = self.logs_of(run, aot_graphs=True)
        self.assertIn("[__aot_graphs]  ===== aotgrad: Inference graph of _step at ", text)
        self.assertIn("[__aot_graphs] def inference(self, ", text)
        self.assertNotIn("Backward graph", text)

    def test_a_backward_compiled_later_for_missing_grads_is_printed_naming_them(self):
        text = self.logs_of(lambda: self.train_step(_two_outputs), aot_graphs=True)
        self.assertIn("[__aot_graphs]  ===== aotgrad: Backward graph without tangents_2 of _two_outputs at ", text)

    def test_the_trace_has_the_graphs_under_pytorchs_names_with_source_lines(self):
        trace = Trace()
        trace_log.handlers[:] = [trace]  # as TORCH_TRACE would have it
        self.train_step(_two_outputs)
        line = f"test_logs.py:{_two_outputs.__code__.co_firstlineno + 1}  y = (x @ w).relu()"
        self.assertRegex(trace.payload("aot_joint_graph"), r"^def joint\(self, primals_1: .*tangents_2")
        self.assertRegex(trace.payload("aot_forward_graph"), rf"^def forward\(self, .*\n    mm: .*# {re.escape(line)}\n")
        self.assertRegex(trace.payload("aot_backward_graph"), r"^def backward\(self, .*tangents_1.*tangents_2")
        self.assertRegex(trace.payload("aot_backward_graph_without_tangents_2"), r"^def backward\(self, .*tangents_1")
        for name in ("aot_forward_graph", "aot_backward_graph_without_tangents_2"):  # (the latter compiled later)
            _, metadata, _ = next(event for event in trace.events if event[0] == name)
            self.assertEqual((metadata["frame_id"], metadata["frame_compile_id"]), (0, 0), name)

    def test_the_trace_has_the_inference_graph_under_its_name(self):
        trace = Trace()
        trace_log.handlers[:] = [trace]
        with torch.no_grad():
            torch.compile(_step, backend="aotgrad")(self.x, self.w)
        self.assertRegex(trace.payload("aot_inference_graph"), r"^def inference\(self, ")

    def test_recompiles_says_why_aotgrad_compiles_a_torch_compile_graph_again(self):
        base = torch.randn(5)
        compiled = torch.compile(lambda x, w: (x * w).sum(), backend="aotgrad")
        w = torch.randn(4, requires_grad=True)

        def run():
            compiled(base[1:], w).backward()
            compiled(base[:-1], w).backward()  # Dynamo's guards pass (it does not guard offsets); aotgrad's do not
        text = self.logs_of(run, recompiles=True)
        self.assertRegex(text, r"\[__recompiles\] Recompiling <lambda> at \S+test_logs.py:\d+ \(torch.compile frame 0/0\) "
                               r"in aotgrad, for inputs its compiled entries do not fit:\n")
        self.assertIn("[__recompiles]     - input 0 (L_x_): storage offset 1, now 0\n", text)
        self.assertEqual(text.count("Recompiling"), 1, text)

    def test_recompiles_names_each_change_of_an_aot_function_call(self):
        g = aotgrad.aot_function(_sine, aotgrad.nop)

        def run():
            g(torch.randn(3, requires_grad=True))
            with torch.no_grad():
                g(torch.randn(4, requires_grad=True))
        text = self.logs_of(run, recompiles=True)
        self.assertIn(f"Recompiling _sine at {_sine.__code__.co_filename}:{_sine.__code__.co_firstlineno} in aotgrad", text)
        self.assertIn("    - grad mode: on, now off\n", text)
        self.assertIn("    - input 0: sizes [3], now [4]\n", text)

    def test_nothing_is_printed_or_formatted_when_neither_log_nor_trace_is_on(self):
        trace_log.handlers[:] = []  # TORCH_TRACE unset (PyTorch's lazy handler gone, as after its first event)
        records = Records()
        for artifact in ("aot_graphs", "aot_joint_graph"):
            torch_logs.artifact_log(artifact).addHandler(records)
        formatted = []
        format_graph = torch_logs.format_graph
        torch_logs.format_graph = lambda *args, **kwargs: formatted.append(args) or format_graph(*args, **kwargs)
        try:
            self.train_step(_two_outputs)
        finally:
            torch_logs.format_graph = format_graph
            for artifact in ("aot_graphs", "aot_joint_graph"):
                torch_logs.artifact_log(artifact).removeHandler(records)
        self.assertEqual((records.records, formatted), ([], []))


_TRACED = """
import torch


def step(x, w):
    return (x @ w).relu().sum()


torch.compile(step, backend="aotgrad")(torch.randn(4, 3), torch.randn(3, 2, requires_grad=True)).backward()
"""


class TorchTrace(unittest.TestCase):
    @_needs_entry_point
    def test_TORCH_TRACE_writes_aotgrads_graphs_where_tlparse_reads_them(self):
        with tempfile.TemporaryDirectory() as directory:
            trace_dir = os.path.join(directory, "trace")
            _, done = _run_script(directory, "traced.py", _TRACED, TORCH_TRACE=trace_dir)
            self.assertEqual(done.returncode, 0, done.stderr)
            (log_file,) = os.listdir(trace_dir)
            with open(os.path.join(trace_dir, log_file)) as f:
                text = f.read()
        for name, head in (("aot_joint_graph", "def joint("), ("aot_forward_graph", "def forward("),
                           ("aot_backward_graph", "def backward(")):
            # a line of metadata (the name, the frame), then the payload, each line indented by a tab
            self.assertRegex(text, rf'aotgrad/observe/torch_logs.py:\d+\] {{"{name}": {{}}, "frame_id": 0, '
                                   rf'"frame_compile_id": 0, .*"has_payload": "[0-9a-f]+"}}\n\t{re.escape(head)}')
        self.assertRegex(text, r'\n\t    mm: "f32\[4, 2\]" = aten.mm.default\(primals_1, primals_2\)  # traced.py:6  ')


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
