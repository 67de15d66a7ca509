"""Observe: what a compile tells the people watching it, for the stages to call.

counting.py's `counters` (aotgrad.counters), logs.py's level of the `aotgrad` loggers
(config.log_level), phases.py's timing of each compile phase and its `CompileRecord` handed to
watchers, printing.py's graphs for people (each node with its source line and, in a backward,
the forward op it came from), and torch_logs.py's graphs in PyTorch's own TORCH_LOGS and
TORCH_TRACE. The stages import these modules; these import no stage and nothing in tooling/.
"""
