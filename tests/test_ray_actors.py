"""Resident models on Ray: one long-lived actor per GPU slot holds that GPU's models.

A local Ray instance with two *logical* GPUs (``num_gpus=2``, no CUDA: the models are plain
Python `ResidentModel`s) and ``VRAM_MB`` = 16000 (8000 per GPU). Every test goes through a
compiled graph with `RayBackend`; the actors are read back through their public methods.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, ResidentModel, StepReport, current_device
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
from ray import cloudpickle  # noqa: E402

from langgraph_devsched.executors import RayBackend  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.ray

PER_GPU_MB = 8000.0


@pytest.fixture(scope="module")
def two_gpus() -> Iterator[Any]:
    """A local Ray instance with 2 CPUs and 2 logical GPUs of 8000 MB each."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, num_gpus=2, resources={"VRAM_MB": 2 * PER_GPU_MB},
             object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray
    ray.shutdown()


def load(device: str) -> dict[str, Any]:
    return {"device": device, "pid": os.getpid()}


TINY = ResidentModel("tiny", load, weights_mb=3000)
BIG = ResidentModel("big", load, weights_mb=5000)


def answer(model: dict[str, Any], text: str) -> str:
    return json.dumps({"text": text, "loaded_on": model["device"], "pid": os.getpid(),
                       "device": current_device()})


@tool
def embed(text: str) -> str:
    """Embed a text with the tiny model (reports where it ran)."""
    return answer(TINY.get(), text)


@tool
def caption(text: str) -> str:
    """Caption with the big model (reports where it ran)."""
    return answer(BIG.get(), text)


@tool
def crash_once(text: str) -> str:
    """Load the tiny model, then kill its process the first time (flag file in ``text``)."""
    TINY.get()
    flag = Path(text)
    if not flag.exists():
        flag.write_text("crashed")
        os._exit(1)
    return answer(TINY.get(), "survived")


@tool
def plain(text: str) -> str:
    """A GPU tool on no resident model: reports the device it was told and what Ray gave
    its task (GPU ids, resources, the CUDA_VISIBLE_DEVICES it runs under)."""
    ctx = ray.get_runtime_context()
    return json.dumps({"text": text, "device": current_device(), "pid": os.getpid(),
                       "ray_gpus": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
                       "resources": ctx.get_assigned_resources(),
                       "visible": os.environ.get("CUDA_VISIBLE_DEVICES")})


HINTS: dict[str, Any] = {
    "plain": {"vram_mb": 500, "gpu_share": 0.5},
    "embed": TINY.hints(vram_mb=500),
    "caption": BIG.hints(vram_mb=500),
    "crash_once": TINY.hints(vram_mb=500),
}


class OnGpu(SchedulerBase):
    """Every call on ``gpu_now``, on the GPU named in ``gpus`` (by tool)."""

    name = "on_gpu"

    def __init__(self, gpus: dict[str, int]) -> None:
        self.gpus = gpus

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        named = {c.call_id: self.gpus[c.tool] for c in batch.calls if c.tool in self.gpus}
        return self._decision({c.call_id: "gpu_now" for c in batch.calls}, "test", gpus=named)


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*calls: tuple[str, str], text: str | None = None) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": {"text": text or i}, "id": i} for n, i in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for m in result["messages"]:
        if isinstance(m, ToolMessage):
            assert m.status == "success", m.content
            out[m.tool_call_id] = json.loads(str(m.content))
    return out


def make(backend: RayBackend, reports: list[StepReport], **kw: Any) -> DeviceToolNode:
    kw.setdefault("scheduler", "all_gpu")
    return DeviceToolNode([embed, caption, crash_once, plain], hints=HINTS, backend=backend,
                          on_step=reports.append, **kw)


def stats(backend: RayBackend) -> dict[int, Any]:
    """Each actor's cache counters, by the GPU index of its slot."""
    handles = backend.hosts.handles()
    return {index: ray.get(h.stats.remote()) for (_, index), h in handles.items()}


def test_a_models_second_call_finds_it_warm_in_its_gpus_actor(two_gpus: Any) -> None:
    backend, reports = RayBackend(), []
    node = make(backend, reports)
    first = answers(graph(node).invoke(step(("embed", "e1"))))["e1"]
    second = answers(graph(node).invoke(step(("embed", "e2"))))["e2"]
    cold = reports[0].record.by_id()["e1"]  # type: ignore[union-attr]
    warm = reports[1].record.by_id()["e2"]  # type: ignore[union-attr]
    assert (cold.model, cold.loaded, warm.model, warm.loaded) == ("tiny", True, "tiny", False)
    assert warm.load_ms == 0.0 and first["pid"] == second["pid"]  # one actor answered both
    assert first["device"] == second["device"] == second["loaded_on"]  # cuda:k, k its GPU
    assert warm.device.endswith("/" + second["device"])
    (only,) = stats(backend).values()
    assert (only.loads, only.hits, only.resident) == (1, 1, ("tiny",))
    node.close()


def test_two_gpus_each_have_their_own_actor_and_model(two_gpus: Any) -> None:
    """The decision names GPU 1 for the caption and GPU 0 for the embedding: each runs in
    its GPU's actor, told that GPU's device, and each actor holds only its own model."""
    backend, reports = RayBackend(), []
    node = make(backend, reports, scheduler=OnGpu({"embed": 0, "caption": 1}))
    out = answers(graph(node).invoke(step(("embed", "e"), ("caption", "c"))))
    assert (out["e"]["device"], out["c"]["device"]) == ("cuda:0", "cuda:1")
    assert out["e"]["pid"] != out["c"]["pid"]
    record = reports[0].record.by_id()  # type: ignore[union-attr]
    assert record["e"].device.endswith("/cuda:0") and record["c"].device.endswith("/cuda:1")
    held = stats(backend)
    assert (held[0].resident, held[1].resident) == (("tiny",), ("big",))
    state = backend.device_state()
    assert [d.resident[0].model for d in state.devices] == ["tiny", "big"]
    # no GPU named: the default rule sends each model where it is warm
    again = answers(graph(node).invoke(step(("caption", "c2"), ("embed", "e2"))))
    assert (again["c2"]["pid"], again["e2"]["pid"]) == (out["c"]["pid"], out["e"]["pid"])
    node.close()


def test_an_admission_evicts_in_the_ledger_and_the_actor_frees_the_model(
        two_gpus: Any) -> None:
    """One GPU holds 8000 MB: the big model (5000 + 500) then the tiny one (3000 + 500) do
    not fit together, so the tiny one's admission evicts the idle big model."""
    backend, reports = RayBackend(), []
    node = make(backend, reports, scheduler=OnGpu({"embed": 0, "caption": 0}))
    graph(node).invoke(step(("caption", "c")))
    graph(node).invoke(step(("embed", "e")))
    e = reports[1].record.by_id()["e"]  # type: ignore[union-attr]
    assert (e.loaded, e.evicted) == (True, ("big",))
    gpu0 = stats(backend)[0]
    assert (gpu0.loads, gpu0.evictions, gpu0.resident) == (2, 1, ("tiny",))
    assert [w.model for w in backend.slots()[0].ledger.resident()] == ["tiny"]
    node.close()


def test_close_kills_the_actors_and_empties_every_ledger(two_gpus: Any) -> None:
    backend, reports = RayBackend(), []
    node = make(backend, reports, scheduler=OnGpu({"embed": 0, "caption": 1}))
    graph(node).invoke(step(("embed", "e"), ("caption", "c")))
    handles = list(backend.hosts.handles().values())
    assert len(handles) == 2 and sum(s.ledger.in_use_mb for s in backend.slots()) == 8000
    node.close()
    assert backend.hosts.handles() == {}
    assert all(s.ledger.in_use_mb == 0 and s.ledger.resident() == () for s in backend.slots())
    assert all(dead(handle) for handle in handles)


def dead(handle: Any, timeout_s: float = 120.0) -> bool:
    """Whether the actor is gone: `ray.kill` takes effect a little later than it returns,
    so a call sent at once may still be answered; poll until one fails (or give up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.stats.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("retries", [1, 0])
def test_a_dead_actors_call_is_answered_once(two_gpus: Any, tmp_path: Path,
                                             retries: int) -> None:
    """The actor dies mid-call (``os._exit``): placed again, a new actor loads the model
    cold and answers; without retries, an error message. Either way one answer, and the
    dead actor's model leaves the ledger."""
    backend, reports = RayBackend(lost_call_retries=retries), []
    node = make(backend, reports, scheduler=OnGpu({"crash_once": 0}))
    result = graph(node).invoke(step(("crash_once", "x"), text=str(tmp_path / "flag")))
    (msg,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    record = reports[0].record.by_id()["x"]  # type: ignore[union-attr]
    if retries:
        assert msg.status == "success" and json.loads(str(msg.content))["text"] == "survived"
        assert record.loaded and record.error is None
        assert stats(backend)[0].loads == 1  # the new actor's own load
    else:
        assert msg.status == "error" and "was lost on the Ray cluster" in str(msg.content)
        assert record.error is not None and record.error.startswith("lost: ActorDiedError")
        assert backend.slots()[0].ledger.in_use_mb == 0
    node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


def test_async_steps_reach_the_same_actor_and_find_the_model_warm(two_gpus: Any) -> None:
    backend, reports = RayBackend(), []
    node = make(backend, reports, scheduler=OnGpu({"embed": 1}))
    app = graph(node)
    first = answers(asyncio.run(app.ainvoke(step(("embed", "a1")))))["a1"]
    second = answers(asyncio.run(app.ainvoke(step(("embed", "a2")))))["a2"]
    assert first["pid"] == second["pid"] and second["device"] == "cuda:1"
    loaded = [r.record.calls[0].loaded for r in reports]  # type: ignore[union-attr]
    assert loaded == [True, False]
    node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


def test_calls_of_one_model_in_one_step_share_the_actors_single_load(two_gpus: Any) -> None:
    """Two calls of the tiny model at once on GPU 0: the actor runs them side by side and
    loads the model once (its cache's load gate); both records name the model, one loaded."""
    backend, reports = RayBackend(), []
    node = make(backend, reports, scheduler=OnGpu({"embed": 0}))
    out = answers(graph(node).invoke(step(("embed", "p"), ("embed", "q"))))
    assert out["p"]["pid"] == out["q"]["pid"] and out["p"]["device"] == "cuda:0"
    calls = reports[0].record.calls  # type: ignore[union-attr]
    assert sorted(c.loaded for c in calls) == [False, True]
    assert (stats(backend)[0].loads, stats(backend)[0].hits) == (1, 1)
    assert backend.slots()[0].ledger.in_use_mb == 3000  # the weights, once; no working memory
    node.close()


def ran_where_booked(out: dict[str, Any], record: Any, index: int) -> None:
    """The call was told ``cuda:<index>`` and ran under the node's own CUDA_VISIBLE_DEVICES
    (Ray assigned its task no GPU, so it did not narrow them to a GPU of its choice), and
    its record says that GPU."""
    assert out["device"] == f"cuda:{index}" and record.device.endswith(f"/cuda:{index}")
    assert out["ray_gpus"] == [] and "GPU" not in out["resources"]
    assert out["visible"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert out["resources"].get("VRAM_MB") == 500 and record.vram_reserved_mb == 500


def test_a_call_on_no_resident_model_runs_on_the_gpu_the_decision_named(two_gpus: Any) -> None:
    """GPU 1, then GPU 0, named for a tool on no resident model: its task runs there (a
    fractional Ray GPU request would land on whichever GPU Ray picks)."""
    backend, reports = RayBackend(), []
    for index in (1, 0):
        node = make(backend, reports, scheduler=OnGpu({"plain": index}))
        out = answers(graph(node).invoke(step(("plain", f"p{index}"))))[f"p{index}"]
        ran_where_booked(out, reports[-1].record.by_id()[f"p{index}"], index)  # type: ignore[union-attr]
        node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


def test_without_model_actors_a_gpu_call_runs_on_the_slot_the_backend_booked(
        two_gpus: Any) -> None:
    """Without model actors the backend books the slot with the most free VRAM: GPU 0
    holding 4000 MB already, that is GPU 1, and the task runs there."""
    backend, reports = RayBackend(model_actors=False), []
    backend.refresh()
    held = backend.slots()[0].ledger.try_reserve(4000, 0.0, None)
    assert held is not None
    node = make(backend, reports, scheduler=OnGpu({}))
    out = answers(graph(node).invoke(step(("plain", "p"))))["p"]
    ran_where_booked(out, reports[0].record.by_id()["p"], 1)  # type: ignore[union-attr]
    held.release()
    node.close()
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())
