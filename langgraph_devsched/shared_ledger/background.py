"""A GPU ledger's background that follows NVML's live reading of other processes' memory.

Without a shared ledger a process knows nothing of what strangers on its GPU admit. NVML
lists every process that holds memory on the GPU: the sum of the others' (not this process,
nor a process that already holds its part in the shared ledger: ``exclude``) becomes the
ledger's background (`VramLedger.set_background`), so admission leaves their memory alone.

Where NVML cannot say (no package, no driver, memory it cannot attribute, or a container
whose pids NVML does not know: this process absent from its list while others are there),
`NvmlBackground.others_mb` answers None with ``reason`` and the background stays as it was.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from langgraph_devsched.telemetry import nvml_reading, nvml_target


class NvmlBackground:
    """What other processes hold on ``cuda:<cuda_index>``, as NVML reads it now."""

    def __init__(self, cuda_index: int, *,
                 exclude: Callable[[], frozenset[int]] | None = None) -> None:
        self.cuda_index = cuda_index
        self._exclude = exclude
        self.reason: str | None = None
        """Why the last reading gave no figure, or None."""

    def others_mb(self) -> float | None:
        """The MB every other process holds (None: NVML cannot tell; see ``reason``)."""
        reading = nvml_reading(nvml_target(self.cuda_index))
        if not reading.ok:
            self.reason = reading.reason
            return None
        me = os.getpid()
        skip = self._exclude() if self._exclude is not None else frozenset()
        others = [p for p in reading.processes if p.pid != me and p.pid not in skip]
        if any(p.used_mb is None for p in others):
            self.reason = "NVML cannot attribute some processes' memory"
            return None
        if others and all(p.pid != me for p in reading.processes) and _holds_cuda_memory():
            self.reason = ("this process is not in NVML's list (another pid namespace?): "
                           "its own memory would count as a stranger's")
            return None
        self.reason = None
        return float(sum(p.used_mb or 0.0 for p in others))


def _holds_cuda_memory() -> bool:
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.memory_reserved() > 0)
    except Exception:
        return False
