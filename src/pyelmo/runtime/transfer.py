"""Copies between the host and a GPU that do not wait more than they must: a batch's inputs go from pinned
(page-locked) memory without blocking, its outputs come back into pinned memory (a direct DMA, no staging
copy) and the host waits for that copy alone. On the CPU both are no-ops."""

from __future__ import annotations

import torch


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` (on the host) on ``device``: from pinned memory, without blocking, on a CUDA device."""
    if device.type != "cuda":
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)


def to_host(x: torch.Tensor) -> torch.Tensor:
    """``x`` on the host, its values ready: through pinned memory from a CUDA device."""
    if x.device.type != "cuda":
        return x.cpu()
    host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
    host.copy_(x, non_blocking=True)
    done = torch.cuda.Event()
    done.record()
    done.synchronize()  # this copy, not the whole device
    return host
