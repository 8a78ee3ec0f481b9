"""Timed host->device copies: how the profiler observes a tool's transfer time.

Tools move their inputs with `to_device`. Outside `recording_transfers()` it is a plain
``tensor.to(device)``. Inside it (the profiler's measured runs) each copy to a CUDA device is
bracketed by ``torch.cuda.synchronize`` and timed with ``perf_counter``, so the time is the
copy alone, not queued kernels; the total lands in the active `TransferLog`.

>>> with recording_transfers() as log:
...     pass
>>> log.ms, log.bytes, log.copies
(0.0, 0, 0)
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class TransferLog:
    """Copies observed during one call."""

    ms: float = 0.0
    bytes: int = 0
    copies: int = 0


_LOG: contextvars.ContextVar[TransferLog | None] = contextvars.ContextVar(
    "devsched_transfer_log", default=None
)


@contextlib.contextmanager
def recording_transfers() -> Iterator[TransferLog]:
    """Collect the copies `to_device` makes in this context."""
    log = TransferLog()
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def to_device(tensor: Any, device: str) -> Any:
    """``tensor.to(device)``, timed when a `recording_transfers` block is active."""
    if device == "cpu" or str(tensor.device) == device:
        return tensor.to(device)
    log = _LOG.get()
    if log is None:
        return tensor.to(device)
    import torch

    torch.cuda.synchronize(device)
    start = time.perf_counter()
    moved = tensor.to(device)
    torch.cuda.synchronize(device)
    log.ms += (time.perf_counter() - start) * 1000.0
    log.bytes += tensor.element_size() * tensor.nelement()
    log.copies += 1
    return moved
