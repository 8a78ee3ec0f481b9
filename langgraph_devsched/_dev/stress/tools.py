"""The stress harness's tools: small sync+async tools that inject call-level faults.

Every tool takes ``payload`` (the harness puts the call id there, so an answer can be matched
to its call) and ``fault`` (a `CallFault`, ``"block"`` for a cancellation step, or ``"none"``)
and answers ``"<tool>:<payload>@<device>"``. What each fault does is in `faults.CallFault`;
every injection that actually fires is counted in the toolbox's `Tally`.

>>> box = Toolbox()
>>> asr = box.tools()[0]
>>> asr.invoke({"payload": "c1", "fault": "none"})
'asr:c1@cpu'
"""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from langgraph_devsched._dev.stress.faults import Tally
from langgraph_devsched.device import current_device
from langgraph_devsched.testbed import ToolParams

TOOL_PARAMS: dict[str, ToolParams] = {
    "asr": ToolParams(cpu_ms=800, gpu_ms=60, transfer_ms=10, vram_mb=1500, gpu_share=0.6),
    "ocr": ToolParams(cpu_ms=300, gpu_ms=40, transfer_ms=5, vram_mb=3000, gpu_share=0.8),
    "embed": ToolParams(cpu_ms=50, gpu_ms=10, transfer_ms=30, vram_mb=500, gpu_share=0.3),
    "diffuse": ToolParams(cpu_ms=4000, gpu_ms=400, transfer_ms=20, vram_mb=6000),
    "classify": ToolParams(cpu_ms=20, gpu_ms=15, vram_mb=100, gpu_share=0.1),
    "rerank": ToolParams(cpu_ms=200, gpu_ms=25, vram_mb=2000, gpu_share=0.5),
    "detect": ToolParams(cpu_ms=600, gpu_ms=50, transfer_ms=8, vram_mb=2500, gpu_share=0.7),
}
"""Hidden testbed parameters (8,000 MB budget: a few big tools at once do not fit)."""

TOOL_HINTS: dict[str, dict[str, Any]] = {
    "asr": {"vram_mb": 1500, "gpu_share": 0.6},
    "ocr": {"vram_mb": 3000, "gpu_share": 0.8},
    "embed": {"vram_mb": 500, "gpu_share": 0.3, "preferred": "cpu"},
    "diffuse": {"vram_mb": 6000, "gpu_share": 1.0, "preferred": "gpu_queued"},
    "classify": {"gpu_capable": False},
    "rerank": {"vram_mb": 2000, "gpu_share": 0.5, "cpu_allowed": False},
    "detect": {"vram_mb": 2500, "gpu_share": 0.7, "pinned": "gpu_queued"},
}
"""Declared hints: every kind of constraint (CPU only, GPU only, pinned, preferred)."""

TOOL_NAMES: tuple[str, ...] = tuple(TOOL_PARAMS)
VRAM_BUDGET_MB = 8000.0
BLOCK_LIMIT_S = 5.0
"""A blocked call (cancellation step) gives up after this long if nobody cancels it."""


HANG_LIMIT_S = 5.0
"""A hanging call under the node's own call timeout gives up after this long at most."""


class HarnessTimeoutError(TimeoutError):
    """A hanging tool released by the harness's call timeout (the node has none of its own)."""


def oom_error() -> BaseException:
    """A ``torch.cuda.OutOfMemoryError`` (torch imported here, only when needed)."""
    try:
        import torch

        return torch.cuda.OutOfMemoryError("CUDA out of memory (injected by devsched stress)")
    except ImportError:  # pragma: no cover - torch is optional: a look-alike
        cls = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch.cuda"})
        return cls("CUDA out of memory (injected by devsched stress)")


def _slow_s(payload: str) -> float:
    return 0.001 + (zlib.crc32(payload.encode()) % 4) / 1000.0  # 1-4 ms, deterministic


class Toolbox:
    """Builds the harness's tools and counts the faults they inject."""

    def __init__(
        self, *, call_timeout_s: float = 0.02, tally: Tally | None = None,
        node_timeout: bool = False,
    ) -> None:
        if call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.call_timeout_s = call_timeout_s
        self.node_timeout = node_timeout
        """True: hanging calls wait for `release_hangs` (the node's call timeout answers
        them); False: the tool gives up by itself after ``call_timeout_s``."""
        self.hang_release = threading.Event()
        self.tally = tally or Tally()
        self.released: set[str] = set()
        """Payloads whose blocked call was already cancelled once: a retry runs normally."""
        self.block_started: asyncio.Event | None = None
        self.fired: dict[str, str] = {}
        """Payload -> the fault that actually fired in that call."""
        self.lock = threading.Lock()

    def tools(self, names: Mapping[str, object] | tuple[str, ...] = TOOL_NAMES) -> list[BaseTool]:
        return [self._tool(name) for name in names]

    # -- one tool --------------------------------------------------------------------------
    def _fire(self, payload: str, fault: str) -> None:
        self.tally.add(fault)
        with self.lock:
            self.fired[payload] = fault

    def _before(self, name: str, payload: str, fault: str) -> str:
        """Raise the fault that fires before any work; return the device string."""
        device = current_device()
        if fault == "tool_error":
            self._fire(payload, fault)
            raise ValueError(f"injected tool error in {name} ({payload})")
        if fault == "gpu_oom" and device != "cpu":
            self._fire(payload, fault)
            raise oom_error()
        return device

    def _hang_error(self, name: str) -> HarnessTimeoutError:
        return HarnessTimeoutError(
            f"tool {name} did not answer within {self.call_timeout_s:g} s "
            "(released by the stress harness's call timeout)"
        )

    def release_hangs(self) -> None:
        """Let the threads of hanging calls end (after their step was answered)."""
        with self.lock:
            self.hang_release.set()
            self.hang_release = threading.Event()

    def _blocked(self, payload: str) -> bool:
        with self.lock:
            return payload not in self.released

    def _tool(self, name: str) -> BaseTool:
        def run(payload: str, fault: str = "none") -> str:
            device = self._before(name, payload, fault)
            if fault == "slow":
                self._fire(payload, "slow")
                time.sleep(_slow_s(payload))
            elif fault == "hang":
                self._fire(payload, "hang")
                if self.node_timeout:
                    self.hang_release.wait(HANG_LIMIT_S)  # the node answers at its deadline
                    return f"{name}:{payload}@{device} (hang ended)"
                threading.Event().wait(self.call_timeout_s)
                raise self._hang_error(name)
            elif fault == "block" and self._blocked(payload):
                threading.Event().wait(BLOCK_LIMIT_S)  # the sync path is never cancelled
            return f"{name}:{payload}@{device}"

        async def arun(payload: str, fault: str = "none") -> str:
            device = self._before(name, payload, fault)
            if fault == "slow":
                self._fire(payload, "slow")
                await asyncio.sleep(_slow_s(payload))
            elif fault == "hang" and self.node_timeout:
                self._fire(payload, "hang")
                release = self.hang_release
                for _ in range(int(HANG_LIMIT_S / 0.005)):  # until cancelled by the node
                    if release.is_set():
                        break
                    await asyncio.sleep(0.005)
                return f"{name}:{payload}@{device} (hang ended)"
            elif fault == "hang":
                self._fire(payload, "hang")
                try:
                    await asyncio.wait_for(asyncio.Event().wait(), self.call_timeout_s)
                except asyncio.TimeoutError:
                    raise self._hang_error(name) from None
            elif fault == "block" and self._blocked(payload):
                if self.block_started is not None:
                    self.block_started.set()
                await asyncio.sleep(BLOCK_LIMIT_S)  # until the harness cancels the run
            return f"{name}:{payload}@{device}"

        return StructuredTool.from_function(
            func=run,
            coroutine=arun,
            name=name,
            description=f"Stress-test tool {name}: echoes its payload and the device it ran on.",
        )
