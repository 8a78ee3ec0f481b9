"""Property tests of what several GPUs, hedges and made-up call ids must never break: the
default rule gives a call a GPU that can take it now whenever one can; weights asked for
on any GPU count on that GPU's ledger (each ledger compared with the live instances on its
GPU); any call ids, a hedge's look-alikes included, get one answer and one record entry
each."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, current_device
from langgraph_devsched._dev.stress.live import LiveModels, live_gpus_backend
from langgraph_devsched.gpus import GpuCall, default_gpus, takes_now
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.telemetry import GpuDevice

PROPS = settings(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

warm_st = st.builds(WarmModel, st.sampled_from(["m1", "m2", "m3"]),
                    st.sampled_from([1000.0, 6000.0, 17000.0]), st.just("gpu"),
                    st.integers(0, 1), st.booleans())
device_st = st.tuples(st.sampled_from([8000.0, 16000.0, 24000.0]),
                      st.lists(warm_st, max_size=2, unique_by=lambda w: w.model),
                      st.sampled_from([0.0, 2000.0]), st.integers(0, 2),
                      st.none() | st.integers(1, 2))
call_st = st.builds(GpuCall, st.just("c"), st.none() | st.sampled_from(["m1", "m4"]),
                    st.sampled_from([500.0, 6000.0, 14000.0]), st.sampled_from([0.0, 1000.0]))


@PROPS
@given(devices=st.lists(device_st, min_size=2, max_size=4), call=call_st)
def test_a_call_gets_a_gpu_that_can_take_it_now_whenever_one_can(devices, call) -> None:
    gpus = []
    for i, (budget, resident, working, active, cap) in enumerate(devices):
        kept = sum(w.weights_mb for w in resident)
        if kept + working > budget:
            resident = []
        gpus.append(GpuDevice(i, f"g{i}", budget, resident=tuple(resident), working_mb=working,
                              active=active, max_active=cap))
    chosen = default_gpus([call], gpus)["c"]
    if any(takes_now(call, d) for d in gpus):
        assert takes_now(call, gpus[chosen]), (chosen, gpus)


class Drawn(SchedulerBase):
    """The drawn option and GPU per call id; the first call hedged on the other side."""

    name = "drawn"

    def __init__(self) -> None:
        self.plan: dict[str, tuple[str, int]] = {}

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        mapping = {c: self.plan[c][0] for c in batch.call_ids}
        gpus = {c: self.plan[c][1] for c in batch.call_ids if mapping[c] != "cpu"}
        first = batch.call_ids[0]
        hedge = "cpu" if mapping[first] != "cpu" else "gpu_now"
        return self._decision(mapping, "drawn", gpus=gpus,  # type: ignore[arg-type]
                              hedges={first: hedge}, hedge_bound=1.5)


id_st = st.one_of(st.text(min_size=1, max_size=12),
                  st.sampled_from(["x~hedge", "x~hedge~2", "x~hedge~3", "\u00b2", "a|b,c=d"]))
step_st = st.lists(st.tuples(id_st, st.sampled_from(["gpu_now", "gpu_queued", "cpu"]),
                             st.integers(0, 2), st.integers(0, 2)),
                   min_size=1, max_size=5, unique_by=lambda t: t[0])


@PROPS
@given(steps=st.lists(step_st, min_size=1, max_size=3), use_async=st.booleans())
def test_any_ids_and_gets_on_any_gpu_keep_every_ledger_true(steps, use_async) -> None:
    live = LiveModels()
    backend, ledgers = live_gpus_backend(live, [8000.0, 8000.0, 8000.0], queue_timeout_s=5.0)
    handles = {g: live.handle(f"w{g}", 3000.0) for g in range(3)}
    scheduler = Drawn()

    @tool("echo")
    def echo(text: str) -> str:
        """Asks for a model on the GPU its text names, answers where it ran."""
        target = int(text.rsplit("#", 1)[1])
        handles[target].get(f"cuda:{target}")
        return f"{text}@{current_device()}"

    node = DeviceToolNode([echo], hints={"echo": {"vram_mb": 500, "idempotent": True}},
                          scheduler=scheduler, backend=backend, handle_tool_errors=True)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    for calls in steps:
        tool_calls = []
        for cid, option, gpu, target in calls:
            scheduler.plan[cid] = (option, gpu)
            tool_calls.append({"name": "echo", "args": {"text": f"{cid}#{target}"}, "id": cid})
        inputs: Any = {"messages": [AIMessage("", tool_calls=tool_calls)]}
        out = asyncio.run(graph.ainvoke(inputs)) if use_async else graph.invoke(inputs)
        ids = [c[0] for c in calls]
        got = [m for m in out["messages"] if isinstance(m, ToolMessage)]
        assert sorted(m.tool_call_id for m in got) == sorted(ids)
        for m in got:  # its own output, never another call's
            assert str(m.content).startswith(f"{m.tool_call_id}#") or m.status == "error", m
        record = node.history[-1].record
        assert record is not None and [c.call_id for c in record.calls] == ids
        for i, ledger in enumerate(ledgers):
            assert ledger.problems == [], (i, ledger.problems)
            assert ledger.at_rest_problems() == [], (i, ledger.at_rest_problems())
    node.close()
    assert [x.in_use_mb for x in ledgers] == [0.0, 0.0, 0.0]
    assert live.live_gpu_mb() == {} and live.released == live.loads
