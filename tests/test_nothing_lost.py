"""Every call gets exactly one answer and the ledger stays sound, whatever goes wrong.

One test per failure class found by a hostile user on the public API (issue 12): untrusted
scheduler returns, a monitor whose snapshot fails, cross-loop concurrent steps, reused call
ids, cancellation of a sync GPU tool and of a queued step, CPU slots on OOM reruns,
non-finite hints, ``handle_tool_errors=None``; and the new capabilities: per-call timeouts,
``max_concurrency``, a GPU concurrency cap. The GPU is a declared `GpuConfig` (no CUDA).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import pytest
import torch
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Send

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    StepReport,
    device_hints,
)
from langgraph_devsched.hints import HintsError
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

WAIT_S = 10.0  # upper bound for events that should come at once; never reached when green


def graph_of(node: DeviceToolNode | ToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def fanout_graph(node: DeviceToolNode) -> Any:
    def route(state: MessagesState) -> list[Send]:
        calls = state["messages"][-1].tool_calls  # type: ignore[union-attr]
        return [Send("tools", [c]) for c in calls]

    return (
        StateGraph(MessagesState)
        .add_node("tools", node)
        .add_conditional_edges(START, route, ["tools"])
        .compile()
    )


def step(*calls: tuple[str, str]) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": {"text": i}, "id": i} for n, i in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


@device_hints(vram_mb=1000)
@tool
def where(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Report the device."""
    return device


# -- 1. untrusted scheduler output ---------------------------------------------------------------
class Returns(SchedulerBase):
    name = "returns"

    def __init__(self, value: Any) -> None:
        self.value = value

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self.value  # type: ignore[no-any-return]


def _malformed(kind: str) -> Any:
    if kind == "none":
        return None
    if kind == "dict":
        return {"a": "gpu_now"}
    if kind == "mapping_none":
        return Decision(mapping=None)  # type: ignore[arg-type]
    if kind == "mapping_list":
        return Decision(mapping=["gpu_now", "cpu"])  # type: ignore[arg-type]
    if kind == "predicted_none":
        return Decision(mapping={"a": "gpu_now", "b": "cpu"}, predicted_ms=None)  # type: ignore[arg-type]
    if kind == "option_garbage":
        return Decision(mapping={"a": ["gpu"], "b": 3}, reason=None, probe="yes")  # type: ignore[dict-item,arg-type]
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    ["none", "dict", "mapping_none", "mapping_list", "predicted_none", "option_garbage"],
)
def test_a_malformed_scheduler_return_falls_back_and_every_call_is_answered(kind: str) -> None:
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [where],
        scheduler=Returns(_malformed(kind)),
        backend=LocalBackend(gpu=GpuConfig(8000)),
        on_step=reports.append,
    )
    with collect_runs():  # a tracer: decision metadata is built for every tool run
        out = answers(graph_of(node).invoke(step(("where", "a"), ("where", "b"))))
    assert set(out) == {"a", "b"} and all(m.status != "error" for m in out.values())
    (report,) = reports
    if kind == "predicted_none":  # a valid mapping: only the predictions are dropped
        assert report.decision.fallback is None and report.decision.predicted_ms == {}
    else:
        assert report.decision.fallback in ("scheduler_error", "invalid_decision")
        assert set(report.fallbacks) == {"a", "b"}
    assert node.backend.ledger.in_use_mb == 0  # type: ignore[attr-defined]


class BrokenMonitor:
    def snapshot(self) -> Any:
        raise KeyError("bogus")

    def record_step(self, *args: Any) -> None:
        raise KeyError("bogus")


def test_a_failing_monitor_snapshot_falls_back_instead_of_losing_the_step() -> None:
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [where],
        backend=LocalBackend(gpu=GpuConfig(8000)),
        monitor=BrokenMonitor(),
        on_step=reports.append,
    )
    out = answers(graph_of(node).invoke(step(("where", "a"))))
    assert out["a"].status != "error"
    assert reports[0].decision.fallback == "scheduler_error"
    assert "KeyError" in reports[0].decision.reason


# -- 3. the same step from many threads, each with its own event loop --------------------------
@pytest.mark.parametrize("make_graph", [graph_of, fanout_graph], ids=["whole", "send"])
def test_the_same_step_from_16_threads_and_loops_is_answered_in_every_one(make_graph: Any) -> None:
    node = DeviceToolNode([where], backend=LocalBackend(gpu=GpuConfig(8000)))
    graph = make_graph(node)
    results: list[dict[str, ToolMessage]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def converse() -> None:
        barrier.wait(WAIT_S)
        cfg = {"configurable": {"thread_id": "same"}}
        out = asyncio.run(graph.ainvoke(step(("where", "c1"), ("where", "c2")), cfg))
        with lock:
            results.append(answers(out))

    threads = [threading.Thread(target=converse) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(results) == 16
    assert all(set(r) == {"c1", "c2"} for r in results)
    assert all(
        m.status != "error" and m.content in ("cuda:0", "cpu") for r in results for m in r.values()
    )
    assert node.planner.open_steps == 0 and node.backend.ledger.in_use_mb == 0  # type: ignore[attr-defined]


# -- 4. call ids reused by concurrent steps for different tools ----------------------------------
@device_hints(pinned="gpu_queued", cpu_allowed=False, vram_mb=100)
@tool
def gpu_only(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Runs on the GPU only."""
    return device


@device_hints(gpu_capable=False)
@tool
def cpu_only(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Runs on the CPU only."""
    return device


@pytest.mark.parametrize("make_graph", [graph_of, fanout_graph], ids=["whole", "send"])
def test_concurrent_steps_reusing_a_call_id_each_run_on_their_own_tools_options(
    make_graph: Any,
) -> None:
    node = DeviceToolNode([gpu_only, cpu_only], backend=LocalBackend(gpu=GpuConfig(8000)))
    graph = make_graph(node)

    async def main() -> list[tuple[str, ToolMessage]]:
        names = ["gpu_only", "cpu_only"] * 100
        outs = await asyncio.gather(*(graph.ainvoke(step((n, "call-1"))) for n in names))
        return [(n, answers(o)["call-1"]) for n, o in zip(names, outs, strict=True)]

    for name, message in asyncio.run(main()):
        assert message.status != "error", message.content
        assert message.content == ("cuda:0" if name == "gpu_only" else "cpu")


# -- 5. cancellation ---------------------------------------------------------------------------
def test_cancelling_ainvoke_keeps_a_sync_gpu_tools_vram_until_its_thread_returns() -> None:
    started, release = threading.Event(), threading.Event()

    @device_hints(pinned="gpu_queued", vram_mb=6000)
    @tool
    def heavy(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Holds the GPU until released."""
        started.set()
        release.wait(WAIT_S)
        return device

    @device_hints(pinned="gpu_now", vram_mb=6000)
    @tool
    def other(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Wants the GPU now."""
        return device

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([heavy, other], backend=backend, on_step=reports.append)
    graph = graph_of(node)

    async def cancel_heavy() -> None:
        task = asyncio.ensure_future(graph.ainvoke(step(("heavy", "h"))))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, WAIT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_heavy())
    ledger = backend.ledger
    assert ledger is not None
    assert ledger.in_use_mb == 6000  # the thread still runs on the GPU
    out = answers(graph.invoke(step(("other", "o"))))
    assert out["o"].content == "cpu"  # not admitted beside it
    assert ledger.peak_mb <= 8000
    release.set()
    deadline = time.monotonic() + WAIT_S
    while ledger.in_use_mb and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ledger.in_use_mb == 0
    heavy_reports = [r for r in reports if r.batch.shape == ("heavy",)]
    assert len(heavy_reports) == 1 and heavy_reports[0].record is not None
    assert heavy_reports[0].record.calls[0].error == "cancelled"


def test_cancelling_ainvoke_keeps_a_sync_cpu_tools_slot_until_its_thread_returns() -> None:
    started, release = threading.Event(), threading.Event()

    @device_hints(gpu_capable=False)
    @tool
    def crunch(text: str) -> str:
        """Holds a CPU slot until released."""
        started.set()
        release.wait(WAIT_S)
        return "done"

    backend = LocalBackend(gpu=False, cpu_workers=1)
    node = DeviceToolNode([crunch], backend=backend)
    graph = graph_of(node)

    async def cancel_crunch() -> None:
        task = asyncio.ensure_future(graph.ainvoke(step(("crunch", "c"))))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, WAIT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_crunch())
    slots = backend.cpu_slots
    assert slots is not None and slots.in_use_mb == 1  # the thread still holds its slot
    release.set()
    deadline = time.monotonic() + WAIT_S
    while slots.in_use_mb and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slots.in_use_mb == 0


def test_a_step_cancelled_while_queued_for_the_gpu_is_closed_and_reported() -> None:
    @device_hints(pinned="gpu_queued", vram_mb=6000)
    @tool
    def queued(text: str) -> str:
        """Waits for the GPU."""
        return "ran"

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([queued], backend=backend, on_step=reports.append)
    graph = graph_of(node)
    ledger = backend.ledger
    assert ledger is not None
    blocker = ledger.try_reserve(5000)
    assert blocker is not None

    async def cancel_queued() -> None:
        task = asyncio.ensure_future(graph.ainvoke(step(("queued", "q"))))
        while ledger.queued == 0:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_queued())
    ledger.release(blocker)
    assert ledger.in_use_mb == 0 and ledger.queued == 0
    (report,) = reports
    assert report.record is not None
    (call,) = report.record.calls
    assert call.device == "none" and call.error == "cancelled"
    assert node.planner.open_steps == 0


# -- 6. every CPU run takes a CPU slot, OOM reruns included ------------------------------------
def test_oom_reruns_on_the_cpu_respect_cpu_workers() -> None:
    lock = threading.Lock()
    running = {"now": 0, "max": 0}

    @device_hints(pinned="gpu_now", vram_mb=100)
    @tool
    def ooms(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Runs out of GPU memory on the GPU; works on the CPU."""
        if device != "cpu":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (test)")
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
        time.sleep(0.02)
        with lock:
            running["now"] -= 1
        return device

    node = DeviceToolNode([ooms], backend=LocalBackend(gpu=GpuConfig(8000), cpu_workers=1))
    calls = [("ooms", f"c{i}") for i in range(4)]
    out = answers(asyncio.run(graph_of(node).ainvoke(step(*calls))))
    assert {m.content for m in out.values()} == {"cpu"} and len(out) == 4
    out = answers(graph_of(node).invoke(step(*calls)))
    assert {m.content for m in out.values()} == {"cpu"} and len(out) == 4
    assert running["max"] == 1


# -- 9 and 10. bad hints; handle_tool_errors=None ----------------------------------------------
@pytest.mark.parametrize(
    ("hints", "field"),
    [
        ({"vram_mb": float("inf")}, "vram_mb"),
        ({"profile": {"gpu_ms": float("inf")}}, "profile.gpu_ms"),
        ({"profile": {"cpu_ms": float("nan")}}, "profile.cpu_ms"),
        ({"gpu_share": float("nan")}, "gpu_share"),
    ],
)
def test_non_finite_hints_are_rejected_naming_tool_and_field(hints: dict, field: str) -> None:
    with pytest.raises(HintsError, match=rf"(?s)'where'.*{field}: Input should be a finite"):
        DeviceToolNode([where], hints={"where": hints})


def test_handle_tool_errors_none_raises_like_toolnode() -> None:
    from langgraph.prebuilt.tool_node import ToolInvocationError

    bad_args = {"messages": [AIMessage("", tool_calls=[{"name": "where", "args": {}, "id": "x"}])]}
    for node in (
        ToolNode([where], handle_tool_errors=None),
        DeviceToolNode([where], handle_tool_errors=None),
    ):
        with pytest.raises(ToolInvocationError):
            graph_of(node).invoke(bad_args)
    default = answers(graph_of(DeviceToolNode([where])).invoke(bad_args))
    assert default["x"].status == "error"  # the default answers invalid arguments


# -- per-call timeouts ---------------------------------------------------------------------------
def test_a_sync_tool_past_its_timeout_is_answered_and_keeps_its_vram_until_it_returns() -> None:
    release = threading.Event()

    @device_hints(pinned="gpu_now", vram_mb=3000, timeout_s=0.2)
    @tool
    def stuck(text: str) -> str:
        """Hangs until released."""
        release.wait(WAIT_S)
        return "late"

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(8000))
    # the short deadline is the stuck tool's own (its hint); the sibling's is the node's, far
    # beyond any ordinary call on a loaded machine
    node = DeviceToolNode(
        [stuck, cpu_only], backend=backend, call_timeout_s=WAIT_S, on_step=reports.append
    )
    for n, run in enumerate(("invoke", "ainvoke")):
        release.clear()
        payload = step(("stuck", "s"), ("cpu_only", "w"))
        graph = graph_of(node)
        result = graph.invoke(payload) if run == "invoke" else asyncio.run(graph.ainvoke(payload))
        out = answers(result)
        assert out["s"].status == "error" and "timed out after 0.2 s" in str(out["s"].content)
        assert out["w"].content == "cpu"  # the sibling is unaffected
        assert backend.ledger is not None and backend.ledger.in_use_mb == 3000
        assert len(reports) == n  # the step closes when the stuck thread returns
        release.set()
        deadline = time.monotonic() + WAIT_S
        while backend.ledger.in_use_mb and time.monotonic() < deadline:
            time.sleep(0.01)
        assert backend.ledger.in_use_mb == 0
        deadline = time.monotonic() + WAIT_S
        while len(reports) == n and time.monotonic() < deadline:
            time.sleep(0.01)
        record = reports[-1].record
        assert record is not None and record.by_id()["s"].error.startswith("timeout")  # type: ignore[union-attr]
    assert len(reports) == 2


def test_an_async_tool_past_its_timeout_hint_is_cancelled() -> None:
    cancelled = threading.Event()

    @device_hints(vram_mb=100, timeout_s=0.1)
    @tool
    async def slow(text: str) -> str:
        """Sleeps for a long time."""
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "late"

    node = DeviceToolNode([slow], backend=LocalBackend(gpu=GpuConfig(8000)), call_timeout_s=5)
    out = answers(asyncio.run(graph_of(node).ainvoke(step(("slow", "s")))))
    assert out["s"].status == "error" and "timed out after 0.1 s" in str(out["s"].content)
    assert cancelled.is_set()


def test_a_timeout_honours_handle_tool_errors_false() -> None:
    from langgraph_devsched.executors.base import CallTimeoutError

    @device_hints(vram_mb=100)
    @tool
    def nap(text: str) -> str:
        """Sleeps a little too long."""
        time.sleep(0.3)
        return "late"

    node = DeviceToolNode(
        [nap],
        backend=LocalBackend(gpu=GpuConfig(8000)),
        call_timeout_s=0.05,
        handle_tool_errors=False,
    )
    with pytest.raises(CallTimeoutError):
        graph_of(node).invoke(step(("nap", "n")))


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_call_timeout_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(ValueError, match="call_timeout_s must be a positive number"):
        DeviceToolNode([where], call_timeout_s=bad)


# -- concurrency limits --------------------------------------------------------------------------
def test_max_concurrency_bounds_the_calls_of_an_async_step() -> None:
    running = {"now": 0, "max": 0}

    @device_hints(gpu_capable=False)
    @tool
    async def count(text: str) -> str:
        """Counts how many run at once."""
        running["now"] += 1
        running["max"] = max(running["max"], running["now"])
        await asyncio.sleep(0.01)
        running["now"] -= 1
        return text

    node = DeviceToolNode([count])
    calls = [("count", f"c{i}") for i in range(6)]
    out = asyncio.run(graph_of(node).ainvoke(step(*calls), {"max_concurrency": 2}))
    assert len(answers(out)) == 6
    assert running["max"] == 2


def test_a_gpu_concurrency_cap_sends_gpu_now_calls_beyond_it_to_the_cpu() -> None:
    barrier = threading.Barrier(3)

    @device_hints(pinned="gpu_now", vram_mb=10)
    @tool
    def busy(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Waits for its peers, then reports its device."""
        barrier.wait(WAIT_S)
        return device

    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(8000), gpu_concurrency=1)
    node = DeviceToolNode([busy], backend=backend, on_step=reports.append)
    out = answers(graph_of(node).invoke(step(("busy", "a"), ("busy", "b"), ("busy", "c"))))
    assert sorted(m.content for m in out.values()) == ["cpu", "cpu", "cuda:0"]
    record = reports[0].record
    assert record is not None
    assert sorted(str(c.fallback) for c in record.calls) == ["None", "gpu_busy", "gpu_busy"]
