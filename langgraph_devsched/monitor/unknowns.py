"""Exploration hints: short statements of what is not yet known or has changed.

A hint *informs*: it names a tool (or a pair), the device or option it concerns, the load
context, what is missing, and an optimistic expected gain from measuring it. It never names a
mapping to adopt, never carries call ids, and its text states a fact, never an order.

>>> h = ExplorationHint.make("symmetric", ("ocr",), devices=("cpu",), context="gpu2-cpu0-low-idle",
...     expected_gain_ms=40.0, probes_left=2, detail="measured on the GPU there")
>>> print(h.text)  # doctest: +NORMALIZE_WHITESPACE
`ocr` has never run on the CPU while 2 other calls were on the GPU
(measured on the GPU there; up to 40 ms to gain)
>>> sorted(h.model_dump())[:3]
['context', 'devices', 'expected_gain_ms']
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched.monitor.context import LoadContext
from langgraph_devsched.options import DeviceOption

HintKind = Literal[
    "unknown", "symmetric", "sparse", "swap", "shared", "queued", "noisy", "stale"
]
"""``unknown``: never measured on a device; ``symmetric``: measured on one device but missing
or stale on the other under the same context; ``sparse``: measured there too few times to
trust a close comparison under noise; ``swap``: a GPU/CPU pair of one batch never ran
exchanged; ``shared``: waited for the GPU and never ran on it beside another call (its
contention is unknown); ``queued``: slowed down beside other GPU calls and never run in the GPU
queue in this batch shape; ``noisy``: spread too large to trust the mean; ``stale``: not measured
for long."""

DeviceClass = Literal["gpu", "cpu"]


def _device_name(device: str) -> str:
    return "the GPU" if device == "gpu" else "the CPU"


class ExplorationHint(BaseModel):
    """One structured hint; ``text`` is its one-line form."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: HintKind
    tools: tuple[str, ...] = Field(min_length=1, max_length=2)
    devices: tuple[DeviceClass, ...] = Field(
        default=(), description="the device each tool would be measured on (the unknown side)"
    )
    option: DeviceOption | None = Field(default=None, description="the option concerned, if one")
    context: str | None = Field(default=None, description="load context key, see LoadContext")
    expected_gain_ms: float = Field(
        default=0.0, ge=0, description="optimistic latency the measurement could save per step"
    )
    probes_left: int = Field(default=0, ge=0, description="probes left in this shape's budget")
    text: str = ""

    @classmethod
    def make(
        cls,
        kind: HintKind,
        tools: tuple[str, ...],
        *,
        devices: tuple[DeviceClass, ...] = (),
        option: DeviceOption | None = None,
        context: str | None = None,
        expected_gain_ms: float = 0.0,
        probes_left: int = 0,
        detail: str = "",
    ) -> ExplorationHint:
        """Build a hint and its text from the machine form."""
        hint = cls(
            kind=kind, tools=tools, devices=devices, option=option, context=context,
            expected_gain_ms=max(0.0, expected_gain_ms), probes_left=probes_left,
        )
        return hint.model_copy(update={"text": hint.describe(detail)})

    def describe(self, detail: str = "") -> str:
        where = LoadContext.parse(self.context).describe() if self.context else ""
        names = " and ".join(f"`{t}`" for t in self.tools)
        gain = f"up to {self.expected_gain_ms:.0f} ms to gain"
        if self.kind == "swap":
            a, b = self.tools
            da, db = (_device_name(d) for d in self.devices)
            body = f"`{a}` on {da} with `{b}` on {db} has never been measured {where}"
        elif self.kind == "unknown":
            body = f"{names} has never run on {_device_name(self.devices[0])}"
        elif self.kind == "shared":
            body = f"{names} has never run on the GPU beside another call"
        elif self.kind == "sparse":
            body = f"{names} on {_device_name(self.devices[0])} {where} is barely measured"
        elif self.kind == "queued":
            body = f"{names} has never run in the GPU queue in this batch"
        elif self.kind == "symmetric":
            body = f"{names} has never run on {_device_name(self.devices[0])} {where}"
        elif self.kind == "stale":
            body = f"{names} on {self.option} {where}: last measured long ago"
        else:
            body = f"{names} on {self.option} {where}: too noisy to trust the mean"
        extra = f"{detail}; {gain}" if detail else gain
        return f"{body.rstrip()} ({extra})"
