"""The monitor's state as data: what it keeps, in the form it is persisted (format version 1).

Keys are strings so the state is plain JSON: a stats key is ``"tool|option|context"``, an
outcome key ``"shape|placement"`` where a shape is comma-joined sorted tool names and a
placement comma-joined sorted ``tool=option`` pairs.

>>> stats_key("ocr", "cpu", "gpu0-cpu0-low-idle")
'ocr|cpu|gpu0-cpu0-low-idle'
>>> placement_key([("b", "cpu"), ("a", "gpu_now")])
'a=gpu_now,b=cpu'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched.monitor.stats import RunningStat
from langgraph_devsched.options import DeviceOption

FORMAT_NAME: Final = "langgraph_devsched.monitor"
FORMAT_VERSION: Final = 1


def stats_key(tool: str, option: str, context: str) -> str:
    return f"{tool}|{option}|{context}"


def shape_key(tools: Iterable[str]) -> str:
    return ",".join(sorted(tools))


def placement_key(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f"{t}={o}" for t, o in sorted(pairs))


def parse_placement(key: str) -> tuple[tuple[str, DeviceOption], ...]:
    pairs = []
    for item in key.split(","):
        tool, _, option = item.rpartition("=")
        pairs.append((tool, cast(DeviceOption, option)))
    return tuple(pairs)


class KeyStats(BaseModel):
    """Samples of one (tool, option, context)."""

    model_config = ConfigDict(extra="forbid")

    run: RunningStat = Field(default_factory=RunningStat)
    latency: RunningStat = Field(default_factory=RunningStat)
    device: Literal["gpu", "cpu"] = "gpu"
    fallbacks: int = 0


class OutcomeStats(BaseModel):
    """Makespans of one executed placement of one batch shape."""

    model_config = ConfigDict(extra="forbid")

    makespan: RunningStat = Field(default_factory=RunningStat)
    probes: int = 0
    runs: list[RunningStat] = Field(
        default_factory=list, description="run time of each call, in sorted placement order"
    )
    ends: list[RunningStat] = Field(
        default_factory=list, description="latency (wait included) of each call, same order"
    )


class ToolFacts(BaseModel):
    """What the batches declared about a tool (hints), kept to phrase hints and priors."""

    model_config = ConfigDict(extra="forbid")

    gpu_allowed: bool = True
    cpu_allowed: bool = True
    declared_cpu_ms: float | None = None
    declared_gpu_ms: float | None = None


class LastCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    option: DeviceOption
    device: Literal["gpu", "cpu"]
    context: str
    run_ms: float
    wait_ms: float = 0.0


class LastStep(BaseModel):
    """The latest step of one shape: the situation the hints refer to."""

    model_config = ConfigDict(extra="forbid")

    shape: str
    placement: str
    bg: str
    calls: list[LastCall]
    makespan_ms: float


class MonitorState(BaseModel):
    """Everything the monitor keeps; persisted as JSON, loaded with validation."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["langgraph_devsched.monitor"] = FORMAT_NAME
    version: Literal[1] = FORMAT_VERSION
    step: int = 0
    stats: dict[str, KeyStats] = Field(default_factory=dict)
    vram_seen_mb: dict[str, float] = Field(default_factory=dict)
    outcomes: dict[str, OutcomeStats] = Field(default_factory=dict)
    probes_used: dict[str, int] = Field(default_factory=dict)
    tools: dict[str, ToolFacts] = Field(default_factory=dict)
    last: dict[str, LastStep] = Field(default_factory=dict, description="latest step per shape")
    last_shape: str | None = None
    resets: int = Field(default=0, description="estimates restarted by the outlier rule (drift)")
    last_reset_step: int = -1
