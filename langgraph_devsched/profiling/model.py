"""The profile file format (pydantic): latency statistics per tool and device, and the class.

>>> stats = summarize([10.0, 12.0, 11.0, 30.0])
>>> stats.median_ms, stats.q25_ms, stats.q75_ms, stats.iqr_ms
(11.5, 10.75, 16.5, 5.75)
>>> stats.mad_ms
1.0
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ToolClass = Literal["gpu_preferred", "cpu_preferred", "device_neutral", "ambiguous", "unknown"]
"""The four classes of a tool measured on both devices, and ``unknown`` for one device only."""

TransferMethod = Literal["observed", "declared", "none"]
"""How ``transfer_ms`` was obtained: timed copies (`to_device`), the tool's hints, or nothing."""

PROFILE_SCHEMA_VERSION = 1


class LatencyStats(BaseModel):
    """Summary of repeated latencies, ms. Quartiles use linear interpolation (numpy's default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(ge=1)
    median_ms: float = Field(ge=0)
    q25_ms: float = Field(ge=0)
    q75_ms: float = Field(ge=0)
    iqr_ms: float = Field(ge=0, description="q75 - q25: the spread the classifier uses")
    mad_ms: float = Field(ge=0, description="median absolute deviation from the median")
    min_ms: float = Field(ge=0)
    max_ms: float = Field(ge=0)


def _quantile(ordered: Sequence[float], q: float) -> float:
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(samples_ms: Sequence[float]) -> LatencyStats:
    """Median, quartiles, IQR, MAD, min and max of at least one sample."""
    if not samples_ms:
        raise ValueError("summarize needs at least one latency sample")
    ordered = sorted(float(s) for s in samples_ms)
    median = statistics.median(ordered)
    q25, q75 = _quantile(ordered, 0.25), _quantile(ordered, 0.75)
    return LatencyStats(
        runs=len(ordered),
        median_ms=median,
        q25_ms=q25,
        q75_ms=q75,
        iqr_ms=q75 - q25,
        mad_ms=statistics.median(abs(s - median) for s in ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
    )


class DeviceRun(BaseModel):
    """One tool measured on one device."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field(description="'cpu' or 'cuda:N'")
    latency: LatencyStats = Field(description="whole call, transfers included")
    samples_ms: list[float] = Field(description="the measured runs, in order")
    transfer_ms: float = Field(default=0.0, ge=0, description="median host<->device copy time")
    transfer_mb: float = Field(default=0.0, ge=0, description="MB copied per call")
    transfer_method: TransferMethod = "none"
    peak_vram_mb: float | None = Field(
        default=None, description="peak CUDA memory above the pre-tool baseline (GPU only)"
    )
    cpu_threads: int = Field(ge=1, description="torch.set_num_threads during the runs")
    output_preview: str = Field(default="", description="first characters of the last output")
    cold_ms: float | None = Field(
        default=None, ge=0,
        description="the first call's latency (a cold start: it loads the tool's model)",
    )
    resident_mb: float | None = Field(
        default=None, ge=0,
        description="CUDA memory still allocated after the first call returned, above what "
        "was there before it (the weights it keeps resident; GPU only)",
    )

    @property
    def load_ms(self) -> float | None:
        """What the cold start cost on top of a warm call (the first call less the median)."""
        if self.cold_ms is None:
            return None
        return max(0.0, self.cold_ms - self.latency.median_ms)


class ToolProfile(BaseModel):
    """Everything measured about one tool, and its class."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    gpu_capable: bool = True
    declared_vram_mb: float = 0.0
    declared_gpu_share: float | None = Field(default=None, description="from the tool's hints")
    declared_model: str | None = Field(default=None, description="the tool's model hint")
    declared_weights_mb: float = Field(default=0.0, ge=0, description="its weights_mb hint")
    declared_idempotent: bool = Field(default=False, description="its idempotent hint (side "
                                      "effect free)")
    ran_once: bool = Field(default=False, description="called once in all (no warm-up, one "
                           "device): not declared side-effect free")
    runs: dict[str, DeviceRun] = Field(default_factory=dict, description="keyed 'cpu' / 'cuda'")
    skipped: dict[str, str] = Field(
        default_factory=dict, description="device kind -> why it was not measured"
    )
    tool_class: ToolClass = "unknown"
    reason: str = ""
    gpu_speedup: float | None = Field(default=None, description="cpu median / gpu median")

    @property
    def cpu(self) -> DeviceRun | None:
        return self.runs.get("cpu")

    @property
    def gpu(self) -> DeviceRun | None:
        return self.runs.get("cuda")


class Thresholds(BaseModel):
    """Classification thresholds (see docs/profiling.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    neutral_rel: float = Field(
        default=0.10, ge=0, description="medians within this fraction of the larger: neutral"
    )
    neutral_abs_ms: float = Field(
        default=0.05, ge=0, description="medians within this many ms: neutral (tiny tools)"
    )
    transfer_dominated: float = Field(
        default=0.5, ge=0, le=1, description="transfer share of GPU time that makes it dominate"
    )


class Profile(BaseModel):
    """A profile file: how it was measured and one `ToolProfile` per tool."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = PROFILE_SCHEMA_VERSION
    created: str = Field(description="ISO 8601 UTC time of the run")
    size: str | None = Field(default=None, description="suite size, when the built-in suite")
    repeats: int = Field(ge=1)
    warmup: int = Field(ge=0)
    cpu_threads: int = Field(ge=1)
    devices_requested: list[str]
    devices_measured: list[str]
    host: dict[str, str] = Field(default_factory=dict, description="torch, CUDA device, cores")
    notes: list[str] = Field(default_factory=list)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    tools: list[ToolProfile] = Field(default_factory=list)

    def tool(self, name: str) -> ToolProfile:
        for t in self.tools:
            if t.tool == name:
                return t
        known = ", ".join(t.tool for t in self.tools) or "(none)"
        raise KeyError(f"no tool {name!r} in this profile; known: {known}")

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
