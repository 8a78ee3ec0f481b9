"""The monitor's state as data: what it keeps, in the form it is persisted (format version 1).

Keys are strings so the state is plain JSON (see `langgraph_devsched.monitor.keys`): a stats
key is ``"tool|option|context"``, an outcome key ``"shape|placement"`` where a shape is
comma-joined sorted tool names and a placement comma-joined sorted ``tool=option`` pairs, tool
names escaped. Validation parses every key, so a state that loads is one the monitor can use.
Numbers must be finite (no ``NaN`` or infinity), and counts, times and sizes non-negative
(`monitor.salvage` drops what breaks these rules on load). Each table's insertion order is
its recency (the monitor moves an entry to the end when it is updated and evicts from the
front; see `langgraph_devsched.monitor.bounds`).

>>> stats_key("ocr", "cpu", "gpu0-cpu0-low-idle")
'ocr|cpu|gpu0-cpu0-low-idle'
>>> placement_key([("b", "cpu"), ("a", "gpu_now")])
'a=gpu_now,b=cpu'
>>> MonitorState(stats={"bogus": KeyStats()})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for MonitorState
stats
  Value error, malformed stats key 'bogus' (expected 'tool|option|context') ...
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    field_validator,
    model_validator,
)

from langgraph_devsched.monitor.keys import (
    parse_context,
    parse_outcome_key,
    parse_placement,
    parse_probe_key,
    parse_shape,
    parse_stats_key,
    placement_key,
    shape_key,
    stats_key,
)
from langgraph_devsched.monitor.stats import RunningStat
from langgraph_devsched.options import DeviceOption

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "KeyStats",
    "LastCall",
    "LastStep",
    "MonitorState",
    "OutcomeStats",
    "ToolFacts",
    "parse_placement",
    "placement_key",
    "shape_key",
    "stats_key",
]

FORMAT_NAME: Final = "langgraph_devsched.monitor"
FORMAT_VERSION: Final = 1


class KeyStats(BaseModel):
    """Samples of one (tool, option, context)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run: RunningStat = Field(default_factory=RunningStat)
    latency: RunningStat = Field(default_factory=RunningStat)
    device: Literal["gpu", "cpu"] = "gpu"
    fallbacks: int = Field(default=0, ge=0)


class OutcomeStats(BaseModel):
    """Makespans of one executed placement of one batch shape."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    makespan: RunningStat = Field(default_factory=RunningStat)
    warm: RunningStat = Field(
        default_factory=RunningStat,
        description="makespans of the runs in which no call loaded a model's weights")
    probes: int = Field(default=0, ge=0)
    runs: list[RunningStat] = Field(
        default_factory=list, description="run time of each call, in sorted placement order"
    )
    ends: list[RunningStat] = Field(
        default_factory=list, description="latency (wait included) of each call, same order"
    )


class ToolFacts(BaseModel):
    """What the batches declared about a tool (hints), kept to phrase hints and priors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu_allowed: bool = True
    cpu_allowed: bool = True
    declared_cpu_ms: float | None = Field(default=None, ge=0)
    declared_gpu_ms: float | None = Field(default=None, ge=0)


class LastCall(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tool: str
    option: DeviceOption
    device: Literal["gpu", "cpu"]
    context: str
    run_ms: float = Field(ge=0)
    wait_ms: float = Field(default=0.0, ge=0)

    @field_validator("context")
    @classmethod
    def _context_parses(cls, value: str) -> str:
        return parse_context(value)


class LastStep(BaseModel):
    """The latest step of one shape: the situation the hints refer to."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    shape: str
    placement: str
    bg: str
    calls: list[LastCall]
    makespan_ms: float = Field(ge=0)

    @model_validator(mode="after")
    def _keys_parse(self) -> LastStep:
        shape = parse_shape(self.shape)
        placement = parse_placement(self.placement)
        if tuple(t for t, _ in placement) != shape:
            raise ValueError(f"placement {self.placement!r} is not of shape {self.shape!r}")
        if self.bg not in ("idle", "busy"):
            raise ValueError(f"unknown background bucket {self.bg!r} (expected idle or busy)")
        return self


class MonitorState(BaseModel):
    """Everything the monitor keeps; persisted as JSON, loaded with validation."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    format: Literal["langgraph_devsched.monitor"] = FORMAT_NAME
    version: Literal[1] = FORMAT_VERSION
    step: int = Field(default=0, ge=0)
    stats: dict[str, KeyStats] = Field(default_factory=dict)
    vram_seen_mb: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    load_seen_ms: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="largest model load seen per 'tool|gpu' or 'tool|cpu'")
    outcomes: dict[str, OutcomeStats] = Field(default_factory=dict)
    probes_used: dict[str, NonNegativeInt] = Field(default_factory=dict)
    tools: dict[str, ToolFacts] = Field(default_factory=dict)
    last: dict[str, LastStep] = Field(default_factory=dict, description="latest step per shape")
    last_shape: str | None = None
    resets: int = Field(
        default=0, ge=0, description="estimates restarted by the outlier rule (drift)")
    last_reset_step: int = Field(default=-1, ge=-1)

    @field_validator("stats")
    @classmethod
    def _stats_keys_parse(cls, value: dict[str, KeyStats]) -> dict[str, KeyStats]:
        for key in value:
            parse_stats_key(key)
        return value

    @field_validator("load_seen_ms")
    @classmethod
    def _load_keys_parse(cls, value: dict[str, float]) -> dict[str, float]:
        for key in value:
            if key.rpartition("|")[2] not in ("gpu", "cpu") or not key.rpartition("|")[0]:
                raise ValueError(f"malformed load key {key!r} (expected 'tool|gpu' or 'tool|cpu')")
        return value

    @field_validator("outcomes")
    @classmethod
    def _outcome_keys_parse(cls, value: dict[str, OutcomeStats]) -> dict[str, OutcomeStats]:
        for key in value:
            parse_outcome_key(key)
        return value

    @field_validator("probes_used")
    @classmethod
    def _probe_keys_parse(cls, value: dict[str, int]) -> dict[str, int]:
        for key in value:
            parse_probe_key(key)
        return value

    @field_validator("last")
    @classmethod
    def _last_keys_match(cls, value: dict[str, LastStep]) -> dict[str, LastStep]:
        for key, last in value.items():
            if key != last.shape:
                raise ValueError(f"last step of shape {last.shape!r} filed under {key!r}")
        return value

    @field_validator("last_shape")
    @classmethod
    def _last_shape_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_shape(value)
        return value
