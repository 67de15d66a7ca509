"""Partition: split the joint graph into a forward and a backward graph.

In: a functional joint graph and the number of forward outputs. Out:
`fw(*primals) -> (*fw_outputs, *saved)` and `bw(*saved, *tangents) -> (*grads)`;
the partitioners differ only in what they save and what they recompute.
cost.py prices both (bytes saved, work recomputed); min_cut.py trades them under a memory
budget, after repeated.py merges the forward's repeated computations; optimal.py finds the exact optimum on small graphs (to score min-cut); peak.py
simulates a backward's peak memory; inspection.py's `report(fw_gm, bw_gm)` lists what a
partition saves and recomputes.
"""
from aotgrad.partition.default import default_partition
from aotgrad.partition.inspection import report
from aotgrad.partition.min_cut import MemoryBudgetError, min_cut_rematerialization_partition, tradeoff_hull

__all__ = ["MemoryBudgetError", "default_partition", "min_cut_rematerialization_partition", "report",
           "tradeoff_hull"]
