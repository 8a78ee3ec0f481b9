"""Property tests of the ledger per device, on 2-4 GPUs of different sizes and speeds: never
over any GPU's budget, no model in use evicted, every ledger at 0 at rest after ``close()``,
one answer per call; on the simulated testbed and on the local backend (declared GPUs, real
ledgers and threads)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    LocalBackend,
    ResidentModel,
    current_device,
)
from langgraph_devsched.executors import SimulatedBackend
from langgraph_devsched.gpus import gpu_index
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.testbed import GpuSpec, SimulatedTestbed, ToolParams

PROPS = settings(max_examples=15, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MODELS = {"m_a": 3000.0, "m_b": 5000.0, "m_c": 1200.0}
TOOLS = {"a": "m_a", "b": "m_b", "c": "m_c", "x": None}
VRAM = {"a": 800.0, "b": 1500.0, "c": 400.0, "x": 2500.0}
OPTIONS = ("gpu_now", "gpu_queued", "cpu")

gpus_st = st.lists(st.tuples(st.sampled_from([6000.0, 9000.0, 12000.0]),
                             st.sampled_from([1.0, 2.0])), min_size=2, max_size=4)
call_st = st.tuples(st.sampled_from(sorted(TOOLS)), st.sampled_from(OPTIONS),
                    st.none() | st.integers(0, 3))
steps_st = st.lists(st.lists(call_st, min_size=1, max_size=6), min_size=1, max_size=4)


class Named(SchedulerBase):
    """Answers the drawn option and GPU per call (a GPU past the machine's: invalid)."""

    name = "named"

    def __init__(self) -> None:
        self.plan: dict[str, tuple[str, int | None]] = {}

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        mapping = {c: self.plan[c][0] for c in batch.call_ids}
        gpus = {c: g for c, (o, g) in self.plan.items() if g is not None and c in mapping
                and o != "cpu"}
        return self._decision(mapping, "drawn", gpus=gpus)  # type: ignore[arg-type]


def hints() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, model in TOOLS.items():
        out[name] = {"vram_mb": VRAM[name]}
        if model is not None:
            out[name].update(model=model, weights_mb=MODELS[model])
    return out


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step_input(index: int, calls: list[tuple[str, str, int | None]], scheduler: Named) -> Any:
    tool_calls = []
    for j, (name, option, gpu) in enumerate(calls):
        cid = f"s{index}c{j}"
        scheduler.plan[cid] = (option, gpu)
        tool_calls.append({"name": name, "args": {"text": cid}, "id": cid})
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(out: Any) -> dict[str, list[ToolMessage]]:
    got: dict[str, list[ToolMessage]] = {}
    for m in out["messages"]:
        if isinstance(m, ToolMessage):
            got.setdefault(m.tool_call_id, []).append(m)
    return got


@PROPS
@given(gpus=gpus_st, steps=steps_st)
def test_the_simulated_ledger_of_every_gpu_holds(
        gpus: list[tuple[float, float]], steps: list[list[tuple[str, str, int | None]]]) -> None:
    params = {}
    for name, model in TOOLS.items():
        extra = {} if model is None else {"model": model, "weights_mb": MODELS[model],
                                          "load_gpu_ms": 500}
        params[name] = ToolParams(cpu_ms=300, gpu_ms=40, vram_mb=VRAM[name], **extra)
    bed = SimulatedTestbed(params, gpus=[GpuSpec(vram_mb=mb, speed=speed) for mb, speed in gpus])
    scheduler = Named()
    tools = [_echo(name) for name in TOOLS]
    node = DeviceToolNode(tools, hints=hints(), scheduler=scheduler,
                          backend=SimulatedBackend(bed), handle_tool_errors=True)
    graph = graph_of(node)
    for index, calls in enumerate(steps):
        out = graph.invoke(step_input(index, calls, scheduler))
        got = answers(out)
        assert sorted(got) == sorted(f"s{index}c{j}" for j in range(len(calls)))
        assert all(len(v) == 1 for v in got.values())
        record = node.history[-1].record
        assert record is not None
        for g, per in enumerate(record.extra["gpus"]):  # type: ignore[union-attr]
            assert per["vram_peak_mb"] <= per["vram_budget_mb"] + 1e-6, (g, per)
            assert per["vram_end_mb"] == 0.0
        used = {(gpu_index(c.device), c.model) for c in record.calls
                if c.on_gpu and c.model is not None}
        for c in record.calls:  # no model used on a GPU this step is evicted from it
            for model in c.evicted:
                assert (gpu_index(c.device), model) not in used, (c, used)
        for device, (budget, _) in zip(bed.device_state().devices, gpus, strict=True):
            assert device.resident_mb <= budget + 1e-6


def _echo(name: str) -> Any:
    @tool(name)
    def echo(text: str) -> str:
        """Say where it runs."""
        return current_device()

    return echo


@PROPS
@given(gpus=gpus_st, steps=steps_st, use_async=st.booleans())
def test_the_local_ledger_of_every_gpu_holds_and_closes_at_zero(
        gpus: list[tuple[float, float]], steps: list[list[tuple[str, str, int | None]]],
        use_async: bool) -> None:
    # a queue timeout ends a wait a broken ledger would never end (a correct run may fall
    # back on it under load: no assertion depends on where a call ran)
    backend = LocalBackend(gpu=[GpuConfig(mb, f"cuda:{i}", speed=speed)
                                for i, (mb, speed) in enumerate(gpus)], queue_timeout_s=5.0)
    handles = {m: ResidentModel(m, load=lambda device, m=m: f"{m}@{device}", weights_mb=mb)
               for m, mb in MODELS.items()}
    problems: list[str] = []

    def make(name: str) -> Any:
        model = TOOLS[name]

        @tool(name)
        def run(text: str) -> str:
            """Run on the resident model where placed; check it stays resident meanwhile."""
            device = current_device()
            for i, ledger in enumerate(backend.ledgers):
                if ledger.in_use_mb > ledger.capacity_mb + 1e-6:
                    problems.append(f"cuda:{i} over budget: {ledger.in_use_mb}")
            if model is None:
                return device
            instance = handles[model].get()
            index = gpu_index(device)
            if index is not None and not backend.caches[index].holds(model, "gpu"):
                problems.append(f"{model} in use on {device} was evicted")
            return f"{instance}"

        return run

    scheduler = Named()
    node = DeviceToolNode([make(n) for n in TOOLS], hints=hints(), scheduler=scheduler,
                          backend=backend, handle_tool_errors=True)
    graph = graph_of(node)
    for index, calls in enumerate(steps):
        inputs = step_input(index, calls, scheduler)
        out = asyncio.run(graph.ainvoke(inputs)) if use_async else graph.invoke(inputs)
        got = answers(out)
        assert sorted(got) == sorted(f"s{index}c{j}" for j in range(len(calls)))
        assert all(len(v) == 1 for v in got.values())
        for ledger in backend.ledgers:  # at rest: only resident weights, nothing running
            assert ledger.active == 0 and ledger.queued == 0
            assert abs(ledger.in_use_mb - ledger.weights_mb) <= 1e-6
            assert ledger.peak_mb <= ledger.capacity_mb + 1e-6
    assert problems == []
    node.close()
    assert [ledger.in_use_mb for ledger in backend.ledgers] == [0.0] * len(gpus)
    assert all(cache.resident() == () for cache in backend.caches)
