"""Decision tracing: every tool run carries the decision, offline (collect_runs, a fake
LangSmith client), and scheduler runs nest under the step that asked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tracers.context import collect_runs
from langchain_core.tracers.langchain import LangChainTracer
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_devsched import DeviceToolNode, GpuConfig, LocalBackend, SimulatedTestbed
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.tracing import METADATA_KEYS, decision_runs, takes_config
from tests.fakes import HINTS, PARAMS, TOOLS, calls

STEP = AIMessage("", tool_calls=calls("asr", "ocr", "embed"))
MAPPING = {"asr": "gpu_now", "ocr": "cpu", "embed": "gpu_queued"}
DECLARED_GPU = GpuConfig(vram_budget_mb=16000)
"""A GPU declared to the local backend (no CUDA needed): real threads and ledger, so the
scheduler has a choice to make (without a GPU the node decides alone: everything on the CPU)."""


class Fixed(SchedulerBase):
    name = "fixed"

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision(
            {c.call_id: MAPPING[c.tool] for c in batch.calls},
            "by tool",
            predicted_ms={c.call_id: 1.0 for c in batch.calls},
        )


class FakeLangSmith:
    """Records what `LangChainTracer` would send to LangSmith: run creations and patches."""

    otel_exporter = None  # read by langsmith's @traceable spans (create_agent's middleware hooks)

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.updated: list[dict[str, Any]] = []

    def create_run(self, **kwargs: Any) -> None:
        self.created.append(kwargs)

    def update_run(self, **kwargs: Any) -> None:
        self.updated.append(kwargs)

    def flush(self) -> None:
        return None


def tools_graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def bed() -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=4000, cpu_cores=4)


def run(graph: Any, mode: str, config: RunnableConfig | None = None) -> Any:
    inputs = {"messages": [HumanMessage("go"), STEP]}
    if mode == "sync":
        return graph.invoke(inputs, config)
    return asyncio.run(graph.ainvoke(inputs, config))


def devsched_meta(run: Any) -> dict[str, Any]:
    return {k: v for k, v in run.extra["metadata"].items() if k.startswith("devsched.")}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_tool_run_carries_every_decision_key_on_the_testbed(mode: str) -> None:
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=Fixed(), testbed=bed())
    with collect_runs() as cb:
        run(tools_graph(node), mode)
    runs = {r.name: r for r in decision_runs(cb.traced_runs)}
    assert sorted(runs) == ["asr", "embed", "ocr"]
    assert devsched_meta(runs["asr"]) == {
        "devsched.option": "gpu_now",
        "devsched.device": "cuda:0",
        "devsched.scheduler": "fixed",
        "devsched.reason": "by tool",
        "devsched.fallback": None,
        "devsched.vram_reserved_mb": 1500.0,
        "devsched.predicted_ms": 1.0,
        "devsched.observed_ms": 70.0,
        "devsched.probe": False,
    }
    assert devsched_meta(runs["ocr"])["devsched.device"] == "cpu"
    assert devsched_meta(runs["ocr"])["devsched.observed_ms"] == 300.0
    assert devsched_meta(runs["embed"])["devsched.option"] == "gpu_queued"
    for name, option in MAPPING.items():
        assert f"devsched:{option}" in runs[name].tags


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_observed_ms_is_measured_on_real_runs(mode: str) -> None:
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=Fixed(), backend=LocalBackend(gpu=DECLARED_GPU)
    )
    with collect_runs() as cb:
        run(tools_graph(node), mode)
    runs = decision_runs(cb.traced_runs)
    assert len(runs) == 3
    for r in runs:
        meta = devsched_meta(r)
        assert set(METADATA_KEYS) <= set(meta)
        option = meta["devsched.option"]
        assert option == MAPPING[r.name]
        assert meta["devsched.device"] == ("cpu" if option == "cpu" else "cuda:0")
        assert meta["devsched.fallback"] is None
        observed = meta["devsched.observed_ms"]
        assert isinstance(observed, float) and observed >= 0.0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_langsmith_receives_observed_ms_in_the_runs_end(mode: str) -> None:
    client = FakeLangSmith()
    tracer = LangChainTracer(client=client, project_name="devsched-test")  # type: ignore[arg-type]
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=Fixed(), backend=LocalBackend(gpu=DECLARED_GPU)
    )
    run(tools_graph(node), mode, {"callbacks": [tracer]})
    tracer.wait_for_futures()
    created = {c["name"]: c for c in client.created}
    ends = {u["name"]: u for u in client.updated if u.get("run_type") == "tool"}
    assert sorted(ends) == ["asr", "embed", "ocr"]
    for name, end in ends.items():
        start_meta = created[name]["extra"]["metadata"]
        end_meta = end["extra"]["metadata"]
        assert start_meta["devsched.observed_ms"] is None  # unknown when the run starts
        assert isinstance(end_meta["devsched.observed_ms"], float)  # sent with the run's end
        assert end_meta["devsched.option"] == MAPPING[name]
        assert f"devsched:{MAPPING[name]}" in end["tags"]
        assert end["parent_run_id"] == created["tools"]["id"]


class Consulting(SchedulerBase):
    """Runs a small runnable ("its sub-agent") with the config it is given."""

    name = "consulting"

    def decide(
        self, batch: Batch, view: SchedulerView, *, config: RunnableConfig | None = None
    ) -> Decision:
        RunnableLambda(lambda ids: ids, name="scheduler_subagent").invoke(batch.call_ids, config)
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "asked")


class AsyncConsulting(Consulting):
    async def adecide(
        self, batch: Batch, view: SchedulerView, *, config: RunnableConfig | None = None
    ) -> Decision:
        sub = RunnableLambda(lambda ids: ids, name="scheduler_subagent")
        await sub.ainvoke(batch.call_ids, config)
        return self._decision({c.call_id: "cpu" for c in batch.calls}, "asked")


def parent_chain(runs: dict[Any, dict[str, Any]], run_id: Any) -> list[str]:
    names = []
    while run_id is not None and run_id in runs:
        names.append(runs[run_id]["name"])
        run_id = runs[run_id].get("parent_run_id")
    return names


@pytest.mark.parametrize(
    ("scheduler", "mode"),
    [(Consulting(), "sync"), (Consulting(), "async"), (AsyncConsulting(), "async")],
)
def test_scheduler_runs_are_children_of_the_tools_step(scheduler: Any, mode: str) -> None:
    client = FakeLangSmith()
    tracer = LangChainTracer(client=client, project_name="devsched-test")  # type: ignore[arg-type]
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=scheduler, testbed=bed())
    run(tools_graph(node), mode, {"callbacks": [tracer]})
    tracer.wait_for_futures()
    runs = {c["id"]: c for c in client.created}
    (sub,) = [c for c in client.created if c["name"] == "scheduler_subagent"]
    chain = parent_chain(runs, sub["id"])
    assert chain == ["scheduler_subagent", "devsched.decide", "tools", "LangGraph"], chain


def test_config_is_only_passed_to_schedulers_that_accept_it() -> None:
    assert takes_config(Consulting().decide)
    assert not takes_config(Fixed().decide)
    # a plain scheduler still works in a traced graph
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=Fixed(), testbed=bed())
    with collect_runs() as cb:
        run(tools_graph(node), "sync")
    assert len(decision_runs(cb.traced_runs)) == 3


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_agentic_schedulers_sub_agent_is_a_child_run_of_the_step(mode: str) -> None:
    agentic = pytest.importorskip("langgraph_devsched.schedulers.agentic")
    fakes = pytest.importorskip("tests.agentic_fakes")
    model = fakes.ToolScriptModel(
        script=[fakes.submit({"c1": "gpu_now", "c2": "cpu", "c3": "gpu_queued"}, reason="fits")]
    )
    scheduler = agentic.AgenticScheduler(model, fallback="static")
    client = FakeLangSmith()
    tracer = LangChainTracer(client=client, project_name="devsched-test")  # type: ignore[arg-type]
    node = DeviceToolNode(TOOLS, hints=HINTS, scheduler=scheduler, testbed=bed())
    run(tools_graph(node), mode, {"callbacks": [tracer]})
    tracer.wait_for_futures()
    runs = {c["id"]: c for c in client.created}
    llm_runs = [c for c in client.created if c.get("run_type") == "llm"]
    assert llm_runs, "the sub-agent's model call was traced"
    for llm in llm_runs:
        chain = parent_chain(runs, llm["id"])
        assert chain[-2:] == ["tools", "LangGraph"], chain
    ends = {u["name"]: u for u in client.updated if u.get("run_type") == "tool"}
    assert ends["asr"]["extra"]["metadata"]["devsched.scheduler"] == "agentic"
    assert ends["ocr"]["extra"]["metadata"]["devsched.option"] == "cpu"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tracing_enabled_by_context_gets_observed_ms_without_app_code(mode: str) -> None:
    from langchain_core.tracers.context import tracing_v2_enabled

    client = FakeLangSmith()
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=Fixed(), backend=LocalBackend(gpu=DECLARED_GPU)
    )
    with tracing_v2_enabled(project_name="devsched-test", client=client):  # type: ignore[arg-type]
        run(tools_graph(node), mode)
    ends = {u["name"]: u for u in client.updated if u.get("run_type") == "tool"}
    assert sorted(ends) == ["asr", "embed", "ocr"]
    for end in ends.values():
        assert isinstance(end["extra"]["metadata"]["devsched.observed_ms"], float)


@pytest.fixture
def fresh_langsmith_env():  # type: ignore[no-untyped-def]
    """langsmith caches environment reads: clear them around a test that sets them."""
    from langsmith import utils

    utils.get_env_var.cache_clear()
    utils.get_tracer_project.cache_clear()
    yield
    utils.get_env_var.cache_clear()
    utils.get_tracer_project.cache_clear()


def test_langsmith_env_setup_gets_every_key_without_app_code(
    monkeypatch: pytest.MonkeyPatch, fresh_langsmith_env: None
) -> None:
    import langchain_core.tracers.langchain as lc_tracer

    client = FakeLangSmith()
    monkeypatch.setattr(lc_tracer, "get_client", lambda: client)  # no network
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "not-used")
    monkeypatch.setenv("DEVSCHED_LANGSMITH_CHECK", "0")  # the fake client needs no endpoint
    node = DeviceToolNode(
        TOOLS, hints=HINTS, scheduler=Fixed(), backend=LocalBackend(gpu=DECLARED_GPU)
    )
    run(tools_graph(node), "sync")
    lc_tracer.wait_for_all_tracers()
    ends = {u["name"]: u for u in client.updated if u.get("run_type") == "tool"}
    assert sorted(ends) == ["asr", "embed", "ocr"]
    for name, end in ends.items():
        meta = end["extra"]["metadata"]
        assert set(METADATA_KEYS) <= set(meta)
        assert meta["devsched.option"] == MAPPING[name]
        assert isinstance(meta["devsched.observed_ms"], float)


def _switches() -> list[tuple[str, Any]]:
    """Ways tracing is switched on or off, each a context manager factory."""
    import contextlib

    import langsmith
    from langsmith.run_trees import RunTree

    @contextlib.contextmanager
    def env(value: str) -> Any:
        from langsmith import utils

        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LANGSMITH_TRACING", value)
            utils.get_env_var.cache_clear()
            try:
                yield
            finally:
                utils.get_env_var.cache_clear()

    @contextlib.contextmanager
    def global_switch(value: bool) -> Any:
        from langsmith._internal import _context

        before = _context._GLOBAL_TRACING_ENABLED
        langsmith.configure(enabled=value)
        try:
            yield
        finally:
            _context._GLOBAL_TRACING_ENABLED = before

    parent = RunTree(name="parent", run_type="chain")
    return [
        ("nothing", contextlib.nullcontext),
        ("context on", lambda: langsmith.tracing_context(enabled=True)),
        ("context off", lambda: langsmith.tracing_context(enabled=False)),
        ("context local", lambda: langsmith.tracing_context(enabled="local")),
        ("a parent run", lambda: langsmith.tracing_context(parent=parent)),
        ("env on", lambda: env("true")),
        ("env off", lambda: env("false")),
        ("global on", lambda: global_switch(True)),
        ("global off", lambda: global_switch(False)),
    ]


@pytest.mark.parametrize("outer", [name for name, _ in _switches()])
@pytest.mark.parametrize("inner", ["nothing", "context off", "context on", "env on"])
def test_langsmith_tracing_agrees_with_langsmith(outer: str, inner: str) -> None:
    """The node's per-step read of LangSmith's switch answers as LangSmith's own function,
    whichever way tracing was switched, nested."""
    from langsmith import utils

    from langgraph_devsched.tracing import langsmith_tracing

    switches = dict(_switches())
    with switches[outer](), switches[inner]():
        assert langsmith_tracing() == bool(utils.tracing_is_enabled()), (outer, inner)
