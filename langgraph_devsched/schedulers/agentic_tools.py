"""The agentic sub-agent's read-only observation tools, built from one step's batch and view.

Every tool returns a JSON string made from the `Batch` (call ids, tool names, declared hints)
and the `SchedulerView` (device state, the monitor's snapshot) only: a tool call's arguments
and outputs are never in either, so they can never reach the sub-agent's model.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, SchedulerView
>>> from langgraph_devsched.telemetry import DeviceState
>>> batch = Batch.of([("c1", "ocr", ToolDeviceSpec(vram_mb=900))])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 500, 0.0, 8))
>>> tools = {t.name: t for t in observation_tools(batch, view)}
>>> sorted(tools)
['device_state', 'exploration_hints', 'past_outcomes', 'step_calls', 'tool_estimates']
>>> tools["device_state"].invoke({})
'{"gpu_available": true, "gpu_name": "gpu", "vram_budget_mb": 8000.0, "vram_used_mb": 500.0, \
"vram_free_mb": 7500.0, "gpu_utilization": 0.0, "cpu_cores": 8, "reason": null}'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.schedulers.agentic_answer import HardConstraints
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState


def observations_data(observations: Any) -> dict[str, Any]:
    """The monitor's snapshot as plain JSON data: a pydantic model, a mapping, or nothing."""
    if observations is None:
        return {}
    dump = getattr(observations, "model_dump", None)
    if callable(dump):
        try:
            data = dump(mode="json")
        except TypeError:
            data = dump()
        return dict(data) if isinstance(data, Mapping) else {}
    return dict(observations) if isinstance(observations, Mapping) else {}


def _dumps(data: Any) -> str:
    return json.dumps(data, default=str)


def device_data(device: DeviceState) -> dict[str, Any]:
    """Telemetry as JSON data, with the free VRAM spelled out, and the resident models
    (when there are any: which model's weights are warm on which side)."""
    data: dict[str, Any] = {
        "gpu_available": device.gpu_available,
        "gpu_name": device.gpu_name,
        "vram_budget_mb": float(device.vram_budget_mb),
        "vram_used_mb": float(device.vram_used_mb),
        "vram_free_mb": float(device.vram_budget_mb - device.vram_used_mb),
        "gpu_utilization": float(device.gpu_utilization),
        "cpu_cores": device.cpu_cores,
        "reason": device.reason,
    }
    if device.resident:
        data["resident_models"] = [
            {"model": w.model, "side": w.side, "weights_mb": float(w.weights_mb),
             "in_use": w.in_use, "keep_warm": w.keep_warm}
            for w in device.resident
        ]
    return data


_RESIDENCY_FIELDS = ("model", "weights_mb", "load_ms", "keep_warm")


def _hints_data(spec: Any) -> dict[str, Any]:
    """Declared hints as JSON data; the resident-model fields only where a tool sets them."""
    data = spec.model_dump(mode="json", exclude={"cpu_impl", "gpu_impl"})
    for name in _RESIDENCY_FIELDS:
        if data.get(name) in (None, 0.0, False):
            data.pop(name, None)
    return data


def calls_data(
    batch: Batch, constraints: HardConstraints | None = None, device: DeviceState | None = None
) -> list[dict[str, Any]]:
    """The step's calls: id, tool, allowed options and declared hints, and for a call on a
    resident model whether it is warm on each side (``device``). No arguments."""
    rules = constraints or HardConstraints()
    out = []
    for call in batch.calls:
        spec = call.spec
        allowed = list(spec.allowed_options())
        pinned = spec.pinned or rules.pinned.get(call.tool)
        if pinned is not None:
            allowed = [pinned]
        elif call.tool in rules.cpu_forbidden:
            allowed = [o for o in allowed if o != "cpu"] or allowed
        row: dict[str, Any] = {
            "call_id": call.call_id,
            "tool": call.tool,
            "allowed_options": allowed,
            "hints": _hints_data(spec),
        }
        model = spec.model_name(call.tool)
        if model is not None and device is not None:
            row["model_warm"] = {"gpu": device.warm(model, "gpu"),
                                 "cpu": device.warm(model, "cpu")}
        out.append(row)
    return out


def observation_tools(
    batch: Batch, view: SchedulerView, constraints: HardConstraints | None = None
) -> list[BaseTool]:
    """The five read-only tools the sub-agent may call for this step."""
    obs = observations_data(view.observations)
    tools_here = sorted({c.tool for c in batch.calls})
    rules = constraints or HardConstraints()

    def step_calls() -> str:
        """The calls of this step: call_id, tool name, allowed options, declared hints
        (vram_mb, gpu_share, pinned, preferred, solo profile, resident model weights and load
        times), and whether a call's model is already warm on the GPU / CPU."""
        return _dumps(calls_data(batch, rules, view.device))

    def tool_estimates(tool: str) -> str:
        """Measured latency of one tool per option and load context (mean run_ms, std_ms,
        count, status), and the largest VRAM reservation seen for it."""
        known = sorted({*tools_here, *(e.get("tool") for e in obs.get("estimates", ()))})
        if tool not in known:
            return _dumps({"error": f"unknown tool {tool!r}; known tools: {', '.join(known)}"})
        rows = [e for e in obs.get("estimates", ()) if e.get("tool") == tool]
        return _dumps(
            {
                "tool": tool,
                "estimates": rows,
                "vram_seen_mb": (obs.get("vram_seen_mb") or {}).get(tool),
                "note": "no measurements yet" if not rows else None,
            }
        )

    def device_state() -> str:
        """GPU availability, VRAM budget/used/free in MB, GPU utilization, CPU cores, and
        the resident models (weights warm on each side)."""
        return _dumps(device_data(view.device))

    def exploration_hints() -> str:
        """What the monitor does not know yet (never-measured devices or pairs), with an
        optimistic gain in ms. Information, not orders."""
        return _dumps(list(obs.get("hints", ())))

    def past_outcomes() -> str:
        """Executed placements of this step's batch shape and the makespans they gave."""
        shape = list(batch.shape)
        rows = [o for o in obs.get("outcomes", ()) if list(o.get("shape", ())) == shape]
        return _dumps({"shape": shape, "outcomes": rows})

    return [
        StructuredTool.from_function(f)
        for f in (step_calls, tool_estimates, device_state, exploration_hints, past_outcomes)
    ]


OBSERVATION_TOOL_NAMES = (
    "step_calls",
    "tool_estimates",
    "device_state",
    "exploration_hints",
    "past_outcomes",
)
OPTIONS_TEXT = ", ".join(DEVICE_OPTIONS)
