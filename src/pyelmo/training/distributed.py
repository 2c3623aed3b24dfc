"""Distributed setup for training: one process, or DistributedDataParallel under torchrun."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from pyelmo.errors import PyelmoError

@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    initialized_here: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            t = tensor.to(self.device)
            torch.distributed.all_reduce(t)
            return t.to(tensor.device)
        return tensor


def setup_distributed(device: str) -> Dist:
    """Join the torchrun process group if ``WORLD_SIZE`` > 1 (gloo on CPU, nccl on GPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise PyelmoError("train.device is 'cuda' but no CUDA device is available")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world <= 1:
        return Dist(device=dev)
    import torch.distributed as td

    here = False
    if not td.is_initialized():
        td.init_process_group(backend="nccl" if use_cuda else "gloo")
        here = True
    return Dist(td.get_rank(), td.get_world_size(), local_rank, dev, here)
