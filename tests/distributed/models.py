"""Models and a DDP stand-in shared by the DDP tests (test_splitting.py in one process,
gloo_workers.py in the spawned ranks). User-defined modules: Dynamo compiles nothing for a
bare nn.Sequential."""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

MiB = 1024 * 1024
LINEAR_BYTES = (512 * 512 + 512) * 4  # one Linear(512, 512): weight and bias


class Layers(nn.Module):
    def __init__(self, n: int, width: int = 512):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class Contexts(nn.Module):
    """Four layers; the middle two inside autocast, no_grad, or enable_grad within no_grad."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(4))

    def forward(self, x):
        x = torch.relu(self.layers[0](x))
        if self.kind == "autocast":
            with torch.autocast("cpu", torch.bfloat16):
                x = torch.relu(self.layers[1](x))
                x = torch.relu(self.layers[2](x))
        elif self.kind == "no_grad":
            with torch.no_grad():
                x = torch.relu(self.layers[1](x))
                x = torch.relu(self.layers[2](x))
        else:  # enable_grad inside no_grad
            with torch.no_grad():
                x = x * 2
                with torch.enable_grad():
                    x = torch.relu(self.layers[1](x))
                    x = torch.relu(self.layers[2](x))
        return torch.relu(self.layers[3](x.float()))


class GradModeRegions(Contexts):
    """Contexts' grad-mode regions, but layers 1 and 2 run inside the region and again after
    it: every parameter gets a gradient (DDP needs no find_unused_parameters), while each
    parameter's first use, where the bucket arithmetic counts it, lies inside the region."""

    def forward(self, x):
        x = torch.relu(self.layers[0](x))
        with torch.no_grad():
            y = x * 2
            with torch.enable_grad() if self.kind == "enable_grad" else contextlib.nullcontext():
                y = torch.relu(self.layers[1](y))
                y = torch.relu(self.layers[2](y))
        x = x + y
        x = torch.relu(self.layers[1](x))
        x = torch.relu(self.layers[2](x))
        return torch.relu(self.layers[3](x))


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(512, 512)
        self.block = Layers(2)
        self.last = nn.Linear(512, 512)

    def forward(self, x):
        x = torch.relu(self.first(x))
        x = checkpoint(self.block, x, use_reentrant=False)
        return self.last(x)


class NoParameters(nn.Module):
    """The seed's issue-90375 model, with fixed values instead of torch.randn."""

    def forward(self):
        return torch.arange(3.0) * torch.full((3,), 2.0)


class CallMethodForward(nn.Module):
    """The seed's model that calls `attention.forward(x, x, x)` directly."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.ModuleList([nn.LayerNorm(96), nn.MultiheadAttention(96, 4, batch_first=True)])
                                    for _ in range(2))

    def forward(self, x):
        b, f, t, h = x.shape
        for norm, attention in self.layers:
            x = norm(x.reshape(b * f, t, h))
            x, _ = attention.forward(x, x, x)
            x = x.reshape(b, f, t, h)
        return x


class FakeDDP(nn.Module):
    """A DDP stand-in: a `module`, DDP's cap attributes, and the DDP module marked active
    while its forward runs (as DistributedDataParallel does), without processes or collectives."""

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25):
        super().__init__()
        self.module = module
        self.bucket_bytes_cap = int(bucket_cap_mb * MiB)
        self.bucket_bytes_cap_default = False
        self.parameters_to_ignore = set()

    def forward(self, *inputs, **kwargs):
        previous = DDP._active_ddp_module
        DDP._active_ddp_module = self
        try:
            return self.module(*inputs, **kwargs)
        finally:
            DDP._active_ddp_module = previous
