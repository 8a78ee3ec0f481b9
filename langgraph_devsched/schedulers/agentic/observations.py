"""The agentic sub-agent's read-only observation tools, and the conversation they open.

Every tool returns compact JSON (no spaces, no nulls, no defaults) made from the `Batch`
(call ids, tool names, declared hints) and the `SchedulerView` (device state, the monitor's
snapshot) only: a tool call's arguments and outputs are never in either, so they can never
reach the sub-agent's model. `opening` calls every tool for the sub-agent: an assistant
message with the tool calls, then their `ToolMessage` outputs, so that one model turn can
answer. What changes least comes first (the device state, then the step's calls), so a
server's prompt cache keeps the longest prefix. No tool offers a mapping to adopt: executed
mappings are reported with what they measured, hints say what is unknown.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, SchedulerView
>>> from langgraph_devsched.telemetry import DeviceState
>>> batch = Batch.of([("c1", "ocr", ToolDeviceSpec(vram_mb=900))])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 500, 0.0, 8))
>>> tools = {t.name: t for t in observation_tools(batch, view)}
>>> sorted(tools)
['device_state', 'exploration_hints', 'past_outcomes', 'step_calls', 'tool_estimates']
>>> tools["step_calls"].invoke({})
'{"c1":{"tool":"ocr","vram_mb":900}}'
>>> tools["device_state"].invoke({})
'{"gpu":true,"vram_budget_mb":8000,"vram_free_mb":7500,"gpu_utilization":0.0,"cpu_cores":8}'
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.agentic.constraints import HardConstraints
from langgraph_devsched.schedulers.agentic.gpu_choice import all_values, call_gpus, expand, several
from langgraph_devsched.schedulers.agentic.guard import MEASURED_MARGIN, MeasuredVerdict
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState, GpuDevice

MAX_OUTCOMES = 3
MAX_HINTS = 2


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


def compact(data: Any) -> str:
    """``data`` as JSON without spaces and without null fields."""

    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(data), separators=(",", ":"), default=str)


def device_data(device: DeviceState) -> dict[str, Any]:
    """Telemetry as JSON data: free VRAM spelled out, and the resident models (which model's
    weights are warm on which side) when there are any. With several GPUs, ``gpus`` lists
    each (`gpu_data`) instead of the one GPU's fields, and ``resident_models`` only the
    host side (each GPU lists its own)."""
    data: dict[str, Any] = {"gpu": device.gpu_available}
    if several(device):
        data["gpus"] = [gpu_data(d) for d in device.devices]
        data["cpu_cores"] = device.cpu_cores
        if device.reason:
            data["reason"] = device.reason
        host = [w for w in device.resident if w.side != "gpu"]
        if host:
            data["resident_models"] = [_warm_data(w) for w in host]
        return data
    if device.gpu_available:
        data.update(
            vram_budget_mb=_round2(device.vram_budget_mb),
            vram_free_mb=_round2(device.vram_budget_mb - device.vram_used_mb),
            gpu_utilization=round(float(device.gpu_utilization), 1),
        )
    data["cpu_cores"] = device.cpu_cores
    if device.reason:
        data["reason"] = device.reason
    if device.resident:
        data["resident_models"] = [_warm_data(w) for w in device.resident]
    return data


def _warm_data(w: WarmModel) -> dict[str, Any]:
    return {"model": w.model, "side": w.side, "weights_mb": _round2(w.weights_mb),
            **({"in_use": True} if w.in_use else {})}


def gpu_data(gpu: GpuDevice) -> dict[str, Any]:
    """One GPU of several, compactly: its index (what an answer names, ``gpu_now@<index>``),
    VRAM budget and free (budget less what else holds it; its resident weights are listed
    apart, as with one GPU), other processes' utilization, the declared speed where not 1,
    and the models resident on it.

    >>> from langgraph_devsched.residency import WarmModel
    >>> data = gpu_data(GpuDevice(1, "L4", 24000, 1000, 0.2, (WarmModel("llm", 8000),), speed=2))
    >>> data["index"], data["vram_free_mb"], data["speed"], data["resident"]
    (1, 23000, 2, ['llm'])
    """
    data: dict[str, Any] = {
        "index": gpu.index, "vram_budget_mb": _round2(gpu.budget_mb),
        "vram_free_mb": _round2(gpu.budget_mb - gpu.used_mb),
        "gpu_utilization": round(float(gpu.utilization), 1),
    }
    if gpu.speed != 1.0:
        data["speed"] = gpu.speed
    resident = [w.model for w in gpu.resident if w.side == "gpu"]
    if resident:
        data["resident"] = resident
    return data


_DEFAULT_HINTS = {"gpu_capable": True, "cpu_allowed": True}


def _hints_data(spec: Any) -> dict[str, Any]:
    """Declared hints as JSON data, defaults and empty fields left out."""
    data = spec.model_dump(mode="json", exclude={"cpu_impl", "gpu_impl"})
    out: dict[str, Any] = {}
    for name, value in data.items():
        if value in (None, 0.0, False, {}, []) or _DEFAULT_HINTS.get(name) == value:
            continue
        if name == "gpu_share" and value == 1.0:
            continue
        if isinstance(value, Mapping):
            value = {k: v for k, v in value.items() if v not in (None, 0.0)}
        out[name] = value
    return out


def allowed_options(call: Any, rules: HardConstraints) -> list[str]:
    """What a call may be given: its hints' options, narrowed by the hard constraints."""
    spec = call.spec
    pinned = spec.pinned or rules.pinned.get(call.tool)
    if pinned is not None:
        return [pinned]
    allowed = list(spec.allowed_options())
    if call.tool in rules.cpu_forbidden:
        allowed = [o for o in allowed if o != "cpu"] or allowed
    return allowed


def answer_values(call: Any, rules: HardConstraints, device: DeviceState | None) -> list[str]:
    """What an answer may give a call: its `allowed_options`, and on a machine with several
    GPUs each GPU option once per GPU its ``gpus`` hint allows (``gpu_now@1``: `gpu_choice`)."""
    allowed = allowed_options(call, rules)
    if device is None or not several(device):
        return allowed
    return expand(allowed, call_gpus(call, device))


def calls_data(
    batch: Batch, constraints: HardConstraints | None = None, device: DeviceState | None = None,
    uses_next: Mapping[str, float] | None = None,
) -> dict[str, dict[str, Any]]:
    """The step's calls by id: the tool (where the id is not its name), the allowed options
    (where not all; with several GPUs, the per-GPU values of `answer_values`), the declared
    hints (``solo_ms``: the declared solo profile's GPU and CPU times), and for a call on a
    resident model where it is warm (``gpu``/``cpu``; with several GPUs ``cuda:<index>``)
    and, where it is warm on no GPU, the uses the policy's forecast expects of it over the
    coming steps (``uses_next``, from ``uses_next``: what would repay its GPU load).

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> b = Batch.of([("c1", "asr", ToolDeviceSpec(model="whisper", weights_mb=3000))])
    >>> calls_data(b, device=DeviceState(True, "gpu", 8000, 0, 0.0, 8),
    ...            uses_next={"whisper": 4.25})["c1"]["uses_next"]
    4.2
    """
    rules = constraints or HardConstraints()
    every = list(DEVICE_OPTIONS) if device is None or not several(device) else all_values(
        device)
    out = {}
    for call in batch.calls:
        row: dict[str, Any] = {} if names_tool(call.call_id, call.tool) else {"tool": call.tool}
        allowed = answer_values(call, rules, device)
        if allowed != every:
            row["allowed"] = allowed
        hints = {k: v for k, v in _hints_data(call.spec).items()
                 if k not in ("pinned", "profile", "timeout_s", "idempotent", "load_ms")}
        load = call.spec.load_ms
        if load is not None:  # the load times by side, as solo_ms (fewer tokens)
            side = {"gpu": load.gpu_ms, "cpu": load.cpu_ms}
            hints["load_ms"] = {k: _round2(v) for k, v in side.items() if v}
        profile = call.spec.profile
        if profile is not None:
            solo = {"gpu": profile.gpu_ms, "cpu": profile.cpu_ms}
            hints["solo_ms"] = {k: _round2(v) for k, v in solo.items() if v is not None}
        row.update({k: _round2(v) if isinstance(v, float) else v for k, v in hints.items()})
        model = call.spec.model_name(call.tool)
        if model is not None and device is not None and several(device):
            row["warm"] = [*(d.device for d in device.devices if d.warm(model)),
                           *(["cpu"] if device.warm(model, "cpu") else [])]
        elif model is not None and device is not None:
            row["warm"] = [s for s in ("gpu", "cpu") if device.warm(model, s)]
        if model is not None and device is not None and uses_next:
            coming = uses_next.get(model, 0.0)
            if coming > 0 and not any(d.warm(model) for d in device.devices):
                row["uses_next"] = round(coming, 1)
        out[call.call_id] = row
    return out


def names_tool(call_id: str, tool: str) -> bool:
    """Whether ``call_id`` says its tool: the tool's name, or ``<tool>#<i>`` (`call_labels`
    of a repeated tool); the observations then leave the tool out (fewer tokens).

    >>> names_tool("ocr", "ocr"), names_tool("ocr#3", "ocr"), names_tool("c1", "ocr")
    (True, True, False)
    """
    if call_id == tool:
        return True
    head, sep, tail = call_id.rpartition("#")
    return bool(sep) and head == tool and tail.isdigit()


def _round2(value: Any) -> float | int:
    """Two significant digits: small drifts of a running mean leave the text as it was, so
    a server's prompt cache keeps more of the prefix."""
    x = float(value or 0.0)
    if x == 0:
        return 0
    digits = 1 - math.floor(math.log10(abs(x)))
    r = round(x, digits)
    return int(r) if digits <= 0 or r == int(r) else r


def _count(n: int) -> int:
    """A sample count bucketed (1, 2, 3, 5, 10, 20, 50...): the text changes rarely."""
    for b in (1, 2, 3):
        if n <= b:
            return b
    cut = 5
    while cut * 2 <= n:
        cut = cut * 2 if str(cut)[0] in "15" else cut * 5 // 2
    return cut


def _context(key: Any) -> str:
    """A load context key shortened to the GPU and CPU peers (``gpu2-cpu0-low-idle`` ->
    ``g2c0``), plus ``busy`` under background GPU load."""
    parts = str(key or "").split("-")
    if len(parts) != 4:
        return str(key)
    short = f"g{parts[0][3:]}c{parts[1][3:]}"
    return short + ("b" if parts[3] == "busy" else "")


def estimates_data(
    obs: Mapping[str, Any], tools: Sequence[str], declared: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """Running averages of ``tools``: per tool and option ``[run_ms, n, context]`` under its
    most sampled load context (two significant digits, bucketed counts; ``noisy``/``stale``
    appended where so), and the largest VRAM reservation seen where it is not the
    ``declared`` one."""
    seen = obs.get("vram_seen_mb") or {}
    declared = declared or {}
    out: dict[str, Any] = {}
    for tool in tools:
        rows = [e for e in obs.get("estimates", ()) if e.get("tool") == tool]
        rows.sort(key=lambda e: (-int(e.get("count") or 0), str(e.get("context"))))
        entry: dict[str, Any] = {}
        for e in rows:
            option = str(e.get("option"))
            if option in entry:
                continue
            value: list[Any] = [_round2(e.get("run_ms")), _count(int(e.get("count") or 0)),
                                _context(e.get("context"))]
            if e.get("status") not in (None, "measured"):
                value.append(e.get("status"))
            entry[option] = value
        entry = {o: entry[o] for o in DEVICE_OPTIONS if o in entry}  # a stable order
        if seen.get(tool) and _round2(seen[tool]) != _round2(declared.get(tool, 0.0)):
            entry["vram_seen_mb"] = _round2(seen[tool])
        out[tool] = entry or "unmeasured"
    return out


def shape_outcomes(obs: Mapping[str, Any], batch: Batch) -> list[Mapping[str, Any]]:
    """The monitor's executed mappings of ``batch``'s shape (its sorted tool names), as it
    recorded them (every run in ``makespan_ms``)."""
    shape = sorted(batch.shape)
    return [o for o in obs.get("outcomes", ()) if sorted(o.get("shape", ())) == shape]


def outcomes_of(obs: Mapping[str, Any], batch: Batch) -> list[Mapping[str, Any]]:
    """`shape_outcomes`, each ``makespan_ms`` that of its runs that loaded no model where it
    has any (`warm_first`)."""
    return [warm_first(o) for o in shape_outcomes(obs, batch)]


def warm_first(outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    """``outcome`` with ``makespan_ms`` the mean of its runs that loaded no model
    (``warm_ms``) where there are such runs, else all of them (``cold`` then marks it).
    A mapping first run while its models loaded looked 4x slower than it is in the mean of
    every run, and the model never chose it again (`residency_cold_burst`, 1.21x); a mapping
    that loads on every run (it evicts what the next step needs) keeps its cold mean.

    >>> warm_first({"makespan_ms": 1550.0, "warm_ms": 590.0})["makespan_ms"]
    590.0
    >>> warm_first({"makespan_ms": 2509.0, "warm_ms": None})["cold"]
    True
    """
    warm = outcome.get("warm_ms")
    if warm is None:
        return {**outcome, "cold": True} if "warm_ms" in outcome else outcome
    return {**outcome, "makespan_ms": float(warm)}


def outcomes_data(obs: Mapping[str, Any], batch: Batch, *,
                  refuted: bool = False) -> list[dict[str, Any]]:
    """Executed mappings of this step's batch shape and what they measured, lowest makespan
    first, at most `MAX_OUTCOMES`: each the mean makespan, the count, and the options by
    call id (the answer's own form, so a whole measured mapping reads as one). ``refuted``:
    a mapping measured slower than the fastest by more than the guard's margin is marked
    so (`guard.MEASURED_MARGIN`: the guard vetoes it, a constraint like the VRAM budget).

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> b = Batch.of([("a", "ocr", ToolDeviceSpec())])
    >>> ran = {"outcomes": [
    ...     {"shape": ["ocr"], "placement": [["ocr", "cpu"]], "makespan_ms": 90.0, "count": 3},
    ...     {"shape": ["ocr"], "placement": [["ocr", "gpu_now"]], "makespan_ms": 120.0,
    ...      "count": 1}]}
    >>> outcomes_data(ran, b, refuted=True)[1]
    {'makespan_ms': 120, 'n': 1, 'options': {'a': 'gpu_now'}, 'refuted': True}
    """
    rows = outcomes_of(obs, batch)
    rows.sort(key=lambda o: float(o.get("makespan_ms") or 0.0))
    fastest = float(rows[0].get("makespan_ms") or 0.0) if rows else 0.0
    runs = []
    for o in rows[:MAX_OUTCOMES]:
        mapping = mapping_of(o.get("placement", ()), batch)
        if mapping is not None:
            run: dict[str, Any] = {"makespan_ms": _round2(o.get("makespan_ms")),
                                   "n": _count(int(o.get("count") or 0)), "options": mapping}
            if refuted and MeasuredVerdict(float(o.get("makespan_ms") or 0.0), fastest,
                                           MEASURED_MARGIN).rejected:
                run["refuted"] = True
            runs.append(run)
    return runs


def mapping_of(placement: Sequence[Any], batch: Batch) -> dict[str, str] | None:
    """An executed placement (sorted (tool, option) pairs) as options by call id; a tool's
    calls take its options in order. None if it does not fit the batch."""
    by_tool: dict[str, list[str]] = {}
    for pair in placement:
        tool, option = pair[0], pair[1]
        by_tool.setdefault(str(tool), []).append(str(option))
    out = {}
    for call in batch.calls:
        options = by_tool.get(call.tool)
        if not options:
            return None
        out[call.call_id] = options.pop(0)
    return out


def hint_text(hint: Mapping[str, Any]) -> str:
    """One exploration hint in a few words: what was never measured, and the optimistic gain
    of measuring it (``swap: ocr on cpu + asr on gpu unmeasured (g2c0), gain<=40ms``)."""
    tools = list(hint.get("tools") or ())
    devices = list(hint.get("devices") or ())
    where = " + ".join(
        f"{t} on {devices[i]}" if i < len(devices) else str(t) for i, t in enumerate(tools))
    if hint.get("option") and len(tools) == 1:
        where += f" as {hint['option']}"
    context = f" ({_context(hint['context'])})" if hint.get("context") else ""
    gain = _round2(hint.get("expected_gain_ms") or 0.0)
    return f"{hint.get('kind')}: {where} unmeasured{context}, gain<={gain}ms"


def hints_data(obs: Mapping[str, Any], tools: Sequence[str],
               explore_ms: float | None = None) -> list[str]:
    """The monitor's exploration hints about ``tools`` in a few words each (`hint_text`,
    largest expected gain first, at most `MAX_HINTS`), after what a probe may cost this
    step (``explore_ms``, `exploration.ExplorationLedger.left_ms`; None: no bound). With
    nothing to spend, no hint: an unmeasured mapping would be vetoed, not run.

    >>> hints_data({"hints": [{"kind": "side", "tools": ["ocr"], "devices": ["gpu"],
    ...                        "expected_gain_ms": 40}]}, ["ocr"], explore_ms=0.0)
    ['exploration budget 0 ms: an unmeasured mapping is not run']
    """
    if explore_ms is not None and explore_ms <= 0:
        return ["exploration budget 0 ms: an unmeasured mapping is not run"]
    here = set(tools)
    rows = [h for h in obs.get("hints", ()) if here & set(h.get("tools") or ())]
    rows.sort(key=lambda h: -float(h.get("expected_gain_ms") or 0.0))
    budget = [] if explore_ms is None else [f"exploration budget {_round2(explore_ms)} ms"]
    return budget + [hint_text(h) for h in rows[:MAX_HINTS]]


def observation_tools(
    batch: Batch, view: SchedulerView, constraints: HardConstraints | None = None,
    obs: Mapping[str, Any] | None = None, *, explore_ms: float | None = None,
    refuted: bool = False, uses_next: Mapping[str, float] | None = None,
) -> list[BaseTool]:
    """The five read-only tools the sub-agent may call for this step (`opening` calls them).
    ``obs``: the observations as data where the caller has them (with several GPUs, the
    scheduler's own executed mappings on their GPUs); default: ``view.observations``. The
    evidence the guard enforces is shown as facts: what a probe may cost (``explore_ms``)
    and the measured mappings it vetoes (``refuted``); a cold model's forecast uses
    (``uses_next``, `calls_data`)."""
    obs = observations_data(view.observations) if obs is None else obs
    tools_here = list(dict.fromkeys(c.tool for c in batch.calls))
    declared = {c.tool: c.spec.vram_mb for c in batch.calls}
    rules = constraints or HardConstraints()

    def step_calls() -> str:
        """The calls of this step: id, tool, allowed options and declared hints (vram_mb,
        gpu_share, solo profile, resident model), where a call's model is warm, and a cold
        model's forecast uses over the coming steps."""
        return compact(calls_data(batch, rules, view.device, uses_next))

    def tool_estimates(tool: str = "") -> str:
        """Measured run time per option and load context (run_ms, std_ms, n samples) of one
        tool, or of every tool of this step when ``tool`` is empty."""
        known = sorted({*tools_here, *(e.get("tool") for e in obs.get("estimates", ()))})
        if tool and tool not in known:
            return compact({"error": f"unknown tool {tool!r}; known tools: {', '.join(known)}"})
        return compact(estimates_data(obs, [tool] if tool else tools_here, declared))

    def device_state() -> str:
        """GPU availability, VRAM budget and free MB, GPU utilization, CPU cores, and the
        resident models (weights warm on each side)."""
        return compact(device_data(view.device))

    def past_outcomes() -> str:
        """Executed mappings of this step's calls and the makespans they measured."""
        return compact(outcomes_data(obs, batch, refuted=refuted))

    def exploration_hints() -> str:
        """What the monitor does not know yet (never-measured sides or pairs), with an
        optimistic gain in ms, after what a probe may cost this step. Information, not
        orders."""
        return compact(hints_data(obs, tools_here, explore_ms))

    return [
        StructuredTool.from_function(f)
        for f in (device_state, step_calls, tool_estimates, past_outcomes, exploration_hints)
    ]


OBSERVATION_TOOL_NAMES = (
    "device_state", "step_calls", "tool_estimates", "past_outcomes", "exploration_hints")
"""In the order `opening` calls them: what changes least first (a longer cached prefix).
The device state comes before the step's calls: consecutive consultations are of different
shapes (a shape's answer is cached), while the device often reads the same (traced with
Qwen2.5-Coder-1.5B: its 35 tokens were read again at every consultation)."""


def opening(tools: Sequence[BaseTool]) -> list[AnyMessage]:
    """Every observation tool called for the sub-agent: one assistant message with the
    calls (stable ids, no arguments), then each call's `ToolMessage` output."""
    calls = [{"name": t.name, "args": {}, "id": f"obs{i}", "type": "tool_call"}
             for i, t in enumerate(tools)]
    messages: list[AnyMessage] = [AIMessage("", id="devsched-observations", tool_calls=calls)]
    for tool, call in zip(tools, calls, strict=True):
        messages.append(ToolMessage(str(tool.invoke({})), tool_call_id=call["id"],
                                    name=tool.name))
    return messages


def inline(tools: Sequence[BaseTool]) -> str:
    """Every observation tool's output as ``name: output`` lines (the outputs inline)."""
    return "\n".join(f"{t.name}: {t.invoke({})}" for t in tools)
