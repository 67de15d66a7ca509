"""aotgrad's knobs: plain module attributes, read by the entry points only.

    import aotgrad
    aotgrad.config.partitioner = "min_cut"
"""
import os

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
# (created on first store; keep it private: entries are pickles), or None for no disk cache.
# Read on every compile. `aotgrad.disk_cache.clear()` empties it.
cache_dir = _default_cache_dir()
# Level of the `aotgrad` loggers: "warning", "info" or "debug"; AOTGRAD_LOG overrides.
log_level = os.environ.get("AOTGRAD_LOG", "warning")
# Lint every stage's graph and check aotgrad's invariants (slower; for debugging).
check_graphs = False
