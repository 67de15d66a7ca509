"""Run: compiled forward/backward graphs behind one autograd.Function, plus epilogue steps.

In: compiled graphs and the facts from analysis/joint. Out: a callable taking the
flat real inputs and returning the flat user outputs, with eager's semantics for
gradients, input mutations and output aliasing.
"""
from aotgrad.runtime.epilogue import Epilogue
from aotgrad.runtime.function import CompiledFunction, InferenceRuntime, RuntimePlan, TrainingRuntime

__all__ = ["CompiledFunction", "Epilogue", "InferenceRuntime", "RuntimePlan", "TrainingRuntime"]
