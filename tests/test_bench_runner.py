"""The runner: regret arithmetic on hand-computed scenarios, metrics, the monitor hook."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_devsched.bench.runner import (
    build_scheduler,
    call_ids,
    default_schedulers,
    run_benchmark,
    run_scenario,
)
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers import registry
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

pytest.importorskip("numpy")

PAIR = {"cpu_ms": 150, "gpu_ms": 100, "vram_mb": 1000, "gpu_share": 1.0}


def scenario(noise: float = 0.0) -> Scenario:
    """Batch 1: two GPU-hungry tools on a 2-core CPU; batch 2: a transfer-dominated FFT.

    Batch 1 all on the GPU now: both at half speed, 200 ms. One on the GPU, one on the CPU:
    150 ms (the optimum). FFT: GPU 40 + 2 = 42 ms, CPU 30 ms (the optimum).
    """
    return Scenario.model_validate({
        "name": "hand", "category": "parallel",
        "testbed": {"vram_budget_mb": 8000, "cpu_cores": 2, "noise": noise, "seed": 3},
        "tools": {
            "a": {"params": PAIR}, "b": {"params": PAIR},
            "fft": {"params": {"cpu_ms": 30, "gpu_ms": 2, "transfer_ms": 40}},
        },
        "workload": {"kind": "sequence", "batches": [["a", "b"], ["fft"]], "rounds": 3},
    })


def test_regret_arithmetic_is_exact() -> None:
    r = run_scenario(scenario(), ["all_gpu", "heft", "oracle"])
    assert r.optimal_makespan_ms == 180.0
    all_gpu = r.results["all_gpu"]
    assert all_gpu.round_makespans_ms == [242.0, 242.0, 242.0]
    assert all_gpu.regret_ms == 3 * 62.0
    assert all_gpu.final_makespan_ms == 242.0
    assert (all_gpu.optimal, all_gpu.rounds_to_optimal) == (False, None)
    assert all_gpu.final_mapping == {"b0/a": "gpu_now", "b0/b": "gpu_now", "b1/fft": "gpu_now"}
    heft = r.results["heft"]
    assert heft.final_mapping == {"b0/a": "gpu_now", "b0/b": "cpu", "b1/fft": "cpu"}
    assert (heft.regret_ms, heft.optimal, heft.rounds_to_optimal) == (0.0, True, 1)
    assert r.results["oracle"].regret_ms == 0.0
    assert all(x.llm_calls == 0 for x in r.results.values())


def test_noise_changes_measured_makespans_not_the_regret() -> None:
    quiet = run_scenario(scenario(0.0), ["all_gpu"]).results["all_gpu"]
    noisy = run_scenario(scenario(0.2), ["all_gpu"], rounds=5).results["all_gpu"]
    assert noisy.regret_ms == 5 * 62.0
    assert noisy.measured_makespans_ms != noisy.round_makespans_ms
    assert quiet.measured_makespans_ms == quiet.round_makespans_ms


def test_within_one_percent_counts_as_optimal_and_still_pays_regret() -> None:
    s = Scenario.model_validate({
        "name": "close", "category": "serial",
        "testbed": {"vram_budget_mb": 8000, "noise": 0},
        "tools": {"t": {"params": {"cpu_ms": 100, "gpu_ms": 100.5}}},
        "workload": {"kind": "serial", "calls": ["t"], "rounds": 4},
    })
    r = run_scenario(s, ["all_gpu"]).results["all_gpu"]
    assert (r.optimal, r.rounds_to_optimal) == (True, 1)
    assert r.regret_ms == pytest.approx(4 * 0.5)


def test_call_ids_are_readable_and_unique() -> None:
    s = Scenario.model_validate({
        "name": "ids", "category": "parallel", "testbed": {"vram_budget_mb": 1000},
        "tools": {"e": {"params": {"cpu_ms": 1, "gpu_ms": 1}}},
        "workload": {"kind": "parallel", "calls": ["e", "e"]},
    })
    assert call_ids(s) == [["e#0", "e#1"]]
    assert call_ids(scenario()) == [["b0/a", "b0/b"], ["b1/fft"]]


def test_unknown_scheduler_and_bad_rounds() -> None:
    with pytest.raises(ValueError, match="unknown scheduler\\(s\\) 'nope'; valid schedulers: "):
        run_scenario(scenario(), ["nope"])
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        run_scenario(scenario(), ["all_gpu"], rounds=0)


def test_default_schedulers_are_the_argument_free_ones_and_the_oracle() -> None:
    names = default_schedulers()
    assert {"all_gpu", "heft", "dmda", "ucb", "oracle"} <= set(names)
    for name in names:
        if name != "oracle":
            registry.make_scheduler(name)  # buildable without arguments


class FakeMonitor:
    def __init__(self) -> None:
        self.records: list[tuple[StepRecord, Batch, Decision]] = []
        self.seen_by_scheduler: list[Any] = []

    def record(self, record: StepRecord, *, batch: Batch, decision: Decision) -> None:
        self.records.append((record, batch, decision))

    def snapshot(self) -> Any:
        return {"steps": len(self.records)}


class SpyScheduler(SchedulerBase):
    """Needs a monitor; writes down the observations its view carried."""

    name = "spy"

    def __init__(self, *, monitor: FakeMonitor) -> None:
        self.monitor = monitor

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self.monitor.seen_by_scheduler.append(view.observations)
        return self._decision({c: "cpu" for c in batch.call_ids}, "spy", probe=True)


def test_monitor_hook_sees_every_step_and_feeds_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._FACTORIES, "spy", f"{__name__}:SpyScheduler")
    monitors: list[FakeMonitor] = []

    def factory(_: Scenario) -> FakeMonitor:
        monitors.append(FakeMonitor())
        return monitors[-1]

    bench = run_benchmark([scenario()], ["spy"], rounds=2, monitor_factory=factory)
    (monitor,) = monitors
    assert [len(b) for _, b, _ in monitor.records] == [2, 1, 2, 1]  # 2 rounds x 2 batches
    assert monitor.seen_by_scheduler == [{"steps": k} for k in range(4)]
    assert bench.scenarios[0].results["spy"].probes == 4
    spy = build_scheduler("spy", testbed=scenario().make_testbed(), monitor=FakeMonitor())
    assert isinstance(spy, SpyScheduler)
    assert "spy" in default_schedulers(with_monitor=True)
    skipped: dict[str, str] = {}
    assert "spy" not in default_schedulers(skipped=skipped)
    assert "needs argument(s) monitor" in skipped["spy"]


class _TickingClock:
    """A fake clock: every reading is ``step`` seconds after the previous one."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_wall_time_is_decision_time_plus_makespan() -> None:
    # each decision reads the clock twice: 10 ms apart on the fake clock
    s = scenario()
    result = run_scenario(s, ["all_gpu", "oracle"], clock=_TickingClock(0.010))
    r = result.results["all_gpu"]
    assert r.decision_ms == pytest.approx([10.0] * 6)  # 3 rounds x 2 batches
    assert r.round_wall_ms == pytest.approx([m + 20.0 for m in r.round_makespans_ms])
    best = result.optimal_makespan_ms
    assert r.wall_regret_ms == pytest.approx(sum(w - best for w in r.round_wall_ms))
    assert r.wall_regret_ms == pytest.approx(r.regret_ms + 60.0)
    oracle = result.results["oracle"]
    assert oracle.regret_ms == 0.0 and oracle.wall_regret_ms == pytest.approx(60.0)
    assert (r.decision_ms_p50, r.decision_ms_p95) == (pytest.approx(10.0), pytest.approx(10.0))


def test_decision_cost_none_counts_the_makespan_only() -> None:
    result = run_scenario(scenario(), ["all_gpu"], clock=_TickingClock(0.010),
                          decision_cost="none")
    r = result.results["all_gpu"]
    assert r.round_wall_ms == r.round_makespans_ms
    assert r.wall_regret_ms == pytest.approx(r.regret_ms)
    assert r.decision_ms == pytest.approx([10.0] * 6)  # still measured, just not counted
    with pytest.raises(ValueError, match="valid: measured, none"):
        run_scenario(scenario(), ["all_gpu"], decision_cost="free")  # type: ignore[arg-type]


def test_report_carries_wall_regret_and_decision_percentiles() -> None:
    from langgraph_devsched.bench.report import markdown_summary, to_json

    bench = run_benchmark([scenario()], ["all_gpu", "oracle"], clock=_TickingClock(0.005))
    doc = to_json(bench)
    assert doc["config"]["decision_cost"] == "measured"
    row = doc["scenarios"][0]["results"]["all_gpu"]
    assert row["decision_ms_p50"] == pytest.approx(5.0)
    assert len(row["round_wall_ms"]) == 3
    summ = doc["summary"]["all_gpu"]
    assert summ["wall_regret_ms"] == pytest.approx(summ["regret_ms"] + 30.0)
    assert {"decision_ms_p50", "decision_ms_p95"} <= set(summ)
    assert "| wall regret ms |" in markdown_summary(bench)
