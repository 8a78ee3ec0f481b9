"""Nothing lost with resident models, deadlines and queues (issue 23, classes 1-5).

A hostile user's checks through the public API, each failing on d7c8ce5: a deadline that
bounds the call's whole life (GPU queue, CPU slot, OOM rerun), a queue request that can never
be satisfied refused at once, weights counted while a threaded load outlives its call, no
resident entry without an instance, and `close()` that leaves a running call's model alone.
The GPU is a declared `GpuConfig` (no CUDA); waits are bounded by events, not by speed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

import pytest
import torch
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    StepReport,
    device_hints,
)
from langgraph_devsched.models import ResidentModel

WAIT_S = 20.0  # upper bound for events that should come at once; never reached when green


def graph_of(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*calls: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [AIMessage("", tool_calls=[
        {"name": n, "args": {"text": i}, "id": i} for n, i in calls])]}


def answers(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn`` in a daemon thread; the returned getter waits (bounded) for its result."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the getter
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()

    def result() -> Any:
        thread.join(WAIT_S)
        assert not thread.is_alive(), "not answered: it waited past its deadline"
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result


def invoke(node: DeviceToolNode, run: str, payload: dict[str, Any]) -> dict[str, ToolMessage]:
    graph = graph_of(node)
    if run == "invoke":
        return answers(graph.invoke(payload))
    return answers(asyncio.run(graph.ainvoke(payload)))


def eventually(check: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT_S
    while not check() and time.monotonic() < end:
        time.sleep(0.005)
    assert check()


# -- 1. the deadline is the call's whole life -----------------------------------------------------
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("held_by", ["vram", "gpu_concurrency"])
def test_a_call_queued_behind_a_timed_out_tool_is_answered_at_its_deadline(
        run: str, held_by: str) -> None:
    release = threading.Event()

    @device_hints(pinned="gpu_now", vram_mb=6000)
    @tool
    def stuck(text: str) -> str:
        """Hangs until released (its thread outlives its deadline, holding the GPU)."""
        release.wait(3 * WAIT_S)  # past the answer bound: only a deadline answers
        return "late"

    @device_hints(pinned="gpu_queued", vram_mb=4000 if held_by == "vram" else 100)
    @tool
    def queued(text: str) -> str:
        """Runs once admitted."""
        return "ran"

    backend = LocalBackend(gpu=GpuConfig(8000),
                           gpu_concurrency=1 if held_by == "gpu_concurrency" else None)
    reports: list[StepReport] = []
    node = DeviceToolNode([stuck, queued], backend=backend, call_timeout_s=0.3,
                          on_step=reports.append)
    try:
        first = invoke(node, run, step(("stuck", "s")))
        assert "timed out after 0.3 s" in str(first["s"].content)
        result = in_thread(lambda: invoke(node, run, step(("queued", "q"))))
        second = result()  # d7c8ce5: waits in the GPU queue until the stuck thread returns
        assert not release.is_set()
        assert second["q"].status == "error"
        assert str(second["q"].content) == str(first["s"].content).replace("'stuck'", "'queued'")
        record = reports[-1].record
        assert record is not None
        assert record.by_id()["q"].device == "none"
        assert (record.by_id()["q"].error or "").startswith("timeout")
    finally:
        release.set()
    assert backend.ledger is not None
    eventually(lambda: backend.ledger is not None and backend.ledger.in_use_mb == 0)


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_an_oom_rerun_on_the_cpu_gets_what_is_left_of_the_deadline(run: str) -> None:
    @device_hints(vram_mb=500, pinned="gpu_now")
    @tool
    def heavy(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Runs out of GPU memory after a while; the CPU takes as long."""
        time.sleep(0.6)
        if device.startswith("cuda"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return "cpu result"

    node = DeviceToolNode([heavy], backend=LocalBackend(gpu=GpuConfig(8000)), call_timeout_s=1.0)
    out = invoke(node, run, step(("heavy", "h")))
    # d7c8ce5: the rerun starts a fresh 1.0 s deadline and answers "cpu result" after 1.2 s
    assert out["h"].status == "error"
    assert "timed out after 1 s" in str(out["h"].content)


def test_a_cpu_slot_wait_is_bounded_by_the_deadline() -> None:
    release = threading.Event()

    @device_hints(pinned="cpu", timeout_s=0.3)
    @tool
    def busy(text: str) -> str:
        """Holds the only CPU worker until released."""
        release.wait(3 * WAIT_S)  # past the answer bound: only a deadline answers
        return "late"

    backend = LocalBackend(gpu=GpuConfig(8000), cpu_workers=1)
    node = DeviceToolNode([busy], backend=backend)
    try:
        invoke(node, "invoke", step(("busy", "a")))  # times out, its thread keeps the slot
        second = in_thread(lambda: invoke(node, "ainvoke", step(("busy", "b"))))()
        assert not release.is_set()
        assert "timed out after 0.3 s" in str(second["b"].content)
    finally:
        release.set()
    assert backend.cpu_slots is not None
    eventually(lambda: backend.cpu_slots is not None and backend.cpu_slots.in_use_mb == 0)


# -- 2. a queue request that can never be satisfied ----------------------------------------------
@pytest.mark.parametrize("kept_by", ["keep_warm", "own_loader"])
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_queued_call_that_kept_weights_leave_no_room_for_goes_to_the_cpu_at_once(
        kept_by: str, run: str) -> None:
    kept = ResidentModel("llm", load=lambda d: f"llm@{d}", weights_mb=5000,
                         keep_warm=kept_by == "keep_warm")

    @device_hints(**kept.hints(vram_mb=500), pinned="gpu_now")
    @tool
    def chat(text: str) -> str:
        """Uses the kept model (or, with its own loader, never asks the cache)."""
        return kept.get() if kept_by == "keep_warm" else "own weights"

    vision = ResidentModel("vlm", load=lambda d: f"vlm@{d}", weights_mb=3000)

    @device_hints(**vision.hints(vram_mb=500), pinned="gpu_queued")
    @tool
    def look(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Needs 3,500 MB beside the kept 5,000 on 8,000: never."""
        vision.get()
        return device

    @device_hints(vram_mb=100, pinned="gpu_queued")
    @tool
    def small(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Queued behind it."""
        return device

    backend = LocalBackend(gpu=GpuConfig(8000))
    reports: list[StepReport] = []
    node = DeviceToolNode([chat, look, small], backend=backend, on_step=reports.append)
    invoke(node, run, step(("chat", "c")))
    assert backend.ledger is not None and backend.ledger.weights_mb == 5000
    out = in_thread(lambda: invoke(node, run, step(("look", "l"), ("small", "s"))))()
    assert out["l"].content == "cpu" and out["s"].content == "cuda:0"
    record = reports[-1].record
    assert record is not None and record.by_id()["l"].fallback == "vram_over_budget"
    node.close()
    assert backend.ledger.in_use_mb == 0


def test_a_queued_request_that_becomes_unsatisfiable_leaves_the_head_of_the_queue() -> None:
    from langgraph_devsched.ledger import NeverFitsError, VramLedger, WeightsNeed

    errors: list[BaseException] = []
    ledger = VramLedger(8000)
    held = ledger.try_reserve(1000, need=WeightsNeed("llm", 5000))
    assert held is not None
    t = threading.Thread(target=lambda: _reserve_or_log(
        ledger, 1000, WeightsNeed("vlm", 2500), errors), daemon=True)
    t.start()
    eventually(lambda: ledger.queued == 1)
    ledger.keep("llm")  # 2500 + 1000 beside 5000 kept on 8000: never
    ledger.release(held)
    t.join(WAIT_S)
    assert not t.is_alive() and ledger.queued == 0
    assert len(errors) == 1 and isinstance(errors[0], NeverFitsError)
    assert "kept warm by 'llm'" in str(errors[0])


def _reserve_or_log(ledger: Any, mb: float, need: Any, errors: list[BaseException]) -> None:
    try:
        ledger.release(ledger.reserve(mb, need=need))
    except BaseException as exc:
        errors.append(exc)


# -- 3. weights counted while a threaded load outlives its call ------------------------------------
class Loader:
    """A model load that blocks until released; counts the live instances it made."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()
        self.live: set[str] = set()

    def load(self, device: str) -> str:
        self.started.set()
        self.go.wait(WAIT_S)
        self.live.add(device)
        return f"big@{device}"

    def release(self, instance: str) -> None:
        self.live.discard(instance.split("@")[1])


@pytest.mark.parametrize("ended_by", ["timeout", "cancel"])
def test_weights_a_threaded_load_holds_stay_counted_after_its_call_ends(ended_by: str) -> None:
    loader = Loader()
    big = ResidentModel("big", load=loader.load, weights_mb=5000, release=loader.release)

    @device_hints(**big.hints(vram_mb=100), pinned="gpu_now",
                  timeout_s=0.2 if ended_by == "timeout" else None)
    @tool
    async def describe(text: str) -> str:
        """Loads its model in a thread, the common pattern for a slow load."""
        return await asyncio.to_thread(big.get)

    other = ResidentModel("other", load=lambda d: f"other@{d}", weights_mb=6000)

    @device_hints(**other.hints(vram_mb=100), pinned="gpu_now")
    @tool
    def second(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """A 6,000 MB model that must not be admitted beside the loading 5,000."""
        other.get()
        return device

    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([describe, second], backend=backend)
    graph = graph_of(node)

    async def ended() -> None:
        task = asyncio.ensure_future(graph.ainvoke(step(("describe", "d"))))
        if ended_by == "cancel":
            await asyncio.to_thread(loader.started.wait, WAIT_S)
            task.cancel()
        with _suppress_cancel():
            await task

    loop = asyncio.new_event_loop()  # a long-lived app loop: its threads are not joined
    try:
        loop.run_until_complete(ended())
        assert loader.started.is_set() and not loader.go.is_set()
        ledger = backend.ledger
        assert ledger is not None
        assert ledger.weights_mb == 5000  # d7c8ce5: 0, the load still running
        out = invoke(node, "invoke", step(("second", "x")))
        assert out["x"].content == "cpu"  # d7c8ce5: admitted, 11,000 MB really held
    finally:
        loader.go.set()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    eventually(lambda: loader.live == {"cuda:0"})
    assert [w.model for w in ledger.resident()] == ["big"] and ledger.weights_mb == 5000
    node.close()
    assert loader.live == set() and ledger.in_use_mb == 0


class _suppress_cancel:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is asyncio.CancelledError


# -- 4. no resident entry without an instance ----------------------------------------------------
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_failed_load_of_a_model_the_hints_do_not_name_leaves_no_weights(run: str) -> None:
    def broken(device: str) -> str:
        raise RuntimeError("corrupt checkpoint")

    ghost = ResidentModel("ghost", load=broken, weights_mb=3000)

    @device_hints(vram_mb=100, pinned="gpu_now")
    @tool
    def haunted(text: str) -> str:
        """Loads a model its hints do not name; the load raises."""
        return ghost.get()

    @device_hints(vram_mb=6000, pinned="gpu_now")
    @tool
    def big(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Needs 6,000 of the 8,000 MB."""
        return device

    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([haunted, big], backend=backend, handle_tool_errors=True)
    out = invoke(node, run, step(("haunted", "h")))
    assert out["h"].status == "error" and "corrupt checkpoint" in str(out["h"].content)
    assert backend.ledger is not None
    assert backend.ledger.resident() == ()  # d7c8ce5: ghost, 3000 MB, no instance
    assert invoke(node, run, step(("big", "b")))["b"].content == "cuda:0"  # d7c8ce5: cpu (oom)


# -- 5. close() leaves a running call's model alone ----------------------------------------------
@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_close_during_a_call_frees_its_model_only_once_the_call_ends(run: str) -> None:
    inside, go = threading.Event(), threading.Event()
    released: list[str] = []
    model = ResidentModel("asr", load=lambda d: f"asr@{d}", weights_mb=3000,
                          release=released.append)

    @device_hints(**model.hints(vram_mb=500), pinned="gpu_now")
    @tool
    def transcribe(text: str) -> str:
        """Uses its model for a while."""
        instance = model.get()
        inside.set()
        go.wait(WAIT_S)
        assert not released, "its model was released under it"
        return instance

    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([transcribe], backend=backend)
    result = in_thread(lambda: invoke(node, run, step(("transcribe", "t"))))
    assert inside.wait(WAIT_S)
    node.close()
    assert released == []  # d7c8ce5: ['asr@cuda:0'] while the call runs on it
    assert backend.ledger is not None and backend.ledger.in_use_mb == 3500
    go.set()
    assert result()["t"].content == "asr@cuda:0"
    assert released == ["asr@cuda:0"]  # then freed: close() asked for it
    assert backend.ledger.in_use_mb == 0 and backend.models.resident() == ()


def test_close_while_a_calls_model_still_loads_frees_it_once_the_call_ends() -> None:
    loader = Loader()
    big = ResidentModel("big", load=loader.load, weights_mb=5000, release=loader.release)

    @device_hints(**big.hints(vram_mb=100), pinned="gpu_now")
    @tool
    def describe(text: str) -> str:
        """Loads its model, slowly."""
        return big.get()

    backend = LocalBackend(gpu=GpuConfig(8000))
    node = DeviceToolNode([describe], backend=backend)
    result = in_thread(lambda: invoke(node, "invoke", step(("describe", "d"))))
    assert loader.started.wait(WAIT_S)
    node.close()  # the load is still running: its weights stay counted
    assert backend.ledger is not None and backend.ledger.weights_mb == 5000
    loader.go.set()
    assert result()["d"].content == "big@cuda:0"
    # the model the load cached after close() goes with its call (seen first by devsched stress)
    assert loader.live == set() and backend.ledger.in_use_mb == 0
    assert backend.models.resident() == ()
