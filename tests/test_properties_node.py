"""Property tests over `DeviceToolNode`: random steps, hints within their valid ranges, faults.

Invariants: every call gets exactly one answer, answers carry their call's id and output, the
applied options are among each tool's allowed options, and the VRAM ledger never exceeds the
budget and is at zero at rest (the simulated testbed's per step, the local backend's real one).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend, StepReport, device_hints
from langgraph_devsched._dev.stress.tools import TOOL_NAMES, TOOL_PARAMS, Toolbox
from langgraph_devsched.ledger import QueueTimeoutError
from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.testbed import SimulatedTestbed

BUDGET_MB = 8000.0
PROPS = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def tool_hints(draw: Any, max_vram: float = 1.25 * BUDGET_MB) -> dict[str, Any]:
    """One tool's hints, anywhere in their valid ranges (consistent by construction)."""
    gpu_capable = draw(st.booleans())
    cpu_allowed = draw(st.booleans()) if gpu_capable else True
    allowed = [o for o in DEVICE_OPTIONS if (gpu_capable if o != "cpu" else cpu_allowed)]
    hints: dict[str, Any] = {
        "gpu_capable": gpu_capable,
        "cpu_allowed": cpu_allowed,
        "vram_mb": draw(st.floats(0, max_vram)),
        "gpu_share": draw(st.floats(0.01, 1.0)),
    }
    for key in ("pinned", "preferred"):
        choice = draw(st.none() | st.sampled_from(allowed))
        if choice is not None:
            hints[key] = choice
    return hints


FAULTS = ("none", "none", "none", "tool_error", "bad_args", "unknown_tool")
steps_strategy = st.lists(
    st.lists(st.tuples(st.sampled_from(TOOL_NAMES), st.sampled_from(FAULTS)), min_size=1,
             max_size=16),
    min_size=1,
    max_size=4,
)
SCHEDULER_FAULTS = ("none", "none", "raise", "invalid")


class ChaosScheduler(SchedulerBase):
    """Random options (allowed or not, or none), or an exception, as scripted per step."""

    name = "chaos"

    def __init__(self, rng: random.Random, faults: list[str]) -> None:
        self.rng, self.faults, self.given = rng, list(faults), {}

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        fault = self.faults.pop(0) if self.faults else "none"
        if fault == "raise":
            raise RuntimeError("scheduler exploded")
        mapping: dict[str, Any] = {}
        for call in batch.calls:
            if fault == "invalid":
                pick = self.rng.choice([*DEVICE_OPTIONS, "tpu", None])
            else:
                pick = self.rng.choice(call.spec.allowed_options())
            if pick is not None:
                mapping[call.call_id] = pick
        self.given = dict(mapping)
        return Decision(mapping=mapping, reason=fault, scheduler=self.name)


def make_call(step: int, i: int, name: str, fault: str) -> dict[str, Any]:
    cid = f"s{step}c{i}"
    args: dict[str, Any] = {"payload": cid, "fault": "none"}
    if fault == "tool_error":
        args["fault"] = "tool_error"
    elif fault == "bad_args":
        args = {"payload": ["not", "a", "string"]}
    elif fault == "unknown_tool":
        name = "no_such_tool"
    return {"name": name, "args": args, "id": cid, "type": "tool_call"}


def check_answers(calls: list[dict[str, Any]], messages: list[Any]) -> None:
    answers = [m for m in messages if isinstance(m, ToolMessage)]
    assert sorted(m.tool_call_id for m in answers) == sorted(c["id"] for c in calls)
    for call, m in zip(calls, answers, strict=True):
        assert m.tool_call_id == call["id"]  # in call order, matched by id
        if m.status == "success":
            assert str(m.content).startswith(f"{call['name']}:{call['id']}@")
        else:
            fault = call["args"].get("fault")
            bad = call["name"] not in TOOL_NAMES or not isinstance(call["args"].get("payload"), str)
            assert bad or fault in ("tool_error", "gpu_oom") or "cannot run" in str(m.content)


def check_report(report: StepReport, scheduler: ChaosScheduler) -> None:
    for call in report.batch.calls:
        applied = report.decision.mapping[call.call_id]
        assert applied in call.spec.allowed_options(), (call.tool, applied, call.spec)
        cause = report.fallbacks.get(call.call_id)
        if report.decision.reason.startswith("forced"):
            # one allowed option per call: the node decided alone, the scheduler was not asked
            assert call.call_id not in scheduler.given and cause is None
        elif report.decision.reason.startswith("scheduler error"):
            assert cause == "scheduler_error"
        elif scheduler.given.get(call.call_id) not in call.spec.allowed_options():
            assert cause == "invalid_decision"
        else:
            assert cause is None


@PROPS
@given(
    hints=st.fixed_dictionaries({n: tool_hints() for n in TOOL_NAMES}),
    steps=steps_strategy,
    scheduler_faults=st.lists(st.sampled_from(SCHEDULER_FAULTS), min_size=4, max_size=4),
    rng=st.randoms(use_true_random=False),
    use_async=st.booleans(),
)
def test_simulated_node_answers_each_call_once_within_budget(
    hints: dict[str, dict[str, Any]],
    steps: list[list[tuple[str, str]]],
    scheduler_faults: list[str],
    rng: random.Random,
    use_async: bool,
) -> None:
    reports: list[StepReport] = []
    scheduler = ChaosScheduler(rng, scheduler_faults)
    bed = SimulatedTestbed(TOOL_PARAMS, vram_budget_mb=BUDGET_MB, cpu_cores=4)
    node = DeviceToolNode(
        Toolbox().tools(), hints=hints, testbed=bed, scheduler=scheduler,
        on_step=reports.append, handle_tool_errors=True,
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    for s, step in enumerate(steps):
        calls = [make_call(s, i, name, fault) for i, (name, fault) in enumerate(step)]
        before = len(reports)
        inputs = {"messages": [AIMessage("", tool_calls=calls)]}
        out = asyncio.run(graph.ainvoke(inputs)) if use_async else graph.invoke(inputs)
        check_answers(calls, out["messages"][1:])
        known = [c for c in calls if c["name"] in TOOL_NAMES]
        assert len(reports) - before == (1 if known else 0)
        if known:
            report = reports[-1]
            assert sorted(report.batch.call_ids) == sorted(c["id"] for c in known)
            check_report(report, scheduler)
            assert report.record is not None
            assert report.record.vram_peak_mb <= BUDGET_MB
            assert report.record.extra["vram_end_mb"] == 0
    assert node.planner.open_steps == 0  # every step closed


@PROPS
@given(
    hints=st.fixed_dictionaries({n: tool_hints(max_vram=BUDGET_MB) for n in TOOL_NAMES}),
    steps=steps_strategy,
    ooms=st.lists(st.booleans(), min_size=16, max_size=16),
    rng=st.randoms(use_true_random=False),
    use_async=st.booleans(),
)
def test_local_backend_ledger_stays_within_budget_and_returns_to_zero(
    hints: dict[str, dict[str, Any]],
    steps: list[list[tuple[str, str]]],
    ooms: list[bool],
    rng: random.Random,
    use_async: bool,
) -> None:
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=BUDGET_MB), queue_timeout_s=0.05)
    ledger = backend.ledger
    assert ledger is not None
    reports: list[StepReport] = []
    scheduler = ChaosScheduler(rng, [])
    node = DeviceToolNode(
        Toolbox().tools(), hints=hints, backend=backend, scheduler=scheduler,
        on_step=reports.append, handle_tool_errors=True,
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    for s, step in enumerate(steps):
        calls = [make_call(s, i, name, fault) for i, (name, fault) in enumerate(step)]
        for call, oom in zip(calls, ooms, strict=False):
            if oom and call["args"].get("fault") == "none":
                call["args"]["fault"] = "gpu_oom"  # raises only when placed on the GPU
        inputs = {"messages": [AIMessage("", tool_calls=calls)]}
        out = asyncio.run(graph.ainvoke(inputs)) if use_async else graph.invoke(inputs)
        check_answers(calls, out["messages"][1:])
        for m, call in zip(out["messages"][1:], calls, strict=True):
            cpu_ok = hints.get(call["name"], {}).get("cpu_allowed", False)
            if call["args"].get("fault") == "gpu_oom" and cpu_ok:
                assert m.status == "success"  # the OOM reran it on the CPU
        if any(c["name"] in TOOL_NAMES for c in calls):
            check_report(reports[-1], scheduler)
        assert ledger.in_use_mb == 0 and ledger.active == 0 and ledger.queued == 0
        assert ledger.peak_mb <= ledger.capacity_mb
    assert node.planner.open_steps == 0


def test_unplaceable_call_is_recorded_and_its_step_reported() -> None:
    """Regression (found by the stress harness): a call that the local backend could place
    nowhere (GPU-only, VRAM never fits) got its error answer but no record, so its step was
    never closed: no StepReport, no monitor record, and the step stayed in the node's cache."""

    @device_hints(vram_mb=5000, cpu_allowed=False)
    @tool
    def gpu_only(text: str) -> str:
        """Needs more VRAM than there is."""
        return "never"

    @tool
    def plain(text: str) -> str:
        """Runs anywhere."""
        return text

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([gpu_only, plain], backend=backend, on_step=reports.append)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    calls = [{"name": "gpu_only", "args": {"text": "a"}, "id": "a"},
             {"name": "plain", "args": {"text": "b"}, "id": "b"}]
    out = graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["error", "success"]
    assert len(reports) == 1
    record = reports[0].record
    assert record is not None
    assert [c.call_id for c in record.calls] == ["a", "b"]
    assert "forbid the CPU" in (record.by_id()["a"].error or "")
    assert node.planner.open_steps == 0


async def test_queue_timeout_on_a_gpu_only_tool_still_closes_the_step() -> None:
    """The same finding on the async path: `gpu_queued` that times out with the CPU
    forbidden is answered with an error, recorded, and its step reported."""
    release = asyncio.Event()

    @device_hints(vram_mb=800, pinned="gpu_queued")
    @tool
    async def holder(text: str) -> str:
        """Holds the GPU until released."""
        await asyncio.wait_for(release.wait(), 10.0)  # a bound never reached when green
        return text

    @device_hints(vram_mb=800, cpu_allowed=False, pinned="gpu_queued")
    @tool
    def waiter(text: str) -> str:
        """Queued behind the holder."""
        return text

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), queue_timeout_s=0.01)
    ledger = backend.ledger
    assert ledger is not None
    gave_up = asyncio.Event()
    areserve = ledger.areserve

    async def watched(*args: Any, **kwargs: Any) -> Any:  # says when the waiter gives up
        try:
            return await areserve(*args, **kwargs)
        except QueueTimeoutError:
            gave_up.set()
            raise

    ledger.areserve = watched  # type: ignore[method-assign]
    node = DeviceToolNode([holder, waiter], backend=backend, on_step=reports.append)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    calls = [{"name": "holder", "args": {"text": "a"}, "id": "a"},
             {"name": "waiter", "args": {"text": "b"}, "id": "b"}]

    async def run() -> dict[str, Any]:
        task = asyncio.ensure_future(graph.ainvoke({"messages": [AIMessage("", tool_calls=calls)]}))
        # the holder is released once the waiter has given up (its queue timeout passed),
        # however long the machine took to get it queued
        await asyncio.wait_for(gave_up.wait(), 10.0)
        release.set()
        return await task

    out = await run()
    answers = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers["a"].content == "a"
    assert answers["b"].status == "error"
    assert "not admitted to the GPU within 0.01s" in str(answers["b"].content)
    assert len(reports) == 1 and node.planner.open_steps == 0


# -- gaps the stress harness found, fixed -----------------------------------------------------

async def test_cancelled_calls_are_recorded_as_cancelled() -> None:
    started = asyncio.Event()

    @device_hints(vram_mb=100)
    @tool
    async def blocks(text: str) -> str:
        """Never finishes on its own."""
        started.set()
        await asyncio.sleep(5)
        return text

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([blocks], backend=backend, on_step=reports.append)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    call = {"name": "blocks", "args": {"text": "a"}, "id": "a"}
    task = asyncio.ensure_future(graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]}))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(reports) == 1  # the cancellation closed the step
    record = reports[0].record
    assert record is not None
    assert record.calls[0].error == "cancelled"


def test_simulated_backend_never_runs_a_cpu_forbidden_tool_on_the_cpu() -> None:
    class Now(ChaosScheduler):
        def decide(self, batch: Batch, view: SchedulerView) -> Decision:
            return Decision(dict.fromkeys(batch.call_ids, "gpu_now"), scheduler="now")

    hints = {"diffuse": {"vram_mb": 6000}, "rerank": {"vram_mb": 2000, "cpu_allowed": False}}
    node = DeviceToolNode(
        Toolbox().tools(("diffuse", "rerank")), hints=hints,
        testbed=SimulatedTestbed(TOOL_PARAMS, vram_budget_mb=BUDGET_MB),
        scheduler=Now(random.Random(0), []),
    )
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    names = ("diffuse", "rerank", "rerank")
    calls = [make_call(0, i, name, "none") for i, name in enumerate(names)]
    out = graph.invoke({"messages": [AIMessage("", tool_calls=calls)]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    # 6000 + 2000 MB fill the budget: the second rerank's gpu_now does not fit
    assert not str(answers[2].content).endswith("@cpu")
    assert answers[2].status == "error" and "forbid the CPU" in str(answers[2].content)
