"""Partition: split the joint graph into a forward and a backward graph.

In: a functional joint graph and the number of forward outputs. Out:
`fw(*primals) -> (*fw_outputs, *saved)` and `bw(*saved, *tangents) -> (*grads)`;
the partitioners differ only in what they save and what they recompute.
"""
from aotgrad.partition.default import default_partition
from aotgrad.partition.min_cut import min_cut_rematerialization_partition

__all__ = ["default_partition", "min_cut_rematerialization_partition"]
