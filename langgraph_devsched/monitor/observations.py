"""The monitor's typed, JSON-serialisable snapshot: what a scheduler may observe.

`Observations` holds per-tool latency estimates by option and load context (mean, spread,
count, freshness), what each tool was seen to reserve on the GPU, the outcomes of executed
placements per batch shape, the device state, and exploration hints. ``model_dump()`` gives
plain JSON data (what the agentic scheduler receives as tool outputs).

>>> obs = Observations(step=0)
>>> obs.estimate("ocr", "cpu") is None, obs.model_dump(mode="json")["hints"]
(True, [])
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched.monitor.unknowns import ExplorationHint
from langgraph_devsched.options import DeviceOption

EstimateStatus = Literal["measured", "noisy", "stale"]


class OptionEstimate(BaseModel):
    """Latency of one tool on one option under one load context."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    option: DeviceOption
    context: str = Field(description="LoadContext key, e.g. 'gpu1-cpu0-low-idle'")
    device: Literal["gpu", "cpu"] = Field(description="where the samples actually ran")
    run_ms: float = Field(description="mean time on the device (queue wait excluded)")
    latency_ms: float = Field(description="mean time from the step's start to the call's end")
    std_ms: float = 0.0
    count: int = 0
    outliers: int = 0
    fallbacks: int = Field(default=0, description="calls that fell back to the CPU (e.g. OOM)")
    steps_since: int = Field(default=0, description="monitor steps since the last sample")
    age_s: float | None = Field(default=None, description="clock seconds since the last sample")
    status: EstimateStatus = "measured"


class PlacementOutcome(BaseModel):
    """An executed placement of one batch shape and the makespans it gave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: tuple[str, ...]
    placement: tuple[tuple[str, DeviceOption], ...] = Field(
        description="(tool, option) pairs, sorted; what was executed, not advice"
    )
    makespan_ms: float
    warm_ms: float | None = Field(
        default=None, description="mean makespan of the runs that loaded no model (None: "
        "every run loaded one)")
    run_ms: tuple[float, ...] = Field(
        default=(), description="mean run time of each call, aligned with placement"
    )
    latency_ms: tuple[float, ...] = Field(
        default=(), description="mean latency (queue wait included) of each call, aligned"
    )
    std_ms: float = 0.0
    count: int = 0
    probes: int = Field(default=0, description="how many of the runs were probes")
    steps_since: int = 0


class DeviceSnapshot(BaseModel):
    """Telemetry at the last recorded step (`DeviceState` as data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_available: bool = False
    gpu_name: str = ""
    vram_budget_mb: float = 0.0
    vram_used_mb: float = 0.0
    gpu_utilization: float = 0.0
    cpu_cores: int = 1
    reason: str | None = None


class Observations(BaseModel):
    """Everything the monitor knows, as one snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(description="steps recorded so far")
    epoch: int = Field(default=0, description="estimates restarted so far (regime changes)")
    drift: bool = Field(default=False, description="an estimate restarted at the last step")
    device: DeviceSnapshot | None = None
    estimates: tuple[OptionEstimate, ...] = ()
    vram_seen_mb: dict[str, float] = Field(
        default_factory=dict, description="largest VRAM reservation seen per tool"
    )
    outcomes: tuple[PlacementOutcome, ...] = ()
    hints: tuple[ExplorationHint, ...] = ()
    load_seen_ms: dict[str, float] = Field(
        default_factory=dict,
        description="largest model load seen per 'tool|gpu' or 'tool|cpu' (cold starts)")

    def for_tool(self, tool: str) -> tuple[OptionEstimate, ...]:
        return tuple(e for e in self.estimates if e.tool == tool)

    def estimate(
        self, tool: str, option: DeviceOption, context: str | None = None
    ) -> OptionEstimate | None:
        """The estimate for (tool, option, context); any context when ``context`` is None
        (the best-sampled one)."""
        found = [
            e for e in self.estimates
            if e.tool == tool and e.option == option and (context is None or e.context == context)
        ]
        return max(found, key=lambda e: (e.count, e.context), default=None)

    def outcomes_for(self, shape: tuple[str, ...]) -> tuple[PlacementOutcome, ...]:
        return tuple(o for o in self.outcomes if o.shape == tuple(sorted(shape)))
