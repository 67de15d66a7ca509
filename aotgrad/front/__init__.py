"""Front: what the entry points (api.py) hand a call to.

functions.py's AotFunction keys each call (keys.py), finds or compiles its entry through the
pipeline and runs it; AotModule is aot_module's. synthetic_base.py compiles inputs that share
memory with one of them written over one base; simplified.py takes a torch.compile graph
(Dynamo's fakes, its static inputs, the disk cache's key); export.py gives the joint graph
itself (aot_export_joint).
"""
