"""The Ray backend on a local Ray instance (2 CPUs, 1 logical GPU, VRAM_MB = 8000).

Tools run inside Ray tasks (they report their process id and the resources Ray assigned);
the VRAM ledger rules are those of one machine; lost workers are retried or answered with an
error message; reservations and Ray's VRAM resource come back to full.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.types import Command

from langgraph_devsched import (
    DeviceToolNode,
    InjectedDevice,
    StepReport,
    ToolDeviceSpec,
    current_placement,
)
from langgraph_devsched.executors.ray_cluster import NodeView, cluster_device_state
from langgraph_devsched.executors.ray_task import Where, portable_config

ray = pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
from ray import cloudpickle  # noqa: E402

from langgraph_devsched.executors import RayBackend  # noqa: E402

# the tools below are shipped to Ray workers by value (workers need not import `tests`)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

VRAM_MB = 8000.0


# -- helpers -------------------------------------------------------------------------------------
def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*calls: tuple[str, str], args: dict[str, Any] | None = None) -> dict[str, Any]:
    tool_calls = [{"name": n, "args": {"text": i, **(args or {})}, "id": i} for n, i in calls]
    return {"messages": [AIMessage("", tool_calls=tool_calls)]}


def answers(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def wait_for_full_vram(timeout_s: float = 60.0) -> float:
    """Ray's view of free VRAM lags task ends a little: poll until it is full (or give up)."""
    deadline = time.monotonic() + timeout_s
    free = 0.0
    while time.monotonic() < deadline:
        free = ray.available_resources().get("VRAM_MB", 0.0)
        if free == VRAM_MB:
            break
        time.sleep(0.2)
    return free


def in_task() -> dict[str, Any]:
    """What a tool sees inside its Ray task."""
    ctx = ray.get_runtime_context()
    placement = current_placement()
    return {
        "pid": os.getpid(),
        "resources": {k: v for k, v in ctx.get_assigned_resources().items() if k != "memory"},
        "device": placement.device if placement else None,
    }


@tool
def embed(text: str, device: Annotated[str, InjectedDevice]) -> str:
    """Embed a text (reports where it ran)."""
    return json.dumps({"text": text, "injected": device, **in_task()})


@tool
def rerank(text: str) -> str:
    """Rerank (reports where it ran)."""
    return json.dumps({"text": text, **in_task()})


@tool
def mirror(text: str) -> str:
    """Return the text."""
    return text


# -- without Ray: cluster view, config, pickling -------------------------------------------------
def test_cluster_state_sums_alive_nodes_and_names_missing_vram() -> None:
    gpu = NodeView(
        "a", "10.0.0.1", True, {"CPU": 4, "GPU": 1, "VRAM_MB": 16000}, {"VRAM_MB": 6000, "GPU": 0.5}
    )
    bare = NodeView("b", "10.0.0.2", True, {"CPU": 4, "GPU": 1}, {"GPU": 1})
    dead = NodeView("c", "10.0.0.3", False, {"CPU": 4, "GPU": 8, "VRAM_MB": 640000}, None)
    state = cluster_device_state([gpu, bare, dead], "VRAM_MB")
    assert (state.vram_budget_mb, state.vram_used_mb, state.cpu_cores) == (16000, 10000, 8)
    assert state.gpu_utilization == 0.25
    assert state.reason is not None and "10.0.0.2 declare no VRAM_MB" in state.reason
    cpu_only = cluster_device_state([NodeView("d", "x", True, {"CPU": 2}, {})], "VRAM_MB")
    assert not cpu_only.gpu_available and "--num-gpus" in (cpu_only.reason or "")


def test_portable_config_keeps_only_plain_values() -> None:
    cfg = {
        "tags": ["devsched:gpu_now"],
        "metadata": {"devsched.option": "gpu_now", "handle": object()},
        "callbacks": [object()],
        "configurable": {"thread_id": "t1", "__pregel_store": object()},
        "run_name": "embed",
    }
    assert portable_config(cfg) == {
        "tags": ["devsched:gpu_now"],
        "metadata": {"devsched.option": "gpu_now"},
        "run_name": "embed",
        "configurable": {"thread_id": "t1"},
    }
    assert Where("n", "10.0.0.9", ("3",)).device(True) == "10.0.0.9/cuda:3"
    assert Where("n", "10.0.0.9", ("3",)).device(False) == "cpu"


def _cpu_version(text: str) -> str:
    return f"cpu:{text}"


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_tool_and_hints_survive_a_pickle_round_trip(dumps: Any) -> None:
    spec = ToolDeviceSpec(vram_mb=900, gpu_share=0.5, preferred="gpu_now", cpu_impl=_cpu_version)
    back = cloudpickle.loads(dumps(spec))
    assert back.model_dump() == spec.model_dump() and back.cpu_impl("x") == "cpu:x"
    assert back.allowed_options() == spec.allowed_options()
    shipped: BaseTool = cloudpickle.loads(cloudpickle.dumps(mirror))
    assert shipped.invoke({"text": "hi"}) == "hi" and shipped.name == "mirror"


def test_package_without_ray_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install ray"):
        RayBackend()


# -- on the local Ray instance --------------------------------------------------------------------


@pytest.mark.ray
def test_parallel_calls_run_as_ray_tasks_with_the_scheduled_resources(ray_local: Any) -> None:
    backend = RayBackend()
    reports: list[StepReport] = []
    hints = {
        "embed": {"vram_mb": 3000, "gpu_share": 0.5, "pinned": "gpu_now"},
        "rerank": {"vram_mb": 0, "pinned": "cpu"},
    }
    node = DeviceToolNode([embed, rerank], hints=hints, backend=backend, on_step=reports.append)
    out = answers(graph(node).invoke(step(("embed", "e1"), ("embed", "e2"), ("rerank", "r1"))))
    got = {k: json.loads(str(m.content)) for k, m in out.items()}
    assert all(g["pid"] != os.getpid() for g in got.values())  # every call ran in a worker
    for e in ("e1", "e2"):  # 2 x 3000 MB fit in 8000: both on the GPU now, half a GPU each
        assert got[e]["resources"] == {"GPU": 0.5, "VRAM_MB": 3000.0}
        assert got[e]["injected"] == got[e]["device"] == "cuda:0"
    assert got["r1"]["resources"] == {"CPU": 1.0} and got["r1"]["device"] == "cpu"
    record = reports[0].record
    assert record is not None
    by_id = record.by_id()
    ip = ray.util.get_node_ip_address()
    assert by_id["e1"].device == f"{ip}/cuda:0" and by_id["e1"].node == ip
    assert by_id["r1"].device == "cpu" and by_id["r1"].fallback is None
    assert record.vram_peak_mb == 6000
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())
    assert wait_for_full_vram() == VRAM_MB
    state = backend.device_state()
    assert state.gpu_available and state.vram_budget_mb == VRAM_MB


@pytest.mark.ray
@pytest.mark.parametrize("option", ["gpu_queued", "gpu_now"])
def test_calls_that_do_not_fit_together_wait_or_go_to_the_cpu(ray_local: Any, option: str) -> None:
    backend = RayBackend()
    reports: list[StepReport] = []
    hints = {"embed": {"vram_mb": 5000, "pinned": option}}
    node = DeviceToolNode([embed], hints=hints, backend=backend, on_step=reports.append)
    out = answers(graph(node).invoke(step(("embed", "a"), ("embed", "b"))))
    assert set(out) == {"a", "b"} and all(m.status == "success" for m in out.values())
    record = reports[0].record
    assert record is not None
    calls = sorted(record.calls, key=lambda c: c.device)
    if option == "gpu_queued":  # the second waited for the first's 5000 MB: never side by side
        assert all(c.on_gpu and c.fallback is None and c.gpu_peers == 0 for c in calls)
    else:  # gpu_now: only one fits now; the other falls back to the CPU, as on one machine
        assert [(c.device == "cpu", c.fallback) for c in calls] == [(False, None), (True, "oom")]
        ran = {json.loads(str(m.content))["device"] for m in out.values()}
        assert ran == {"cuda:0", "cpu"}
    assert record.vram_peak_mb == 5000
    assert wait_for_full_vram() == VRAM_MB


@pytest.mark.ray
def test_more_vram_than_any_node_has_goes_to_the_cpu_or_errors(ray_local: Any) -> None:
    reports: list[StepReport] = []
    hints = {
        "embed": {"vram_mb": VRAM_MB + 1, "pinned": "gpu_queued"},
        "rerank": {"vram_mb": VRAM_MB + 1, "pinned": "gpu_queued", "cpu_allowed": False},
    }
    node = DeviceToolNode(
        [embed, rerank], hints=hints, backend=RayBackend(), on_step=reports.append
    )
    out = answers(graph(node).invoke(step(("embed", "a"), ("rerank", "b"))))
    assert json.loads(str(out["a"].content))["device"] == "cpu"
    assert out["b"].status == "error" and "hints forbid the CPU" in str(out["b"].content)
    assert "8000 MB" in str(out["b"].content)
    record = reports[0].record
    assert record is not None and record.by_id()["a"].fallback == "vram_over_budget"
    assert "hints forbid the CPU" in (record.by_id()["b"].error or "")


class OutOfMemoryError(RuntimeError):
    """Stands in for ``torch.cuda.OutOfMemoryError`` (same name, a ``torch`` module)."""


OutOfMemoryError.__module__ = "fake_torch.cuda"


@tool
def greedy(text: str) -> str:
    """Runs out of GPU memory on the GPU; works on the CPU."""
    placement = current_placement()
    if placement is not None and placement.on_gpu:
        raise OutOfMemoryError("CUDA out of memory (simulated)")
    return f"cpu answer for {text}"


@pytest.mark.ray
@pytest.mark.parametrize("handle_tool_errors", [False, True])
def test_gpu_oom_inside_the_task_reruns_on_the_cpu(
    ray_local: Any, handle_tool_errors: bool
) -> None:
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [greedy],
        hints={"greedy": {"vram_mb": 1000, "pinned": "gpu_now"}},
        backend=RayBackend(),
        handle_tool_errors=handle_tool_errors,
        on_step=reports.append,
    )
    out = answers(graph(node).invoke(step(("greedy", "g"))))
    assert out["g"].content == "cpu answer for g" and out["g"].status == "success"
    record = reports[0].record
    assert record is not None
    assert (record.calls[0].device, record.calls[0].fallback) == ("cpu", "oom")


@tool
def crash_once(text: str, marker: str) -> str:
    """Kills its worker on the first attempt (marker file absent), answers on the next."""
    path = Path(marker)
    if not path.exists():
        path.write_text("attempt 1")
        os._exit(1)
    with path.open("a") as f:
        f.write(" answered")
    return f"survived:{text}"


@tool
def crash_always(text: str) -> str:
    """Kills its worker every time."""
    os._exit(1)


@pytest.mark.ray
def test_killed_worker_is_retried_by_ray_and_answers_once(ray_local: Any, tmp_path: Path) -> None:
    marker = tmp_path / "attempted"
    backend = RayBackend(max_retries=2, lost_call_retries=0)
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [crash_once],
        hints={"crash_once": {"vram_mb": 1000, "pinned": "gpu_queued"}},
        backend=backend,
        on_step=reports.append,
    )
    out = answers(graph(node).invoke(step(("crash_once", "k"), args={"marker": str(marker)})))
    assert out["k"].content == "survived:k"
    assert marker.read_text() == "attempt 1 answered"  # one crash, one answer
    record = reports[0].record
    assert record is not None and record.calls[0].error is None and record.calls[0].on_gpu
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


@pytest.mark.ray
def test_call_lost_for_good_is_an_error_message_and_releases(ray_local: Any) -> None:
    backend = RayBackend(max_retries=0, lost_call_retries=1)
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [crash_always, mirror],
        hints={"crash_always": {"vram_mb": 2000, "pinned": "gpu_now"}},
        backend=backend,
        on_step=reports.append,
    )
    out = answers(graph(node).invoke(step(("crash_always", "x"), ("mirror", "y"))))
    assert out["y"].content == "y"
    assert out["x"].status == "error" and "was lost on the Ray cluster" in str(out["x"].content)
    assert "WorkerCrashedError" in str(out["x"].content)
    record = reports[0].record
    assert record is not None
    lost = record.by_id()["x"]
    assert lost.error is not None and lost.error.startswith("lost: WorkerCrashedError")
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())
    assert wait_for_full_vram() == VRAM_MB


@pytest.mark.ray
def test_call_lost_with_its_node_is_placed_again_elsewhere(
    ray_local: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray says the pinned node is gone (as when a node dies mid-call, see
    scripts/ray_node_loss.py for the real thing): the call is placed again, not on that node
    (here: no other GPU node, so the CPU), and answered once."""
    real_get, failures = ray.get, []

    def node_gone_once(refs: Any, *args: Any, **kwargs: Any) -> Any:
        if not failures:
            failures.append(refs)
            raise ray.exceptions.TaskUnschedulableError("the node of NodeAffinity is dead")
        return real_get(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "get", node_gone_once)
    backend = RayBackend(lost_call_retries=1)
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [embed],
        hints={"embed": {"vram_mb": 1000, "pinned": "gpu_now"}},
        backend=backend,
        on_step=reports.append,
    )
    out = answers(graph(node).invoke(step(("embed", "n"))))
    assert len(failures) == 1 and out["n"].status == "success"
    assert json.loads(str(out["n"].content))["device"] == "cpu"
    record = reports[0].record
    assert record is not None
    assert (record.calls[0].fallback, record.calls[0].error) == ("no_gpu", None)
    assert all(s.ledger.in_use_mb == 0 for s in backend.slots())


@tool
def tally(
    text: str,
    state: Annotated[dict, InjectedState],
    tool_call_id: Annotated[str, InjectedToolCallId],
) -> Command:
    """Count the messages so far (injected state) and answer with a Command."""
    answer = f"{text}: {len(state['messages'])} message(s), pid {os.getpid()}"
    return Command(update={"messages": [ToolMessage(answer, tool_call_id=tool_call_id)]})


class ToolRuns(BaseCallbackHandler):
    def __init__(self) -> None:
        self.started: list[tuple[list[str], dict[str, Any]]] = []
        self.ended = 0

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.started.append((kwargs.get("tags") or [], kwargs.get("metadata") or {}))

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self.ended += 1


@pytest.mark.ray
def test_injected_state_commands_and_tracing_callbacks_work_across_ray(ray_local: Any) -> None:
    node = DeviceToolNode(
        [tally], hints={"tally": {"vram_mb": 500, "pinned": "gpu_now"}}, backend=RayBackend()
    )
    runs = ToolRuns()
    out = graph(node).invoke(step(("tally", "t")), {"callbacks": [runs]})
    answer = answers(out)["t"]
    assert str(answer.content).startswith("t: 1 message(s), pid ")
    assert not str(answer.content).endswith(f"pid {os.getpid()}")  # ran in a worker
    # the run's callbacks fire here, around the remote run, with the decision's tags
    [(tags, metadata)] = runs.started
    assert "devsched:gpu_now" in tags and metadata["devsched.option"] == "gpu_now"
    assert runs.ended == 1


@tool
def picky(text: str) -> str:
    """Refuses every text."""
    raise ValueError(f"cannot handle {text!r}")


@pytest.mark.ray
def test_tool_errors_come_back_as_on_one_machine(ray_local: Any) -> None:
    from langgraph_devsched import GpuConfig, LocalBackend

    hints = {"picky": {"vram_mb": 100, "pinned": "gpu_now"}}
    local = LocalBackend(gpu=GpuConfig(vram_budget_mb=VRAM_MB))
    messages = []
    for backend in (local, RayBackend()):
        node = DeviceToolNode([picky], hints=hints, backend=backend, handle_tool_errors=True)
        messages.append(answers(graph(node).invoke(step(("picky", "p"))))["p"])
        strict = DeviceToolNode([picky], hints=hints, backend=backend)
        with pytest.raises(ValueError, match="cannot handle 'p'"):
            graph(strict).invoke(step(("picky", "p")))
    on_one_machine, on_ray = messages
    assert on_ray.status == on_one_machine.status == "error"
    assert on_ray.content == on_one_machine.content


@pytest.mark.ray
def test_async_steps_run_in_ray_tasks_too(ray_local: Any) -> None:
    reports: list[StepReport] = []
    node = DeviceToolNode(
        [embed, rerank],
        hints={"embed": {"vram_mb": 5000, "pinned": "gpu_queued"}, "rerank": {"pinned": "cpu"}},
        backend=RayBackend(),
        on_step=reports.append,
    )
    msgs = step(("embed", "a"), ("embed", "b"), ("rerank", "c"))
    out = answers(asyncio.run(graph(node).ainvoke(msgs)))
    got = {k: json.loads(str(m.content)) for k, m in out.items()}
    assert {got["a"]["device"], got["b"]["device"], got["c"]["device"]} == {"cuda:0", "cpu"}
    record = reports[0].record
    assert record is not None
    assert [c.gpu_peers for c in record.calls if c.on_gpu] == [0, 0]
    assert wait_for_full_vram() == VRAM_MB


@pytest.mark.ray
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray inspects the bad object
def test_a_tool_that_cannot_be_pickled_gets_an_error_naming_it(ray_local: Any) -> None:
    lock = threading.Lock()

    @tool
    def locked(text: str) -> str:
        """Holds a lock (cannot be pickled)."""
        with lock:
            return text

    backend = RayBackend()
    node = DeviceToolNode([locked], hints={"locked": {"pinned": "cpu"}}, backend=backend)
    out = answers(graph(node).invoke(step(("locked", "z"))))
    assert out["z"].status == "error"
    assert "tool 'locked' cannot be sent to Ray" in str(out["z"].content)
    assert "must be picklable" in str(out["z"].content)


# -- the benchmark through Ray ---------------------------------------------------------------------
BENCH_SCENARIOS = ("memory_consumer_gpu", "serial_voice_assistant")


@pytest.mark.ray
def test_bench_through_ray_gives_the_local_mappings(ray_local: Any) -> None:
    from langgraph_devsched.bench.runner import run_scenario
    from langgraph_devsched.bench.scenario import load_scenarios
    from langgraph_devsched.executors.ray_sim import RaySimulatedSteps

    scenarios = [s for s in load_scenarios(None) if s.name in BENCH_SCENARIOS]
    assert len(scenarios) == len(BENCH_SCENARIOS)
    names = ["oracle", "all_gpu", "ucb"]
    steps = RaySimulatedSteps()
    records: list[Any] = []

    def through_ray(bed: Any, batch: Any, calls: Any) -> Any:
        records.append(steps(bed, batch, calls))
        return records[-1]

    for scenario in scenarios:
        local = run_scenario(scenario, names, rounds=3, seed=7)
        remote = run_scenario(scenario, names, rounds=3, seed=7, step_runner=through_ray)
        for name in names:
            here, there = local.results[name], remote.results[name]
            assert there.final_mapping == here.final_mapping
            assert there.optimal == here.optimal
            assert there.round_makespans_ms == here.round_makespans_ms
            assert there.measured_makespans_ms == here.measured_makespans_ms
        assert remote.results["oracle"].optimal
    assert steps.tasks == sum(len(r.calls) for r in records) > 0
    ip = ray.util.get_node_ip_address()
    calls = [c for r in records for c in r.calls]
    assert all(c.node == ip for c in calls)
    assert {c.device for c in calls} >= {"cpu", f"{ip}/cuda:0"}
    assert wait_for_full_vram() == VRAM_MB


def test_bench_backend_names_are_checked() -> None:
    from typer.testing import CliRunner

    from langgraph_devsched.cli import app

    result = CliRunner().invoke(app, ["bench", "--backend", "spark", "--rounds", "1"])
    assert result.exit_code == 2
    assert "unknown backend 'spark'; valid backends: local, ray" in result.output


@pytest.mark.ray
def test_devsched_bench_runs_with_the_ray_backend(ray_local: Any) -> None:
    from typer.testing import CliRunner

    import langgraph_devsched
    from langgraph_devsched.cli import app

    path = Path(langgraph_devsched.__file__).parent / "scenarios" / "serial_voice_assistant.yaml"
    args = ["bench", "--backend", "ray", "--scenarios", str(path), "--rounds", "2"]
    result = CliRunner().invoke(app, [*args, "--schedulers", "oracle,heft"])
    assert result.exit_code == 0, result.output
    assert "serial_voice_assistant" in result.output


@pytest.mark.ray
def test_a_models_weights_are_reserved_once_per_gpu_and_kept(ray_local: Any) -> None:
    """On Ray the weights live in worker processes the node cannot make free them: the GPU's
    ledger reserves them the first time a call of the model lands there and keeps them, so a
    second model that does not fit beside them goes to the CPU instead of over-committing.
    (``model_actors=False``: the task path; with the actors, see tests/test_ray_actors.py.)"""
    backend = RayBackend(model_actors=False)
    reports: list[StepReport] = []
    hints = {"embed": {"vram_mb": 500, "model": "minilm", "weights_mb": 5000,
                       "pinned": "gpu_now"},
             "rerank": {"vram_mb": 500, "model": "bge", "weights_mb": 3000}}
    node = DeviceToolNode([embed, rerank], hints=hints, backend=backend, on_step=reports.append,
                          scheduler="all_gpu")
    first = answers(graph(node).invoke(step(("embed", "e1"))))
    again = answers(graph(node).invoke(step(("embed", "e2"), ("rerank", "r1"))))
    assert first["e1"].status == again["e2"].status == "success"
    cold, warm = reports[0].record.by_id()["e1"], reports[1].record.by_id()["e2"]  # type: ignore[union-attr]
    assert cold.model == warm.model == "minilm" and cold.loaded and not warm.loaded
    r1 = reports[1].record.by_id()["r1"]  # type: ignore[union-attr]
    assert r1.device == "cpu" and r1.fallback == "oom"  # 5000 + 3000 + 500 + 500 > 8000
    (slot,) = backend.slots()
    assert [(w.model, w.keep_warm) for w in slot.ledger.resident()] == [("minilm", True)]
    assert slot.ledger.working_mb == 0 and slot.ledger.in_use_mb == 5000
