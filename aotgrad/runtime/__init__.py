"""Run: compiled forward/backward graphs behind one autograd.Function, plus epilogue steps.

In: compiled graphs and the facts from analysis/joint. Out: a callable taking the
flat real inputs and returning the flat user outputs, with eager's semantics for
gradients, input mutations and output aliasing. Each part is a section of steps (lower.py):
the call (call.py), the Function's forward (forward.py) and backward (backward.py), the
epilogue (epilogue.py).
"""
from aotgrad.runtime.call import CompiledCall, inference_call, training_call
from aotgrad.runtime.epilogue import Epilogue
from aotgrad.runtime.function import CompiledFunction, RuntimePlan

__all__ = ["CompiledCall", "CompiledFunction", "Epilogue", "RuntimePlan", "inference_call", "training_call"]
