"""Load context: the conditions one call ran under, as a small hashable key.

A latency means little without the load beside it. The context of a call is

* ``gpu``: how many *other* calls were on the GPU while it ran (`CallRecord.gpu_peers` for a
  GPU call; for a CPU call, the GPU calls whose run overlapped it);
* ``cpu``: how many other calls ran on the CPU beside it (CPU core sharing);
* ``vram``: the VRAM pressure of the step, bucketed (``low`` < 50 % of the budget reserved
  at the peak, ``high`` >= 85 %, else ``mid``), background memory included;
* ``bg``: the background GPU load from telemetry (``idle`` < 10 % utilization, else ``busy``).

>>> ctx = LoadContext(gpu=2, cpu=0, vram="low", bg="idle")
>>> ctx.key
'gpu2-cpu0-low-idle'
>>> LoadContext.parse('gpu2-cpu0-low-idle') == ctx
True
>>> ctx.describe()
'while 2 other calls were on the GPU'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast, get_args

from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.telemetry import DeviceState

VramBucket = Literal["low", "mid", "high"]
BackgroundBucket = Literal["idle", "busy"]

VRAM_MID = 0.5
VRAM_HIGH = 0.85
BUSY_UTILIZATION = 0.1


@dataclass(frozen=True, order=True)
class LoadContext:
    """The load one call ran under; ``key`` is its stable string form."""

    gpu: int = 0
    cpu: int = 0
    vram: VramBucket = "low"
    bg: BackgroundBucket = "idle"

    @property
    def key(self) -> str:
        return f"gpu{self.gpu}-cpu{self.cpu}-{self.vram}-{self.bg}"

    @classmethod
    def parse(cls, key: str) -> LoadContext:
        """Inverse of `key`; `ValueError` on anything else."""
        parts = key.split("-")
        if (
            len(parts) != 4
            or not parts[0].startswith("gpu")
            or not parts[1].startswith("cpu")
            or parts[2] not in get_args(VramBucket)
            or parts[3] not in get_args(BackgroundBucket)
        ):
            raise ValueError(
                f"not a load context key: {key!r} (expected e.g. 'gpu1-cpu0-low-idle')"
            )
        return cls(
            gpu=int(parts[0][3:]),
            cpu=int(parts[1][3:]),
            vram=cast(VramBucket, parts[2]),
            bg=cast(BackgroundBucket, parts[3]),
        )

    def describe(self) -> str:
        """A short phrase for hint texts."""
        bits = []
        if self.gpu:
            verb = "was" if self.gpu == 1 else "were"
            bits.append(f"{self.gpu} other call{'s' * (self.gpu != 1)} {verb} on the GPU")
        if self.cpu:
            bits.append(f"{self.cpu} other call{'s' * (self.cpu != 1)} shared the CPU")
        if self.vram != "low":
            bits.append(f"VRAM pressure was {self.vram}")
        if self.bg != "idle":
            bits.append("a background load used the GPU")
        return "while " + " and ".join(bits) if bits else "alone"

    @property
    def solo(self) -> bool:
        """No other call beside it (VRAM and background may still differ)."""
        return self.gpu == 0 and self.cpu == 0


def vram_bucket(used_mb: float, budget_mb: float) -> VramBucket:
    """Bucket a VRAM use against the budget (``low`` when there is no budget)."""
    if budget_mb <= 0:
        return "low"
    frac = used_mb / budget_mb
    return "high" if frac >= VRAM_HIGH else "mid" if frac >= VRAM_MID else "low"


def background_bucket(state: DeviceState) -> BackgroundBucket:
    return "busy" if state.gpu_utilization >= BUSY_UTILIZATION else "idle"


def _overlap(a: CallRecord, b: CallRecord) -> bool:
    return a.start_ms < b.end_ms and b.start_ms < a.end_ms


def call_context(call: CallRecord, step: StepRecord, state: DeviceState) -> LoadContext:
    """The load context ``call`` ran under within ``step``."""
    others = [c for c in step.calls if c.call_id != call.call_id and _overlap(call, c)]
    gpu = call.gpu_peers if call.on_gpu else sum(1 for c in others if c.on_gpu)
    cpu = sum(1 for c in others if not c.on_gpu)
    pressure = state.vram_used_mb + step.vram_peak_mb
    return LoadContext(
        gpu=gpu,
        cpu=cpu,
        vram=vram_bucket(pressure, state.vram_budget_mb),
        bg=background_bucket(state),
    )


def planned_context(
    gpu_others: int, cpu_others: int, vram_mb: float, state: DeviceState
) -> LoadContext:
    """The context a call *would* run under, for looking estimates up before a step."""
    return LoadContext(
        gpu=gpu_others,
        cpu=cpu_others,
        vram=vram_bucket(state.vram_used_mb + vram_mb, state.vram_budget_mb),
        bg=background_bucket(state),
    )
