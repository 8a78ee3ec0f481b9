"""What the model-fault probes share: tools on harness-counted models, and their nodes.

A model tool gets its instance from a `ResidentModel` handle in one of three ways
(`LoadMode`): a sync tool calls ``handle.get()`` (under ``ainvoke`` it runs in a thread);
an async tool calls it inline (the load blocks the loop, as such code does); an async tool
awaits ``asyncio.to_thread(handle.get)``, a common way not to block the loop. The tool then
optionally waits on a gate (a call that stays running) and says, when it ends, whether its
instance was released under it.

>>> LOAD_MODES
('sync', 'inline', 'thread')
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal, get_args

from langchain_core.tools import BaseTool

from langgraph_devsched._dev.stress.kit import ProbeContext, make_tool, node_for
from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels, live_backend
from langgraph_devsched.device import current_device
from langgraph_devsched.models import ResidentModel
from langgraph_devsched.node import DeviceToolNode
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

LoadMode = Literal["sync", "inline", "thread"]
LOAD_MODES: tuple[LoadMode, ...] = get_args(LoadMode)
_SERIAL = itertools.count()
RUN_LIMIT_S = 5.0
"""A gated run gives up waiting after this long (a probe always opens its gate)."""


class RunGate:
    """Keeps model tools running until opened; counts those that entered."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()

    def wait(self) -> None:
        self.entered.set()
        self.open.wait(RUN_LIMIT_S)

    async def await_open(self) -> None:
        self.entered.set()
        end = time.monotonic() + RUN_LIMIT_S
        while not self.open.is_set() and time.monotonic() < end:
            await asyncio.sleep(0.002)


def model_tool(
    name: str,
    handle: ResidentModel[Any],
    models: LiveModels,
    mode: LoadMode,
    *,
    gate: RunGate | None = None,
    problems: list[str] | None = None,
) -> BaseTool:
    """A tool answering ``"<name>:<payload>@<device of its instance>"``."""

    def check(inst: Any) -> None:
        if problems is not None and not models.is_live(inst):
            problems.append(f"{name}: its {handle.name!r} instance was released while the "
                            "call still ran")

    def run(payload: str) -> str:
        inst = handle.get()
        if gate is not None:
            gate.wait()
        check(inst)
        return f"{name}:{payload}@{inst.device}"

    async def arun(payload: str) -> str:
        if mode == "thread":
            inst = await asyncio.to_thread(handle.get)
        else:
            inst = handle.get()
        await asyncio.sleep(0)
        if gate is not None:
            await gate.await_open()
        check(inst)
        return f"{name}:{payload}@{inst.device}"

    return make_tool(name, run, None if mode == "sync" else arun)


def model_name(ctx: ProbeContext, name: str) -> str:
    """``name`` locally (each probe's backend has a cache of its own); on the simulated
    backend, whose tools load into the process-wide cache, a name no earlier probe used."""
    return name if ctx.backend != "simulated" else f"{name}-{next(_SERIAL)}"


def plain_tool(name: str) -> BaseTool:
    """A tool with no model: answers the device it was placed on."""

    def run(payload: str) -> str:
        return f"{name}:{payload}@{current_device()}"

    async def arun(payload: str) -> str:
        return f"{name}:{payload}@{current_device()}"

    return make_tool(name, run, arun)


def model_node(
    ctx: ProbeContext,
    models: LiveModels,
    tools: list[BaseTool],
    hints: Mapping[str, Mapping[str, Any]],
    *,
    queue_timeout_s: float | None = None,
    gpu_concurrency: int | None = None,
    sim_params: Mapping[str, ToolParams] | None = None,
    **kwargs: Any,
) -> tuple[DeviceToolNode, LiveLedger | None]:
    """A node on the context's backend: locally over a `LiveLedger` (declared 8,000 MB GPU),
    simulated over a testbed with ``sim_params`` (default: from the hints)."""
    kwargs.setdefault("scheduler", "static")
    kwargs.setdefault("handle_tool_errors", True)
    if ctx.backend == "simulated":
        if sim_params is None:
            node, _ = node_for(ctx, tools, hints, **kwargs)
            return node, None
        bed = SimulatedTestbed(dict(sim_params), vram_budget_mb=8000.0, cpu_cores=8,
                               seed=ctx.seed)
        return DeviceToolNode(tools, hints=dict(hints), testbed=bed, **kwargs), None
    backend, ledger = live_backend(models, queue_timeout_s=queue_timeout_s,
                                   gpu_concurrency=gpu_concurrency)
    return DeviceToolNode(tools, hints=dict(hints), backend=backend, **kwargs), ledger


def sim_params(hints: Mapping[str, Mapping[str, Any]]) -> dict[str, ToolParams]:
    """Testbed parameters matching ``hints`` (VRAM, model, weights), quick on both sides."""
    out: dict[str, ToolParams] = {}
    for tool, h in hints.items():
        out[tool] = ToolParams(
            cpu_ms=5.0, gpu_ms=1.0, vram_mb=float(h.get("vram_mb", 0.0)),
            model=h.get("model"), weights_mb=float(h.get("weights_mb", 0.0)),
            load_gpu_ms=2.0 if h.get("weights_mb") else 0.0,
        )
    return out
