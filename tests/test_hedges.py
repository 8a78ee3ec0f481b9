"""Hedged calls through the public entry points: a compiled graph with `DeviceToolNode` on the
local backend (a declared GPU, real threads and ledger) and on the simulated testbed, and the
benchmark. A hedged call gets exactly one answer under its own id, the loser is cancelled,
the ledger returns to zero, the monitor learns the loser's side; tools without the
``idempotent`` hint run once, whatever a scheduler asks."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from typer.testing import CliRunner

from langgraph_devsched import (
    DeviceToolNode,
    GpuConfig,
    InjectedDevice,
    LocalBackend,
    SimulatedTestbed,
    StepReport,
    ToolParams,
    device_hints,
)
from langgraph_devsched.cli import app
from langgraph_devsched.hedging import hedge_outcomes
from langgraph_devsched.hints import HintsError, validate_spec
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.schedulers.base import Decision, SchedulerBase
from langgraph_devsched.schedulers.policy.scheduler import DefaultPolicy
from tests.builtin_bench import run_builtin


def graph(node: DeviceToolNode) -> Any:
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def step(*ids: str, name: str = "embed") -> dict[str, Any]:
    calls = [{"name": name, "args": {"text": i}, "id": i} for i in ids]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def answers(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


class HedgeAll(SchedulerBase):
    """GPU for every call, hedged on the CPU (whatever the hints say)."""

    name = "hedge_all"

    def decide(self, batch, view):  # type: ignore[no-untyped-def]
        ids = batch.call_ids
        return Decision(dict.fromkeys(ids, "gpu_now"), "gpu, hedged on the cpu",
                        hedges=dict.fromkeys(ids, "cpu"), hedge_bound=1.5)


def local_node(tools: list[Any], scheduler: Any) -> tuple[DeviceToolNode, list[StepReport]]:
    reports: list[StepReport] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode(tools, scheduler=scheduler, backend=backend, on_step=reports.append)
    return node, reports


def test_the_idempotent_hint_is_validated_with_the_field_named():
    assert validate_spec("t", {"idempotent": True}).idempotent
    assert not validate_spec("t", {}).idempotent
    with pytest.raises(HintsError, match="idempotent"):
        validate_spec("t", {"idempotent": "sometimes"})


async def test_a_hedged_call_gets_one_answer_the_loser_cancelled_the_ledger_back_to_zero():
    runs: list[str] = []
    cancelled: list[str] = []

    @device_hints(vram_mb=600, idempotent=True)
    @tool
    async def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Embed a text; slow on this GPU."""
        runs.append(device)
        if device != "cpu":
            try:
                await asyncio.sleep(60)  # never ends on its own: the hedge must cancel it
            except asyncio.CancelledError:
                cancelled.append(device)
                raise
        return f"vector of {text} on {device}"

    node, reports = local_node([embed], HedgeAll())
    out = answers(await graph(node).ainvoke(step("a")))
    assert [(m.tool_call_id, m.content, m.status) for m in out] == [
        ("a", "vector of a on cpu", "success")]
    assert sorted(runs) == ["cpu", "cuda:0"] and cancelled == ["cuda:0"]
    ledger = node.backend.ledger  # type: ignore[attr-defined]
    assert ledger.in_use_mb == 0 and ledger.active == 0
    (report,) = reports
    assert report.record is not None
    assert [c.call_id for c in report.record.calls] == ["a"]
    assert report.record.calls[0].option == "cpu"  # the run that answered
    (hedge,) = hedge_outcomes(report.record)
    assert hedge.loser.option == "gpu_now" and hedge.censored
    assert hedge.loser.error == "cancelled"


async def test_a_failed_run_never_answers_while_the_other_succeeds():
    @device_hints(vram_mb=100, idempotent=True)
    @tool
    async def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Fails at once on the CPU, answers a little later on the GPU."""
        if device == "cpu":
            raise ValueError("no AVX here")
        await asyncio.sleep(0.01)
        return f"vector of {text} on {device}"

    node, reports = local_node([embed], HedgeAll())
    out = answers(await graph(node).ainvoke(step("a", "b")))
    assert sorted((m.tool_call_id, m.content) for m in out) == [
        ("a", "vector of a on cuda:0"), ("b", "vector of b on cuda:0")]
    assert node.backend.ledger.in_use_mb == 0  # type: ignore[attr-defined]
    record = reports[0].record
    assert record is not None and sorted(c.call_id for c in record.calls) == ["a", "b"]
    assert all(h.loser.option == "cpu" and h.censored for h in hedge_outcomes(record))


async def test_a_tool_without_the_hint_runs_once_whatever_the_scheduler_asks():
    runs: list[str] = []

    @device_hints(vram_mb=100)
    @tool
    async def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Has side effects: must run once."""
        runs.append(device)
        return "done"

    node, reports = local_node([embed], HedgeAll())
    out = answers(await graph(node).ainvoke(step("a")))
    assert [m.tool_call_id for m in out] == ["a"] and runs == ["cuda:0"]
    assert dict(reports[0].decision.hedges) == {}
    assert hedge_outcomes(reports[0].record) == ()  # type: ignore[arg-type]


def test_the_sync_path_runs_a_hedged_call_once_and_closes_its_second_run():
    runs: list[str] = []

    @device_hints(vram_mb=100, idempotent=True)
    @tool
    def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Sync tool."""
        runs.append(device)
        return "done"

    node, reports = local_node([embed], HedgeAll())
    out = answers(graph(node).invoke(step("a")))
    assert [m.tool_call_id for m in out] == ["a"] and runs == ["cuda:0"]
    assert node.backend.ledger.in_use_mb == 0  # type: ignore[attr-defined]
    (hedge,) = hedge_outcomes(reports[0].record)  # type: ignore[arg-type]
    assert hedge.censored and hedge.own_ms == 0  # never ran: nothing learnt


def test_the_monitor_hedges_an_unmeasured_side_on_the_simulated_gpu_and_learns_it():
    """The default policy, nothing declared: the first step runs the call on the GPU and on
    the CPU; the CPU run ends first and answers; the next step knows both sides."""

    @device_hints(vram_mb=300, idempotent=True)
    @tool
    def fft(text: str) -> str:
        """Transfer-dominated: faster on the CPU."""
        return f"spectrum of {text}"

    bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40,
                                              vram_mb=300)}, vram_budget_mb=8000, noise=0.0)
    monitor = RuntimeMonitor()
    reports: list[StepReport] = []
    node = DeviceToolNode([fft], testbed=bed, monitor=monitor, on_step=reports.append,
                          scheduler=DefaultPolicy(monitor=monitor))
    app_ = graph(node)
    first = answers(app_.invoke(step("a", name="fft")))
    assert [(m.tool_call_id, m.content) for m in first] == [("a", "spectrum of a")]
    assert dict(reports[0].decision.hedges) == {"a": "cpu"}
    (hedge,) = hedge_outcomes(reports[0].record)  # type: ignore[arg-type]
    assert hedge.winner is not None and hedge.winner.option == "cpu"
    assert hedge.complete and hedge.loser.on_gpu and hedge.loser.run_ms == 42.0
    obs = monitor.snapshot()
    assert {e.device for e in obs.for_tool("fft")} == {"cpu", "gpu"}
    second = answers(app_.invoke(step("b", name="fft")))
    assert [m.tool_call_id for m in second] == ["b"]
    assert dict(reports[1].decision.mapping) == {"b": "cpu"}
    assert dict(reports[1].decision.hedges) == {}


def test_bench_cli_reports_hedges_and_idle_runs(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, [
        "bench", "--scenarios", "serial_audio_features,residency_visual_suite",
        "--declare", "none", "--schedulers", "monitor", "--rounds", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "Side-effect-free tools' extra runs" in result.output
    data = json.loads(out.read_text())
    row = data["summary"]["monitor"]
    assert row["hedges"] > 0 and row["hedge_device_ms"] > 0
    assert row["idle_runs"] > 0 and row["idle_device_ms"] > 0


def test_bench_without_the_hint_runs_no_extra_run(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: s\ncategory: serial\ntestbed: {vram_budget_mb: 8000, noise: 0}\n"
        "tools:\n  fft:\n    params: {cpu_ms: 30, gpu_ms: 2, transfer_ms: 40}\n"
        "workload: {kind: serial, calls: [fft], rounds: 3}\n")
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", "--scenarios", str(scenario), "--declare",
                                      "none", "--schedulers", "monitor", "--json", str(out)])
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())["summary"]["monitor"]
    assert row["hedges"] == 0 and row["idle_runs"] == 0


async def test_idle_calibration_measures_the_other_side_between_async_steps():
    runs: list[tuple[str, str]] = []

    @device_hints(vram_mb=100, idempotent=True)
    @tool
    async def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Embed a text."""
        runs.append((text, device))
        return "vector"

    policy = DefaultPolicy(hedge=False)  # no hedge: the other side is left to idle time
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([embed], scheduler=policy, backend=backend, idle_calibration=True)
    out = answers(await graph(node).ainvoke(step("a")))
    assert [m.tool_call_id for m in out] == ["a"]
    assert node.idle is not None
    await node.idle.join()
    assert runs == [("a", "cuda:0"), ("a", "cpu")]  # the call, then its idle re-run
    assert {e.device for e in policy.monitor.snapshot().for_tool("embed")} == {"gpu", "cpu"}
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0


async def test_an_idle_run_is_cancelled_when_the_next_step_arrives():
    started = asyncio.Event()
    cancelled: list[str] = []

    @device_hints(vram_mb=100, idempotent=True)
    @tool
    async def embed(text: str, device: Annotated[str, InjectedDevice] = "cpu") -> str:
        """Never ends on the CPU."""
        if device == "cpu":
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(text)
                raise
        return "vector"

    policy = DefaultPolicy(hedge=False)
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000))
    node = DeviceToolNode([embed], scheduler=policy, backend=backend, idle_calibration=True)
    app_ = graph(node)
    await app_.ainvoke(step("a"))
    await started.wait()  # the idle run holds the CPU now
    out = answers(await app_.ainvoke(step("b")))
    assert [m.tool_call_id for m in out] == ["b"] and cancelled == ["a"]
    assert policy.monitor.censored.count("embed", "cpu") == 1
    assert backend.ledger is not None and backend.ledger.in_use_mb == 0


def test_no_idle_run_unless_the_node_is_told():
    @device_hints(vram_mb=100, idempotent=True)
    @tool
    def embed(text: str) -> str:
        """Embed a text."""
        return "vector"

    node = DeviceToolNode([embed], backend=LocalBackend(gpu=GpuConfig(vram_budget_mb=1000)))
    assert node.idle is None


def test_settle_keeps_a_call_whose_own_id_looks_like_a_second_run():
    from langgraph_devsched.hedging import hedge_id, settle
    from langgraph_devsched.records import CallRecord, StepRecord

    own = CallRecord("x~hedge", "fft", "cpu", "cpu", None, 0.0, 5.0, 0.0, 0)
    gpu = CallRecord("c1", "fft", "gpu_now", "cuda:0", None, 0.0, 45.0, 300.0, 0)
    cpu = CallRecord(hedge_id("c1"), "fft", "cpu", "cpu", None, 0.0, 28.0, 0.0, 0)
    step = settle(StepRecord((own, gpu, cpu), 45.0), {"c1": "cpu"}, bound=1.5)
    assert [c.call_id for c in step.calls] == ["x~hedge", "c1"]
    assert step.makespan_ms == 42.0  # the loser cut at 1.5 x 28 ms


def test_declare_none_keeps_the_side_effect_free_flag_of_the_builtins():
    from langgraph_devsched.bench.declare import Declare, declared_specs
    from langgraph_devsched.bench.scenario import load_scenarios

    for scenario in load_scenarios():
        specs = declared_specs(scenario.tools, Declare("none"))
        assert all(s.idempotent and s.profile is None for s in specs.values()), scenario.name


def test_the_hedge_tables_are_bounded():
    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.monitor.censored import CensoredTimes
    from langgraph_devsched.schedulers.base import Batch
    from langgraph_devsched.schedulers.policy.hedge_rule import HedgeRule
    from langgraph_devsched.telemetry import DeviceState

    device = DeviceState(gpu_available=True, gpu_name="sim", vram_budget_mb=8000,
                         vram_used_mb=0, gpu_utilization=0.0, cpu_cores=8)
    rule, censored = HedgeRule(max_tools=2), CensoredTimes(2)
    for i in range(5):
        batch = Batch.of([(f"c{i}", f"t{i}", ToolDeviceSpec(idempotent=True))])
        decided = rule.attach(Decision({f"c{i}": "gpu_now"}), batch,
                              RuntimeMonitor().snapshot(), device)
        assert dict(decided.hedges) == {f"c{i}": "cpu"}
        censored.note(f"t{i}", "cpu", 10.0)
    assert len(rule) == 2 and len(censored) == 2


def test_a_side_a_hedge_is_to_measure_is_not_run_on_a_guess():
    """Old (`--declare none`, the built-ins side-effect free): the captioner's CPU side, never
    measured, was guessed at 4x its GPU side; a probe's mapping moved it there and the step
    took 2.6 s (23x). Now such a side is left to a hedge, which measures it at its bound."""

    scenario = run_builtin("memory_diffusion_and_friends", declare="none")
    monitor = scenario.results["monitor"]
    worst = max(monitor.round_makespans_ms)
    assert worst < 1.5 * scenario.optimal_makespan_ms, monitor.round_makespans_ms
    assert monitor.regret_ms < 1_000, monitor.regret_ms
    assert monitor.hedges >= 3  # the captioner's CPU side hedged too


def test_no_hedge_needs_a_host_load_the_idle_time_measures_that_side():
    """Old: a call whose model was cold on both sides was hedged on the CPU "so that the two
    loads overlap"; the host load outlasted the GPU load and then ran to its bound:
    `residency_visual_suite` with nothing declared paid 2,525 ms of hedges in round 1. Now a
    hedge never loads (a warm host copy is hedged); idle-time calibration measures that side
    between steps."""
    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.residency import WarmModel
    from langgraph_devsched.schedulers.base import Batch
    from langgraph_devsched.schedulers.policy.hedge_rule import HedgeRule
    from langgraph_devsched.telemetry import DeviceState

    spec = ToolDeviceSpec(idempotent=True, vram_mb=500, model="sd", weights_mb=6600)
    batch = Batch.of([("c1", "edit", spec)])
    cold = DeviceState(True, "sim", 24000, 0, 0.0, 8)
    host = DeviceState(True, "sim", 24000, 0, 0.0, 8, resident=(WarmModel("sd", 6600, "cpu"),))
    rule = HedgeRule()
    obs = RuntimeMonitor().snapshot()
    assert rule.hedges(batch, {"c1": "gpu_now"}, obs, cold) == {}
    assert rule.narrowed(batch.calls[0], ("gpu_now", "cpu"), obs, cold) == ("gpu_now", "cpu")
    assert rule.hedges(batch, {"c1": "gpu_now"}, obs, host) == {"c1": "cpu"}
    scenario = run_builtin("residency_visual_suite", declare="none")
    assert scenario.results["monitor"].hedge_cost_ms < 500, scenario.results["monitor"]
