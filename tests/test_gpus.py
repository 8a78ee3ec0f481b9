"""Several GPUs on one machine: the placement names its GPU (the decision's, else the one
default rule), the scheduler sees every device, and the simulated testbed runs k GPUs, each
with its own ledger, resident weights, speed and contention. One GPU is today's path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, current_device
from langgraph_devsched._node.planning import checked_decision
from langgraph_devsched.executors import SimulatedBackend
from langgraph_devsched.gpus import GpuCall, check_gpus, default_gpus, gpu_index
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.telemetry import DeviceState, GpuDevice
from langgraph_devsched.testbed import BackgroundLoad, GpuSpec, SimulatedTestbed, ToolParams

OCR = ToolParams(cpu_ms=400, gpu_ms=100, vram_mb=2000)
LLM = ToolParams(cpu_ms=5000, gpu_ms=200, vram_mb=1000, weights_mb=16000, load_gpu_ms=3000)
PARAMS = {"ocr": OCR, "llm": LLM}


def two_gpus(**kw: Any) -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, gpus=[GpuSpec(vram_mb=24000, resident=("llm",)),
                                          GpuSpec(vram_mb=24000, speed=2.0)], **kw)


# -- the default rule ---------------------------------------------------------------------------
def test_the_default_rule_prefers_the_warm_gpu_then_the_most_free_then_the_lowest_index() -> None:
    warm0 = GpuDevice(0, "a", 24000, resident=(WarmModel("llm", 16000),))
    devices = (warm0, GpuDevice(1, "b", 24000), GpuDevice(2, "c", 24000))
    got = default_gpus([GpuCall("l", "llm", 900, 16000), GpuCall("e", "emb", 500),
                        GpuCall("f", "emb", 500), GpuCall("g", None, 100)], devices)
    # warm model first; then most free (1 and 2 tie: lowest index); emb is then warm on 1;
    # the model-less call goes where most is free (2)
    assert got == {"l": 0, "e": 1, "f": 1, "g": 2}


def test_the_default_rule_spreads_a_step_by_what_its_earlier_calls_took() -> None:
    devices = (GpuDevice(0, "a", 8000), GpuDevice(1, "b", 8000, used_mb=1000))
    got = default_gpus([GpuCall(f"c{i}", None, 3000) for i in range(3)], devices)
    assert got == {"c0": 0, "c1": 1, "c2": 0}


def test_a_named_gpu_wins_and_one_gpu_is_always_index_0() -> None:
    devices = (GpuDevice(0, "a", 8000), GpuDevice(1, "b", 80000))
    assert default_gpus([GpuCall("c", None, 10, gpu=0)], devices) == {"c": 0}
    assert default_gpus([GpuCall("c", None, 10)], devices) == {"c": 1}
    assert default_gpus([GpuCall("c", "m", 10)], devices[:1]) == {"c": 0}
    assert default_gpus([GpuCall("c", "m", 10)], ()) == {"c": 0}
    assert (gpu_index("cuda:3"), gpu_index("cuda"), gpu_index("cpu"), gpu_index("none")) == (
        3, 0, None, None)


# -- what a scheduler sees ----------------------------------------------------------------------
def test_one_gpu_state_shows_one_device_and_a_cpu_only_machine_none() -> None:
    state = DeviceState(True, "L4", 24000, 2000, 0.25, 8,
                        resident=(WarmModel("llm", 8000), WarmModel("ocr", 900, "cpu")))
    (gpu,) = SchedulerView(state).devices
    assert (gpu.index, gpu.device, gpu.name, gpu.budget_mb, gpu.free_mb, gpu.utilization) == (
        0, "cuda:0", "L4", 24000, 14000.0, 0.25)
    assert gpu.warm("llm") and not gpu.warm("ocr")
    assert DeviceState.cpu_only("none here").devices == ()


def test_the_testbed_shows_each_gpu_with_its_budget_speed_background_and_weights() -> None:
    bed = SimulatedTestbed(PARAMS, gpus=[
        {"vram_mb": 24000, "name": "A10", "resident": ["llm"]},
        {"vram_mb": 80000, "speed": 3.0, "name": "H100",
         "background": {"vram_mb": 5000, "gpu_share": 0.5}}])
    a, b = bed.device_state().devices
    assert (a.name, a.budget_mb, a.free_mb, a.warm("llm"), a.speed) == (
        "A10", 24000, 8000.0, True, 1.0)
    assert (b.name, b.budget_mb, b.used_mb, b.utilization, b.free_mb, b.speed) == (
        "H100", 80000, 5000, 0.5, 75000.0, 3.0)
    assert bed.device_state().vram_budget_mb == 24000  # the flat fields are GPU 0's


def test_a_decision_naming_a_gpu_that_does_not_exist_falls_back_to_the_rule() -> None:
    spec = ToolDeviceSpec(vram_mb=100)
    batch = Batch.of([("a", "ocr", spec), ("b", "ocr", spec), ("c", "ocr", spec)])
    devices = (GpuDevice(0, "a", 8000), GpuDevice(1, "b", 8000))
    raw = Decision({"a": "gpu_now", "b": "gpu_now", "c": "cpu"}, gpus={"a": 1, "b": 7, "c": 1})
    decision, fallbacks = checked_decision(batch, raw, True, "x", devices)
    assert dict(decision.gpus) == {"a": 1}  # b: no GPU 7; c runs on the CPU
    assert fallbacks == {"b": "invalid_decision"}
    assert check_gpus({"a": True}, ["a"], devices) == ({}, ("a",))  # a bool is no index
    same, none = checked_decision(batch, Decision(dict(raw.mapping)), True, "x", devices[:1])
    assert dict(same.gpus) == {} and none == {}


# -- the simulated testbed with k GPUs ---------------------------------------------------------
def test_each_gpu_has_its_own_ledger_speed_and_contention() -> None:
    bed = SimulatedTestbed({"ocr": OCR}, gpus=[{"vram_mb": 3000}, {"vram_mb": 3000, "speed": 2}])
    calls = [("a", "ocr", "gpu_now"), ("b", "ocr", "gpu_now")]
    on_one = bed.simulate(calls, gpus={"a": 0, "b": 0})
    assert on_one.by_id()["b"].fallback == "oom"  # 4000 MB do not fit one 3000 MB GPU
    spread = bed.simulate(calls, gpus={"a": 0, "b": 1}).by_id()
    assert (spread["a"].device, spread["a"].end_ms) == ("cuda:0", 100.0)
    assert (spread["b"].device, spread["b"].end_ms) == ("cuda:1", 50.0)  # twice as fast
    assert spread["a"].gpu_peers == spread["b"].gpu_peers == 0  # no contention across GPUs


def test_a_gpu_busy_with_another_process_is_slower_and_fuller() -> None:
    bed = SimulatedTestbed({"ocr": OCR}, gpus=[
        {"vram_mb": 8000}, {"vram_mb": 8000, "background": {"vram_mb": 7000, "gpu_share": 1.0}}])
    quiet, busy = (bed.simulate([("a", "ocr", "gpu_now")], gpus={"a": g}).calls[0]
                   for g in (0, 1))
    assert quiet.end_ms == 100.0
    assert (busy.fallback, busy.device) == ("oom", "cpu")  # 2000 MB do not fit the 1000 left
    share = SimulatedTestbed({"ocr": OCR}, gpus=[
        {"vram_mb": 8000}, {"vram_mb": 8000, "background": {"gpu_share": 1.0}}])
    assert share.simulate([("a", "ocr", "gpu_now")], gpus={"a": 1}).calls[0].end_ms == 200.0


def test_a_model_warm_on_one_gpu_is_cold_on_the_other_and_eviction_is_per_gpu() -> None:
    bed = two_gpus()
    warm = bed.run_step([("a", "llm", "gpu_now")], gpus={"a": 0}).calls[0]
    assert (warm.device, warm.loaded, warm.end_ms) == ("cuda:0", False, 200.0)
    cold = bed.run_step([("a", "llm", "gpu_now")], gpus={"a": 1}).calls[0]
    assert (cold.device, cold.loaded, cold.end_ms) == ("cuda:1", True, 3100.0)
    a, b = bed.device_state().devices
    assert a.warm("llm") and b.warm("llm")
    big = SimulatedTestbed({"llm": LLM, "vlm": LLM.model_copy(update={"model": "vlm"})},
                           gpus=[GpuSpec(vram_mb=24000, resident=("llm",)),
                                 GpuSpec(vram_mb=24000, resident=("llm",))])
    rec = big.run_step([("v", "vlm", "gpu_now")], gpus={"v": 1}).calls[0]
    assert rec.evicted == ("llm",)
    a, b = big.device_state().devices
    assert [w.model for w in a.resident] == ["llm"] and [w.model for w in b.resident] == ["vlm"]


def test_one_gpu_in_the_list_is_the_vram_budget_shorthand() -> None:
    calls = [("a", "ocr", "gpu_queued"), ("b", "ocr", "gpu_queued"), ("c", "llm", "gpu_now")]
    short = SimulatedTestbed(PARAMS, vram_budget_mb=20000, noise=0.1, seed=3,
                             background=BackgroundLoad(vram_mb=500, gpu_share=0.3))
    listed = SimulatedTestbed(PARAMS, gpus=[GpuSpec(vram_mb=20000, background=BackgroundLoad(
        vram_mb=500, gpu_share=0.3))], noise=0.1, seed=3)
    for _ in range(3):
        assert short.run_step(calls) == listed.run_step(calls)
    assert short.device_state() == listed.device_state()


def test_bad_gpu_lists_and_indices_are_named() -> None:
    with pytest.raises(ValueError, match=r"vram_budget_mb .* or gpus"):
        SimulatedTestbed(PARAMS)
    with pytest.raises(ValueError, match="not both"):
        SimulatedTestbed(PARAMS, vram_budget_mb=8000, gpus=[{"vram_mb": 8000}])
    with pytest.raises(ValueError, match=r"gpus\[i\].background"):
        SimulatedTestbed(PARAMS, gpus=[{"vram_mb": 8000}], background=BackgroundLoad(vram_mb=1))
    with pytest.raises(ValueError, match=r"gpus\[1\].resident: 16000 MB"):
        SimulatedTestbed(PARAMS, gpus=[{"vram_mb": 8000}, {"vram_mb": 8000, "resident": ["llm"]}])
    with pytest.raises(ValueError, match=r"GPU 2 does not exist; valid: 0..1"):
        two_gpus().simulate([("a", "ocr", "gpu_now")], gpus={"a": 2})
    with pytest.raises(NotImplementedError, match="evaluates one GPU; this testbed has 2"):
        two_gpus().product_makespans(["ocr"], [["gpu_now"]])


# -- end to end: the node places on cuda:k ------------------------------------------------------
HINTS = {"ocr": {"vram_mb": 2000}, "llm": {"vram_mb": 1000, "weights_mb": 16000}}


@tool
def ocr(page: int) -> str:
    """Read a page."""
    return current_device("none")


@tool
def llm(prompt: str) -> str:
    """Answer a prompt."""
    return current_device("none")


class OnGpu(SchedulerBase):
    name = "on_gpu"

    def __init__(self, gpus: dict[str, int] | None = None) -> None:
        self.gpus = gpus or {}
        self.seen: list[tuple[GpuDevice, ...]] = []

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.seen.append(view.devices)
        return self._decision(dict.fromkeys(batch.call_ids, "gpu_now"), "gpu", gpus=self.gpus)


STEP = AIMessage("", tool_calls=[
    {"name": "ocr", "args": {"page": 1}, "id": "o"},
    {"name": "llm", "args": {"prompt": "hi"}, "id": "l"},
])


def answers(node: DeviceToolNode, mode: str) -> dict[str, Any]:
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    inputs = {"messages": [STEP]}
    out = graph.invoke(inputs) if mode == "sync" else asyncio.run(graph.ainvoke(inputs))
    return {m.tool_call_id: m.content for m in out["messages"][1:]}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_node_places_each_call_on_its_gpu_and_the_tool_sees_cuda_k(mode: str) -> None:
    scheduler = OnGpu({"o": 0, "l": 1})
    node = DeviceToolNode([ocr, llm], hints=HINTS, scheduler=scheduler,
                          backend=SimulatedBackend(two_gpus()))
    assert answers(node, mode) == {"o": "cuda:0", "l": "cuda:1"}
    report = node.history[-1]
    assert report.devices == {"o": "cuda:0", "l": "cuda:1"}
    assert dict(report.decision.gpus) == {"o": 0, "l": 1}
    assert report.record is not None and report.record.by_id()["l"].loaded  # cold on GPU 1
    assert [d.index for d in scheduler.seen[0]] == [0, 1]


def test_a_decision_that_names_no_gpu_gets_the_default_rule() -> None:
    node = DeviceToolNode([ocr, llm], hints=HINTS, scheduler=OnGpu(),
                          backend=SimulatedBackend(two_gpus()))
    # llm is warm on GPU 0; ocr has no model and GPU 1 has the most free VRAM
    assert answers(node, "sync") == {"o": "cuda:1", "l": "cuda:0"}


def test_with_one_gpu_nothing_names_a_gpu_and_every_call_is_on_cuda_0() -> None:
    bed = SimulatedTestbed(PARAMS, vram_budget_mb=24000, resident={"gpu": ["llm"]})
    node = DeviceToolNode([ocr, llm], hints=HINTS, scheduler=OnGpu(), backend=SimulatedBackend(bed))
    assert answers(node, "sync") == {"o": "cuda:0", "l": "cuda:0"}
    assert dict(node.history[-1].decision.gpus) == {}


# -- hints: pin a tool or a model to GPUs -------------------------------------------------------
def test_a_gpus_hint_is_validated_with_a_clear_error() -> None:
    from langgraph_devsched.hints import HintsError, validate_spec

    assert validate_spec("emb", {"gpus": [1, 0, 1]}).gpus == (0, 1)
    assert validate_spec("emb", {}).gpus is None  # any GPU
    for bad, said in (([], "non-empty list of GPU indices"), ([-1], "integers >= 0"),
                      ("0", "expected a list of GPU indices"), ([True], "integers >= 0")):
        with pytest.raises(HintsError, match=r"tool 'emb'[\s\S]*gpus: .*" + said):
            validate_spec("emb", {"gpus": bad})
    with pytest.raises(HintsError, match=r"gpus=\[0\] contradicts gpu_capable=False"):
        validate_spec("emb", {"gpus": [0], "gpu_capable": False})


def test_the_default_rule_keeps_a_pinned_call_on_its_gpus() -> None:
    devices = (GpuDevice(0, "a", 24000, resident=(WarmModel("emb", 500),)),
               GpuDevice(1, "b", 24000), GpuDevice(2, "c", 80000))
    got = default_gpus([GpuCall("e", "emb", 100, 500, allowed=(1,)),
                        GpuCall("f", None, 100, allowed=(0, 1)),
                        GpuCall("g", None, 100, allowed=(5,))], devices)
    # e: warm on 0 but pinned to 1 (it loads there: 23400 MB left); f: most free of 0 and 1
    # (23500 MB on 0), never 2; g: pinned to no GPU of this machine: any (most free: 2)
    assert got == {"e": 1, "f": 0, "g": 2}


def test_a_decision_against_a_pin_is_replaced_by_the_rule() -> None:
    pinned = ToolDeviceSpec(vram_mb=100, gpus=(1,))
    batch = Batch.of([("a", "emb", pinned), ("b", "emb", pinned)])
    devices = (GpuDevice(0, "a", 8000), GpuDevice(1, "b", 8000))
    raw = Decision({"a": "gpu_now", "b": "gpu_now"}, gpus={"a": 0, "b": 1})
    decision, fallbacks = checked_decision(batch, raw, True, "x", devices)
    assert dict(decision.gpus) == {"b": 1} and fallbacks == {"a": "invalid_decision"}


def test_an_embedding_model_pinned_away_does_not_evict_the_large_model() -> None:
    """Ollama #16391: a small embedding model kept evicting a large one; pinned to GPU 1 it
    leaves the LLM alone on GPU 0."""
    params = {"llm": LLM, "embed": ToolParams(cpu_ms=300, gpu_ms=20, vram_mb=500,
                                              weights_mb=7600, load_gpu_ms=800)}
    hints = {"llm": {"vram_mb": 1000, "weights_mb": 16000},
             "embed": {"vram_mb": 500, "weights_mb": 7600, "gpus": [1]}}

    @tool
    def embed(text: str) -> str:
        """Embed a text."""
        return current_device("none")

    bed = SimulatedTestbed(params, gpus=[GpuSpec(vram_mb=24000, resident=("llm",)),
                                         GpuSpec(vram_mb=12000)])
    node = DeviceToolNode([llm, embed], hints=hints, scheduler=OnGpu(),
                          backend=SimulatedBackend(bed))
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    step = AIMessage("", tool_calls=[{"name": "embed", "args": {"text": "a"}, "id": "e"},
                                     {"name": "llm", "args": {"prompt": "b"}, "id": "l"}])
    out = graph.invoke({"messages": [step]})
    assert {m.tool_call_id: m.content for m in out["messages"][1:]} == {
        "e": "cuda:1", "l": "cuda:0"}
    assert node.history[-1].record is not None
    assert node.history[-1].record.evictions == 0
    a, b = bed.device_state().devices
    assert a.warm("llm") and b.warm("embed")
    unpinned = SimulatedTestbed(params, vram_budget_mb=24000, resident={"gpu": ["llm"]})
    rec = unpinned.run_step([("e", "embed", "gpu_now")]).calls[0]
    assert rec.evicted == ("llm",)  # one GPU: the embedding model evicts the LLM
