"""Resident models through the node: weights accounted in the ledger, LRU eviction never of a
model in use, queued calls waiting for the room eviction makes, and zero after close.

The GPU is a declared `GpuConfig` (no CUDA): tools receive the device string and their
`ResidentModel` loads a stand-in object there; the ledger is the real one.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend, ResidentModel, device_hints
from langgraph_devsched._dev.stress.probe_models import CheckedLedger
from langgraph_devsched.models import ModelCache
from langgraph_devsched.schedulers import Batch, Decision, SchedulerView
from langgraph_devsched.schedulers.base import SchedulerBase

WAIT_S = 10.0


class Fixed(SchedulerBase):
    """Places every call by its tool name: ``{tool: option}``, default gpu_queued."""

    name = "fixed"

    def __init__(self, options: dict[str, str] | None = None) -> None:
        self.options = options or {}

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision(
            {c.call_id: self.options.get(c.tool, "gpu_queued") for c in batch.calls},
            "fixed")


class Loads:
    """Records loads and releases of stand-in models."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, str]] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

    def handle(self, name: str, weights_mb: float, **kw: Any) -> ResidentModel[str]:
        def load(device: str) -> str:
            with self.lock:
                self.loaded.append((name, device))
            return f"{name}@{device}"

        def release(instance: str) -> None:
            with self.lock:
                self.released.append(instance)

        return ResidentModel(name, load, weights_mb=weights_mb, release=release, **kw)


def model_tool(name: str, model: ResidentModel[str], vram_mb: float,
               gate: threading.Event | None = None, **hints: Any) -> BaseTool:
    @device_hints(**model.hints(vram_mb=vram_mb, **hints))
    @tool(name)
    def run(text: str) -> str:
        """Run the model."""
        instance = model.get()
        if gate is not None:
            assert gate.wait(WAIT_S)
        return instance

    return run


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*names: str) -> dict[str, Any]:
    calls = [{"name": n, "args": {"text": str(i)}, "id": f"{n}-{i}"} for i, n in enumerate(names)]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def answers(result: dict[str, Any]) -> dict[str, str]:
    return {m.tool_call_id: str(m.content) for m in result["messages"]
            if isinstance(m, ToolMessage)}


def test_a_model_loads_once_stays_resident_and_is_accounted_apart_from_working_memory() -> None:
    loads = Loads()
    asr = loads.handle("asr", 2400)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([model_tool("transcribe", asr, 500)], backend=backend,
                          scheduler=Fixed())
    graph = graph_of(node)
    for _ in range(3):
        assert answers(graph.invoke(step("transcribe"))) == {"transcribe-0": "asr@fake:0"}
    ledger = backend.ledger
    assert ledger is not None
    assert loads.loaded == [("asr", "fake:0")]  # one load, then warm hits
    assert ledger.weights_mb == 2400 and ledger.working_mb == 0 and ledger.in_use_mb == 2400
    first, second = (r.record.calls[0] for r in list(node.history)[:2])
    assert first.loaded and first.model == "asr" and first.load_ms >= 0
    assert not second.loaded and second.model == "asr"
    state = backend.device_state()
    assert state.warm("asr", "gpu") and not state.warm("asr", "cpu")
    node.close()
    assert ledger.in_use_mb == 0 and ledger.weights_mb == 0
    assert loads.released == ["asr@fake:0"]


def test_an_admission_evicts_the_least_recently_used_idle_model() -> None:
    loads = Loads()
    a, b, c = (loads.handle(n, 3000) for n in "abc")
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([model_tool(f"t{m.name}", m, 500) for m in (a, b, c)],
                          backend=backend, scheduler=Fixed())
    graph = graph_of(node)
    graph.invoke(step("ta"))
    graph.invoke(step("tb"))
    graph.invoke(step("ta"))  # a is now more recent than b
    graph.invoke(step("tc"))  # 3 x 3000 + 500 > 8000: b (least recent) goes
    ledger = backend.ledger
    assert ledger is not None
    assert [w.model for w in ledger.resident()] == ["a", "c"]
    assert loads.released == ["b@fake:0"]
    record = node.history[-1].record.calls[0]
    assert record.evicted == ("b",) and record.loaded


def test_a_queued_call_waits_for_a_model_in_use_then_evicts_it() -> None:
    loads = Loads()
    a, b = loads.handle("a", 5000), loads.handle("b", 5000)
    gate = threading.Event()
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    # small shares: only the memory (a's weights, in use) keeps tb out
    node = DeviceToolNode([model_tool("ta", a, 500, gate, gpu_share=0.3),
                           model_tool("tb", b, 500, gpu_share=0.3)],
                          backend=backend, scheduler=Fixed())
    graph = graph_of(node)
    ledger = backend.ledger
    assert ledger is not None
    seen: list[float] = []

    async def main() -> dict[str, Any]:
        run = asyncio.ensure_future(graph.ainvoke(step("ta", "tb")))
        for _ in range(500):  # until tb queues behind the running ta
            if ledger.queued == 1:
                break
            await asyncio.sleep(0.01)
        seen.append(ledger.in_use_mb)
        assert [w.model for w in ledger.resident()] == ["a"]  # never evicted while in use
        gate.set()
        return await run

    out = answers(asyncio.run(main()))
    assert out == {"ta-0": "a@fake:0", "tb-1": "b@fake:0"}
    assert seen == [5500.0]
    assert [w.model for w in ledger.resident()] == ["b"] and loads.released == ["a@fake:0"]
    assert ledger.peak_mb <= 8000


def test_gpu_now_without_room_falls_back_and_loads_a_host_copy() -> None:
    loads = Loads()
    a, b = loads.handle("a", 5000), loads.handle("b", 5000)
    gate = threading.Event()
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([model_tool("ta", a, 500, gate), model_tool("tb", b, 500)],
                          backend=backend, scheduler=Fixed({"tb": "gpu_now"}))
    graph = graph_of(node)

    async def main() -> dict[str, Any]:
        run = asyncio.ensure_future(graph.ainvoke(step("ta", "tb")))
        for _ in range(500):
            if ("b", "cpu") in loads.loaded:
                break
            await asyncio.sleep(0.01)
        gate.set()
        return await run

    out = answers(asyncio.run(main()))
    assert out == {"ta-0": "a@fake:0", "tb-1": "b@cpu"}
    record = node.history[-1].record.by_id()["tb-1"]
    assert record.fallback == "oom" and record.device == "cpu" and record.loaded
    assert backend.device_state().warm("b", "cpu")


def test_weights_a_tool_keeps_its_own_way_are_never_evicted() -> None:
    """Hints that declare weights for a tool that does not use a handle: the ledger cannot
    free them, so it keeps them (and the next model that does not fit goes to the CPU)."""

    @device_hints(model="own", weights_mb=6000, vram_mb=500)
    @tool
    def own(text: str) -> str:
        """Uses a model loaded its own way."""
        return "own"

    loads = Loads()
    b = loads.handle("b", 3000)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([own, model_tool("tb", b, 500)], backend=backend,
                          scheduler=Fixed({"tb": "gpu_now"}))
    graph = graph_of(node)
    graph.invoke(step("own"))
    assert answers(graph.invoke(step("tb"))) == {"tb-0": "b@cpu"}
    ledger = backend.ledger
    assert ledger is not None
    assert [w.model for w in ledger.resident()] == ["own"] and ledger.resident()[0].keep_warm
    node.close()
    assert ledger.in_use_mb == 0


def undeclared_reader(ocr: ResidentModel[str]) -> BaseTool:
    """A tool that runs ``ocr`` while its hints name no model."""

    @device_hints(vram_mb=300)
    @tool
    def read(text: str) -> str:
        """OCR without a model hint."""
        return ocr.get()

    return read


def test_a_model_the_hints_do_not_declare_is_reserved_when_it_loads() -> None:
    loads = Loads()
    ocr = loads.handle("ocr", 1500)

    read = undeclared_reader(ocr)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([read], backend=backend, scheduler=Fixed())
    graph = graph_of(node)
    assert answers(graph.invoke(step("read"))) == {"read-0": "ocr@fake:0"}
    ledger = backend.ledger
    assert ledger is not None
    assert ledger.weights_mb == 1500 and ledger.working_mb == 0
    assert node.history[-1].record.calls[0].loaded


def test_outside_the_node_get_loads_on_the_current_device() -> None:
    loads = Loads()
    m = loads.handle("solo", 10)
    assert m.get() == "solo@cpu" and m.get("cpu") == "solo@cpu"
    assert loads.loaded == [("solo", "cpu")]


def test_bad_handles_name_what_is_wrong() -> None:
    import pytest

    with pytest.raises(ValueError, match="non-empty name"):
        ResidentModel("", lambda d: d)
    with pytest.raises(ValueError, match="weights_mb must be >= 0"):
        ResidentModel("m", lambda d: d, weights_mb=-1)
    with pytest.raises(TypeError, match="load must be a callable"):
        ResidentModel("m", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_models"):
        ModelCache(max_models=0)


def test_host_copies_are_bounded() -> None:
    cache = ModelCache(max_models=3)
    handles = [ResidentModel(f"m{i}", lambda d, i=i: i) for i in range(10)]
    for h in handles:
        with cache.scope("cpu"):
            h.get()
    assert [w.model for w in cache.resident()] == ["m7", "m8", "m9"]


# -- the ledger invariant under random steps -----------------------------------------------
MODELS = {"a": 2500.0, "b": 3500.0, "c": 1500.0, "d": 4000.0}


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(
    st.lists(st.tuples(st.sampled_from(sorted(MODELS)),
                       st.sampled_from(["gpu_now", "gpu_queued", "cpu"])),
             min_size=1, max_size=5),
    min_size=1, max_size=6))
def test_the_ledger_is_weights_plus_working_memory_at_every_instant(
        steps: list[list[tuple[str, str]]]) -> None:
    loads = Loads()
    handles = {n: loads.handle(n, mb) for n, mb in MODELS.items()}
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    backend._detect()
    ledger = CheckedLedger(8000)  # checks weights + working memory at every grant/release
    backend._ledger = ledger
    backend.models.ledger = ledger
    tools = [model_tool(f"t{n}", h, 900) for n, h in handles.items()]
    for one in steps:
        options = {}
        for name, option in one:
            options[f"t{name}"] = option
        node = DeviceToolNode(tools, backend=backend, scheduler=Fixed(options))
        out = answers(asyncio.run(graph_of(node).ainvoke(step(*(f"t{n}" for n, _ in one)))))
        assert len(out) == len(one)  # every call answered once
        assert ledger.working_mb == 0  # at rest: resident weights only
        resident = {w.model for w in ledger.resident()}
        assert ledger.in_use_mb == sum(MODELS[m] for m in resident)
    assert ledger.problems == []
    node.close()
    assert ledger.in_use_mb == 0 and ledger.resident() == ()


def test_the_traced_tool_run_says_model_warmth_and_evictions() -> None:
    from langchain_core.tracers.context import collect_runs

    from langgraph_devsched.tracing import decision_runs

    loads = Loads()
    a, b = loads.handle("a", 5000), loads.handle("b", 5000)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([model_tool("ta", a, 500), model_tool("tb", b, 500)],
                          backend=backend, scheduler=Fixed())
    graph = graph_of(node)
    metas = []
    for name in ("ta", "ta", "tb"):
        with collect_runs() as cb:
            graph.invoke(step(name))
        (run,) = decision_runs(cb.traced_runs)
        metas.append({k: v for k, v in run.extra["metadata"].items()
                      if k in ("devsched.model", "devsched.model_warm", "devsched.evicted")})
    assert metas == [
        {"devsched.model": "a", "devsched.model_warm": False},
        {"devsched.model": "a", "devsched.model_warm": True},
        {"devsched.model": "b", "devsched.model_warm": False, "devsched.evicted": ["a"]},
    ]


def test_the_agentic_sub_agent_sees_which_models_are_warm() -> None:
    import json

    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.residency import WarmModel
    from langgraph_devsched.schedulers.agentic.observations import observation_tools
    from langgraph_devsched.telemetry import DeviceState

    batch = Batch.of([
        ("c1", "caption", ToolDeviceSpec(model="blip", weights_mb=990, vram_mb=600)),
        ("c2", "embed", ToolDeviceSpec(vram_mb=300)),
    ])
    device = DeviceState(True, "gpu", 8000, 1500, 0.0, 8,
                         resident=(WarmModel("blip", 990.0, "gpu"),))
    tools = {t.name: t for t in observation_tools(batch, SchedulerView(device))}
    calls = json.loads(tools["step_calls"].invoke({}))
    assert calls["c1"]["warm"] == ["gpu"]
    assert calls["c1"]["weights_mb"] == 990 and calls["c1"]["model"] == "blip"
    assert "warm" not in calls["c2"] and "weights_mb" not in calls["c2"]
    state = json.loads(tools["device_state"].invoke({}))
    assert state["resident_models"] == [{"model": "blip", "side": "gpu", "weights_mb": 990}]


def test_a_remembered_decision_is_not_reused_once_the_warm_models_changed() -> None:
    from langgraph_devsched.residency import WarmModel
    from langgraph_devsched.schedulers.policy.reuse import telemetry_bucket
    from langgraph_devsched.telemetry import DeviceState

    cold = DeviceState(True, "gpu", 8000, 0, 0.0, 8)
    warm = DeviceState(True, "gpu", 8000, 0, 0.0, 8, resident=(WarmModel("blip", 10.0),))
    assert telemetry_bucket(cold) != telemetry_bucket(warm)
    assert telemetry_bucket(warm) == telemetry_bucket(
        DeviceState(True, "gpu", 8000, 0, 0.0, 8, resident=(WarmModel("blip", 10.0, in_use=1),)))


def test_telemetry_vram_in_use_leaves_out_the_resident_weights_it_lists(
        monkeypatch: Any) -> None:
    """On CUDA, memory in use (NVML/torch) counts this process's resident weights too; the
    device state lists them in ``resident`` and leaves them out of ``vram_used_mb``, so that
    a scheduler's twin does not count them twice."""
    from langgraph_devsched.executors import local
    from langgraph_devsched.telemetry import DeviceState

    monkeypatch.setattr(local, "cuda_status", lambda index=0: (True, None))
    monkeypatch.setattr(local, "local_device_state", lambda index=0, budget=None: DeviceState(
        True, "H200", 8000, 3000, 0.2, 16))
    loads = Loads()
    backend = LocalBackend(gpu=GpuConfig(8000, device="cuda:0"), telemetry_ttl_s=0.0)
    node = DeviceToolNode([model_tool("ta", loads.handle("a", 2000), 500)], backend=backend,
                          scheduler=Fixed())
    graph_of(node).invoke(step("ta"))
    state = backend.device_state()
    assert state.warm("a", "gpu") and state.vram_used_mb == 1000.0
    node.close()
    assert backend.device_state().vram_used_mb == 3000.0


def test_a_model_the_hints_do_not_name_is_pinned_while_its_call_runs() -> None:
    """Old: an undeclared model found resident was used unpinned, so another admission could
    evict it under the running call; and its weights took a GPU slot (max_active), so with
    ``gpu_concurrency=1`` it never found room."""
    loads = Loads()
    ocr, b = loads.handle("ocr", 5000), loads.handle("b", 5000)
    gate = threading.Event()
    reading = threading.Event()

    @device_hints(vram_mb=300, gpu_share=0.3)
    @tool
    def read(text: str) -> str:
        """OCR without a model hint."""
        instance = ocr.get()
        reading.set()
        assert gate.wait(WAIT_S)
        return instance

    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"), gpu_concurrency=2)
    node = DeviceToolNode([read, model_tool("tb", b, 300, gpu_share=0.3)], backend=backend,
                          scheduler=Fixed())
    graph = graph_of(node)
    gate.set()
    assert answers(graph.invoke(step("read"))) == {"read-0": "ocr@fake:0"}  # resident, idle
    gate.clear()
    ledger = backend.ledger
    assert ledger is not None

    async def main() -> dict[str, Any]:
        run = asyncio.ensure_future(graph.ainvoke(step("read", "tb")))
        for _ in range(500):
            if reading.is_set() and ledger.queued == 1:
                break
            await asyncio.sleep(0.01)
        assert [(w.model, w.in_use) for w in ledger.resident()] == [("ocr", 1)]
        gate.set()
        return await run

    out = answers(asyncio.run(main()))
    assert out == {"read-0": "ocr@fake:0", "tb-1": "b@fake:0"}
    assert loads.released == ["ocr@fake:0"]  # evicted once its call was done


def test_an_undeclared_model_loads_on_a_gpu_with_one_slot() -> None:
    loads = Loads()
    ocr = loads.handle("ocr", 1500)

    read = undeclared_reader(ocr)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"), gpu_concurrency=1)
    node = DeviceToolNode([read], backend=backend, scheduler=Fixed())
    assert answers(graph_of(node).invoke(step("read"))) == {"read-0": "ocr@fake:0"}


def test_an_instance_cached_from_before_its_eviction_is_loaded_again() -> None:
    """The ledger evicts an idle model at an admission and the cache then frees it; a call
    whose admission reserved the weights anew never gets the old instance."""
    loads = Loads()
    a = loads.handle("a", 5000)
    backend = LocalBackend(gpu=GpuConfig(8000, device="fake:0"))
    node = DeviceToolNode([model_tool("ta", a, 500)], backend=backend, scheduler=Fixed())
    graph = graph_of(node)
    graph.invoke(step("ta"))
    ledger = backend.ledger
    assert ledger is not None and ledger.evict("a")  # gone from the ledger, still cached
    graph.invoke(step("ta"))
    assert loads.loaded == [("a", "fake:0"), ("a", "fake:0")]
    assert loads.released == ["a@fake:0"] and node.history[-1].record.calls[0].loaded
