"""One VRAM budget per GPU across every process of the machine (``LocalBackend(shared=...)``).

`SharedVramLedger` is the in-process `VramLedger` whose every step is also a transaction of
an embedded store (`LedgerStore`: SQLite in WAL mode, ``BEGIN IMMEDIATE``); holders are
processes named by pid and start time (`ProcessId`), reclaimed when they die.
"""

from langgraph_devsched.shared_ledger.ledger import SharedVramLedger
from langgraph_devsched.shared_ledger.procs import ProcessId
from langgraph_devsched.shared_ledger.store import (
    BudgetMismatchError,
    LedgerStore,
    Reclaimed,
    StoreSnapshot,
)

__all__ = [
    "BudgetMismatchError",
    "LedgerStore",
    "ProcessId",
    "Reclaimed",
    "SharedVramLedger",
    "StoreSnapshot",
    "gpu_key",
]


def gpu_key(cuda_index: int) -> str:
    """The store's name for ``cuda:<cuda_index>``: the physical GPU NVML would read
    (``CUDA_VISIBLE_DEVICES`` mapped, `telemetry.nvml_target`), so that processes that see
    the GPUs in another order still share one budget per GPU.

    >>> gpu_key(0).startswith("gpu")
    True
    """
    from langgraph_devsched.telemetry import nvml_target

    return f"gpu{nvml_target(cuda_index)}"
