"""Several drivers on one Ray cluster share one ledger and one model actor per GPU slot.

The test starts a local Ray head (one logical GPU, ``VRAM_MB`` = 8000, no CUDA) and spawns
driver processes (`tests.ray_drivers`) that each ``ray.init(address=...)`` on it and run a
compiled graph with `RayBackend(cluster_slots=True)`. Every wait is on a condition with a
generous bound; no timing is asserted.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, current_device
from tests import ray_drivers

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")

from ray import cloudpickle  # noqa: E402

from langgraph_devsched.executors.ray_ledger import (  # noqa: E402
    NAMESPACE,
    LedgerView,
    cluster_slot_views,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.ray

BOUND_S = 240.0
"""The most any condition is waited for (a driver's start and Ray connection included)."""


@pytest.fixture(scope="module")
def head() -> Iterator[str]:
    """A local Ray head with 2 CPUs, one logical GPU and 8000 MB of VRAM_MB; its address."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, num_gpus=1, resources={"VRAM_MB": 8000},
             object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def wait_for(what: str, ready: Callable[[], bool]) -> None:
    end = time.monotonic() + BOUND_S
    while not ready():
        if time.monotonic() > end:
            raise AssertionError(f"not within {BOUND_S:.0f} s: {what}")
        time.sleep(0.2)


def take(results: Any, kind: str) -> str:
    got_kind, value = results.get(timeout=BOUND_S)
    assert got_kind == kind, (got_kind, value)
    return str(value)


def the_view() -> LedgerView:
    views = cluster_slot_views(NAMESPACE)
    assert len(views) == 1, views  # one GPU slot on the cluster: one ledger actor
    return next(iter(views.values()))


@tool
def big(text: str) -> str:
    """A 5000 MB GPU call on no resident model: reports the device it ran on."""
    return current_device()


def this_driver() -> Any:
    """A graph in the test's own process (a driver of its own job) on the shared slots."""
    from langgraph_devsched.executors import RayBackend

    node = DeviceToolNode([big], backend=RayBackend(cluster_slots=True),
                          hints={"big": {"vram_mb": 5000, "pinned": "gpu_now"}})
    return StateGraph(MessagesState).add_node("tools", node).add_edge(
        START, "tools").compile(), node


def big_call(driver: Any) -> str:
    graph, _ = driver
    out = graph.invoke({"messages": [AIMessage("", tool_calls=[
        {"name": "big", "args": {"text": "x"}, "id": "big"}])]})
    answers = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(answers) == 1
    return str(answers[0].content)


def test_two_drivers_share_one_loaded_model_and_a_killed_driver_leaves_no_reservation(
    head: str, tmp_path: Path
) -> None:
    ctx = mp.get_context("spawn")
    counter, flags = tmp_path / "loads.txt", tmp_path / "flags"
    flags.mkdir()
    results_a, results_b = ctx.Queue(), ctx.Queue()
    a = ctx.Process(target=ray_drivers.drive,  # async, gpu_queued: it waits in the actor
                    args=(head, str(counter), str(flags), ["a"], results_a, True))
    b = ctx.Process(target=ray_drivers.drive,
                    args=(head, str(counter), str(flags), ["b", "hold"], results_b))
    a.start()
    job_a = take(results_a, "job")
    first = json.loads(take(results_a, "answer"))
    assert take(results_a, "done") == ""
    a.join(BOUND_S)
    b.start()
    try:
        job_b = take(results_b, "job")
        second = json.loads(take(results_b, "answer"))
        assert job_a != job_b
        # the same model, called from both drivers: loaded once, in one shared actor
        assert counter.read_text().count("\n") == 1, counter.read_text()
        assert second["actor_pid"] == first["actor_pid"] == first["loaded_by"]
        assert second["loaded_by"] == first["loaded_by"]
        assert first["device"] == second["device"] == "cuda:0"

        # driver B's second call holds the GPU in the shared actor; B is killed mid-call
        wait_for("B's call to start", (flags / "started").exists)
        view = the_view()
        assert [(h.job, h.mb) for h in view.held] == [(job_b, ray_drivers.CALL_MB)]
        assert view.in_use_mb == ray_drivers.WEIGHTS_MB + ray_drivers.CALL_MB
        # one budget: this process, a third driver, cannot take 5000 MB beside B's 3500
        third = this_driver()
        assert big_call(third) == "cpu"
        os.kill(b.pid, signal.SIGKILL)  # type: ignore[arg-type]
        b.join(BOUND_S)
        wait_for("B's reservation to be reclaimed", lambda: not the_view().held)
        view = the_view()
        assert view.reclaimed == 1
        assert view.in_use_mb == view.weights_mb == ray_drivers.WEIGHTS_MB  # the model stays
        assert [w.model for w in view.resident] == ["shared"]
        assert big_call(third) == "cuda:0"  # the reclaimed room is there for the others
        third[1].close()
    finally:
        (flags / "go").write_text("go")  # the killed driver's call in the actor ends
        for proc in (a, b):
            if proc.is_alive():
                proc.kill()
            proc.join(BOUND_S)
    with pytest.raises(queue.Empty):  # B never answered its held call
        while True:
            kind, _ = results_b.get(timeout=1)
            assert kind != "done"
