"""Loads between steps on a node: a model the scheduler expects next is loaded in the
background while the agent's LLM thinks, and the next step finds it warm; a step that
arrives during the load waits for it (one load), never sees the room it holds, and the
ledger stays within its budget and returns to zero.

Driven through a compiled graph on the local backend with a declared GPU (no CUDA: the
tools get the device string and their `ResidentModel` loads a stand-in there; the ledger is
the real one, checked at every grant and release). The node's clock is a fake the test
moves: the gaps between steps (the agent's think time) are exact; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langchain_core.tracers.context import collect_runs
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    LocalBackend,
    ResidentModel,
    StepReport,
    device_hints,
)
from langgraph_devsched._dev.stress.probe_models import CheckedLedger
from langgraph_devsched._node.preload import MIN_IDLE_MS, PRELOADS_KEY, WASTED_KEY
from langgraph_devsched.schedulers import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.base import Preload, SchedulerBase
from langgraph_devsched.telemetry import DeviceState

WAIT_S = 30.0
THINK_S = 5.0


class Clock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scripted(SchedulerBase):
    """Every call on ``gpu_now``; between steps, ``want`` is asked for (onto GPU 0, evicting
    every idle resident model, or into host memory) when it is not resident."""

    name = "scripted"

    def __init__(self, want: str | None, side: str = "gpu") -> None:
        self.want, self.side = want, side
        self.asked: list[float] = []
        self.declared: dict[str, Any] = {}

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision(dict.fromkeys(batch.call_ids, "gpu_now"), "scripted")

    def declare_tools(self, specs: Any) -> None:
        self.declared = dict(specs)

    def preloads(self, device: DeviceState, idle_ms: float) -> list[Preload]:
        self.asked.append(idle_ms)
        if self.want is None or device.warm(self.want, self.side):
            return []
        evict = tuple(w.model for w in device.resident if w.side == "gpu" and not w.in_use)
        return [Preload(self.want, 0, 800.0, 100.0, evict if self.side == "gpu" else (),
                        side=self.side)]  # type: ignore[arg-type]


class Loader:
    """A stand-in model whose loads are counted; ``hold`` blocks its next load (after
    ``started`` is set) until released."""

    def __init__(self, name: str, weights_mb: float = 6000) -> None:
        self.loads: list[str] = []
        self.hold: threading.Event | None = None
        self.started = threading.Event()
        self.arrived = threading.Event()
        """A call of its tool is running (set before it asks for the model)."""
        self.handle: ResidentModel[str] = ResidentModel(name, self.load, weights_mb=weights_mb)

    def load(self, device: str) -> str:
        self.loads.append(device)
        if self.hold is not None:
            self.started.set()
            assert self.hold.wait(WAIT_S)
        return f"{self.handle.name}@{device}"


def model_tool(name: str, model: ResidentModel[str],
               arrived: threading.Event | None = None) -> BaseTool:
    @device_hints(**model.hints(vram_mb=500))
    @tool(name)
    def run(text: str) -> str:
        """Run the model (``arrived`` is set first: the call is placed and running)."""
        if arrived is not None:
            arrived.set()
        return model.get()

    return run


def setup(scheduler: Any, *, preload: bool = True) -> tuple[Any, DeviceToolNode, Clock,
                                                             CheckedLedger, dict[str, Loader]]:
    clock = Clock()
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"), clock=clock)
    backend._detect()
    ledger = CheckedLedger(8000)  # checks weights + working memory at every grant/release
    backend._ledger = ledger
    backend.models.ledger = ledger
    loaders = {"sst": Loader("sst"), "big": Loader("big")}
    tools = [model_tool("sentiment", loaders["sst"].handle, loaders["sst"].arrived),
             model_tool("summarize", loaders["big"].handle)]
    reports: list[StepReport] = []
    node = DeviceToolNode(tools, scheduler=scheduler, backend=backend, on_step=reports.append,
                          preload=preload)
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    return app, node, clock, ledger, loaders


def step(tool_name: str, call_id: str) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=[
        {"name": tool_name, "args": {"text": call_id}, "id": call_id}])]}


def answer(out: dict[str, Any]) -> ToolMessage:
    msg = out["messages"][-1]
    assert isinstance(msg, ToolMessage)
    return msg


def tool_run(runs: Any) -> Any:
    """The traced tool run of a collected graph run."""
    todo = list(runs.traced_runs)
    while todo:
        run = todo.pop()
        if run.run_type == "tool":
            return run
        todo.extend(run.child_runs)
    raise AssertionError("no tool run traced")


def two_steps(app: Any, node: DeviceToolNode, clock: Clock) -> None:
    """sst loads in step 1, big evicts it in step 2: one think time measured between."""
    assert answer(app.invoke(step("sentiment", "s1"))).content == "sst@fake:0"
    clock.now += THINK_S
    assert answer(app.invoke(step("summarize", "b1"))).content == "big@fake:0"


def test_a_model_expected_next_is_loaded_between_steps_and_the_next_step_finds_it_warm():
    scheduler = Scripted("sst")
    app, node, clock, ledger, loaders = setup(scheduler)
    assert node.preload is not None and set(scheduler.declared) == {"sentiment", "summarize"}
    assert node.preload.idle_ms is None  # before two steps: no idle time measured
    app.invoke(step("sentiment", "s1"))
    assert scheduler.asked == []  # nothing asked before a gap was measured
    clock.now += THINK_S
    app.invoke(step("summarize", "b1"))
    assert node.preload.join(WAIT_S)
    assert scheduler.asked == [THINK_S * 1000.0]
    assert loaders["sst"].loads == ["fake:0", "fake:0"]  # step 1, then between steps
    assert {w.model for w in ledger.resident()} == {"sst"}  # big evicted, as named
    clock.now += THINK_S
    with collect_runs() as runs:
        out = app.invoke(step("sentiment", "s2"))
    assert answer(out).content == "sst@fake:0"
    meta = tool_run(runs).extra["metadata"]
    assert meta["devsched.preloaded"] == [{"model": "sst", "device": "fake:0",
                                           "load_ms": 0.0}]
    assert meta["devsched.model_warm"] is True
    assert loaders["sst"].loads == ["fake:0", "fake:0"]  # warm: no load in the step
    report = node.history[-1]
    assert report.record is not None and report.record.loads == 0
    (load,) = report.record.extra[PRELOADS_KEY]  # type: ignore[misc]
    assert (load.model, load.device, load.evicted, load.used) == ("sst", "fake:0", ("big",),
                                                                  True)
    assert node.preload.loads == 1 and node.preload.used == 1 and node.preload.wasted == 0
    assert not ledger.problems and ledger.peak_mb <= 8000
    node.close()
    assert ledger.in_use_mb == 0.0 and not ledger.problems


def test_a_step_arriving_during_the_load_waits_for_it_and_the_model_loads_once():
    scheduler = Scripted("sst")
    app, node, clock, ledger, loaders = setup(scheduler)
    two_steps(app, node, clock)
    # the load between steps was asked for right after step 2: hold the next one
    assert node.preload is not None and node.preload.join(WAIT_S)
    scheduler.want = None
    node.close()  # both models out: the next load between steps starts cold
    assert ledger.in_use_mb == 0.0
    sst = loaders["sst"]
    sst.hold = threading.Event()
    scheduler.want = "sst"
    clock.now += THINK_S
    app.invoke(step("summarize", "b2"))  # loads big, then the load of sst starts
    assert sst.started.wait(WAIT_S)
    assert node.preload.running
    loads_before = len(sst.loads)
    done: list[Any] = []
    clock.now += THINK_S
    sst.arrived.clear()
    runner = threading.Thread(target=lambda: done.append(app.invoke(step("sentiment", "s3"))))
    runner.start()
    assert sst.arrived.wait(WAIT_S)  # the call runs while the load is held: it must wait
    assert not done
    sst.hold.set()
    runner.join(WAIT_S)
    assert done and answer(done[0]).content == "sst@fake:0"
    assert len(sst.loads) == loads_before  # the step waited for the load: one load
    record = node.history[-1].record
    assert record is not None and record.loads == 0
    assert node.preload.join(WAIT_S) and node.preload.used >= 1
    assert not ledger.problems and ledger.peak_mb <= 8000
    node.close()
    assert ledger.in_use_mb == 0.0 and not ledger.problems


def test_a_step_needing_the_room_a_load_holds_does_not_get_it():
    scheduler = Scripted("sst")
    app, node, clock, ledger, loaders = setup(scheduler)
    two_steps(app, node, clock)
    assert node.preload is not None and node.preload.join(WAIT_S)
    node.close()
    sst = loaders["sst"]
    sst.hold = threading.Event()
    clock.now += THINK_S
    app.invoke(step("summarize", "b2"))  # big loads; then sst's load evicts it and holds
    assert sst.started.wait(WAIT_S)
    clock.now += THINK_S
    scheduler.want = None
    big_loads = len(loaders["big"].loads)
    out = app.invoke(step("summarize", "b3"))  # 6,000 MB more cannot fit beside sst's pin
    assert answer(out).content == "big@cpu"
    record = node.history[-1].record
    assert record is not None and record.calls[0].fallback == "oom"
    assert len(loaders["big"].loads) == big_loads + 1
    sst.hold.set()
    assert node.preload.join(WAIT_S)
    assert not ledger.problems and ledger.peak_mb <= 8000
    node.close()
    assert ledger.in_use_mb == 0.0 and not ledger.problems


def test_close_during_a_load_waits_for_it_and_the_ledger_returns_to_zero():
    scheduler = Scripted("sst")
    app, node, clock, ledger, loaders = setup(scheduler)
    sst = loaders["sst"]
    app.invoke(step("sentiment", "s1"))
    clock.now += THINK_S
    sst.hold = threading.Event()
    app.invoke(step("summarize", "b1"))
    assert sst.started.wait(WAIT_S)
    assert ledger.is_resident("sst")  # reserved before its loader returns
    closer = threading.Thread(target=node.close)
    closer.start()
    sst.hold.set()
    closer.join(WAIT_S)
    assert not closer.is_alive()
    assert node.preload is not None and not node.preload.running
    assert ledger.in_use_mb == 0.0 and not ledger.problems
    assert node.preload.wasted == 1  # loaded, never used


def test_a_host_side_load_between_steps():
    scheduler = Scripted("sst", side="cpu")
    app, node, clock, ledger, loaders = setup(scheduler)
    two_steps(app, node, clock)
    assert node.preload is not None and node.preload.join(WAIT_S)
    assert loaders["sst"].loads[-1] == "cpu"
    assert node.backend.models.holds("sst", "cpu")  # type: ignore[attr-defined]
    node.close()
    assert ledger.in_use_mb == 0.0


def test_preload_off_runs_no_background_load():
    scheduler = Scripted("sst")
    app, node, clock, ledger, loaders = setup(scheduler, preload=False)
    assert node.preload is None
    two_steps(app, node, clock)
    clock.now += THINK_S
    app.invoke(step("sentiment", "s2"))
    assert scheduler.asked == []
    assert loaders["sst"].loads == ["fake:0", "fake:0"]  # both in a step
    assert node.history[-1].record is not None and node.history[-1].record.loads == 1
    assert PRELOADS_KEY not in node.history[-1].record.extra
    node.close()
    assert ledger.in_use_mb == 0.0


def test_no_load_between_steps_without_think_time():
    scheduler = Scripted("sst")
    app, node, clock, _ledger, _loaders = setup(scheduler)
    app.invoke(step("sentiment", "s1"))
    clock.now += MIN_IDLE_MS / 2000.0  # a program driving the graph in a loop
    app.invoke(step("summarize", "b1"))
    assert scheduler.asked == [] and node.preload is not None and not node.preload.running
    node.close()


def test_a_preloaded_model_evicted_before_use_is_wasted_and_traced():
    scheduler = Scripted("sst")
    app, node, clock, ledger, _loaders = setup(scheduler)
    two_steps(app, node, clock)
    assert node.preload is not None and node.preload.join(WAIT_S)
    scheduler.want = None
    clock.now += THINK_S
    app.invoke(step("summarize", "b2"))  # evicts the preloaded sst before any use
    record = node.history[-1].record
    assert record is not None
    (load,) = record.extra[PRELOADS_KEY]  # type: ignore[misc]
    assert not load.used
    (wasted,) = record.extra[WASTED_KEY]  # type: ignore[misc]
    assert wasted.model == "sst" and node.preload.wasted == 1
    with collect_runs() as runs:  # the next step's traced run says which was wasted
        clock.now += THINK_S
        app.invoke(step("summarize", "b3"))
    meta = tool_run(runs).extra["metadata"]
    assert meta["devsched.preloads_wasted"] == ["sst"]
    node.close()
    assert ledger.in_use_mb == 0.0


async def test_async_steps_load_between_steps_too():
    scheduler = Scripted("sst")
    app, node, clock, ledger, _loaders = setup(scheduler)
    await app.ainvoke(step("sentiment", "s1"))
    clock.now += THINK_S
    await app.ainvoke(step("summarize", "b1"))
    assert node.preload is not None
    assert await asyncio.to_thread(node.preload.join, WAIT_S)
    clock.now += THINK_S
    await app.ainvoke(step("sentiment", "s2"))
    assert node.history[-1].record is not None and node.history[-1].record.loads == 0
    node.close()
    assert ledger.in_use_mb == 0.0


@pytest.mark.parametrize("scheduler", ["heft", "static"])
def test_schedulers_without_preloads_get_none(scheduler):
    _app, node, _clock, _ledger, _loaders = setup(scheduler)
    assert node.preload is None
    node.close()


class Timed:
    """The new user's app on a fake clock the tools and loaders move by their true times:
    the default monitor measures exact figures (what the clock says, never the machine)."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.loads: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def advance(self, ms: float) -> None:
        with self.lock:
            self.clock.now += ms / 1000.0

    def model(self, name: str, weights_mb: float, gpu_ms: float,
              cpu_ms: float) -> ResidentModel[str]:
        def load(device: str) -> str:
            self.loads.append((name, device))
            self.advance(cpu_ms if device == "cpu" else gpu_ms)
            return device

        return ResidentModel(name, load, weights_mb=weights_mb)

    def tool(self, name: str, model: ResidentModel[str], cpu_ms: float, gpu_ms: float,
             load_gpu_ms: float, load_cpu_ms: float) -> BaseTool:
        @device_hints(**model.hints(vram_mb=300, profile={"cpu_ms": cpu_ms, "gpu_ms": gpu_ms},
                                    load_ms={"gpu_ms": load_gpu_ms, "cpu_ms": load_cpu_ms}))
        @tool(name)
        def run(text: str) -> str:
            """Run the model."""
            device = model.get()
            self.advance(cpu_ms if device == "cpu" else gpu_ms)
            return device

        return run


def test_the_default_monitor_loads_the_model_every_step_uses_between_steps():
    """A 6 GB model every step calls (120 ms a call on the CPU, 8 ms warm on the GPU, an
    800 ms GPU load), and a declared OCR model not used yet: with 3 s of think time, the
    default scheduler loads each between two steps and the step after finds it warm."""
    app_ = Timed()
    sst = app_.model("sst", 6000, gpu_ms=800, cpu_ms=300)
    ocr = app_.model("ocr", 2000, gpu_ms=500, cpu_ms=200)
    tools = [app_.tool("sentiment", sst, 120, 8, 800, 300),
             app_.tool("read", ocr, 200, 10, 500, 200)]
    backend = LocalBackend(gpu=GpuConfig(16000, device="fake:0"), clock=app_.clock)
    node = DeviceToolNode(tools, backend=backend)  # the default scheduler: monitor
    assert node.preload is not None
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    for i, name in enumerate(["sentiment"] * 3 + ["read"]):
        graph.invoke(step(name, f"c{i}"))
        assert node.preload.join(WAIT_S)
        app_.advance(THINK_S * 1000)
    records = [r.record for r in node.history]
    assert all(r is not None for r in records)
    steps = [[(c.device, c.loaded) for c in r.calls] for r in records]  # type: ignore[union-attr]
    assert steps[2] == [("fake:0", False)] and steps[3] == [("fake:0", False)]  # warm
    assert [(b.model, b.used) for r in records[2:]  # type: ignore[union-attr]
            for b in r.extra.get(PRELOADS_KEY, ())] == [("sst", True), ("ocr", True)]
    # both between steps: a load the think time holds is never started beside a step
    assert not any(h.decision.background for h in node.history)
    assert app_.loads.count(("sst", "fake:0")) == 1 and app_.loads.count(("ocr", "fake:0")) == 1
    assert node.preload.loads == 2 and node.preload.used == 2 and node.preload.wasted == 0
    assert node.preload.saved_ms == pytest.approx(1300.0)
    node.close()
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0.0


class Beside(Scripted):
    """Every call on the CPU, the decision naming ``want``'s load beside the step while it
    is not resident; no loads between steps."""

    name = "beside"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        if view.device.warm(self.want or "", "gpu"):
            return self._decision(dict.fromkeys(batch.call_ids, "gpu_now"), "warm")
        return dataclasses.replace(
            self._decision(dict.fromkeys(batch.call_ids, "cpu"), "cpu, loading beside"),
            background=(Preload(self.want or "", 0, 800.0, 100.0),))

    def preloads(self, device: DeviceState, idle_ms: float) -> list[Preload]:
        self.asked.append(idle_ms)
        return []


def test_a_load_started_beside_a_cpu_step_makes_the_next_step_warm_without_think_time():
    """A decision's background load runs during its step (the step on the CPU does not wait
    for it); with steps back to back, the next one finds the model warm on the GPU."""
    scheduler = Beside("sst")
    app, node, _clock, ledger, loaders = setup(scheduler)
    sst = loaders["sst"]
    assert answer(app.invoke(step("sentiment", "s1"))).content == "sst@cpu"
    assert node.preload is not None and node.preload.join(WAIT_S)
    assert sorted(sst.loads) == ["cpu", "fake:0"]  # the step's own (host) load; the one beside
    assert scheduler.asked == []  # back to back: no load between steps was asked for
    assert answer(app.invoke(step("sentiment", "s2"))).content == "sst@fake:0"
    assert sorted(sst.loads) == ["cpu", "fake:0"]  # warm: no load in the step
    first, second = (r.record for r in node.history)
    assert first is not None and second is not None and second.loads == 0
    (load,) = first.extra[PRELOADS_KEY]  # type: ignore[misc]  # started with the first step
    assert (load.model, load.device, load.used) == ("sst", "fake:0", True)  # used in the next
    assert not ledger.problems and ledger.peak_mb <= 8000
    node.close()
    assert ledger.in_use_mb == 0.0 and not ledger.problems
