"""The whole-run reference on several GPUs (`bench.horizon_gpus`): the least any sequence of
placements (option and GPU of every call) and of loads between steps pays, proven against a
brute force on tiny cases; labelled inexact where its budget cuts it."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from langgraph_devsched.bench import horizon_gpus, runner
from langgraph_devsched.bench.horizon import whole_run_reference
from langgraph_devsched.bench.report import to_json
from langgraph_devsched.bench.runner import (
    BenchResult,
    run_scenario,
    scenario_batches,
    scenario_reference,
    scenario_whole_run,
)
from langgraph_devsched.bench.scenario import Scenario
from langgraph_devsched.cli import app
from langgraph_devsched.options import DEVICE_OPTIONS
from tests.brute_force import beside_states, idle_states


def _tiny(rng: random.Random, physics: str) -> tuple[Scenario, int]:
    """Two or three GPUs of different sizes, two tools with models (one sometimes pinned to
    a GPU), one or two short steps a round."""
    tools: dict[str, Any] = {}
    for name in ("a", "b"):
        tools[name] = {"params": {
            "cpu_ms": rng.choice([300, 900, 1500]), "gpu_ms": rng.choice([60, 200]),
            "transfer_ms": rng.choice([0, 20]), "vram_mb": rng.choice([500, 1500]),
            "gpu_share": rng.choice([0.5, 1.0]), "weights_mb": rng.choice([2000, 3500]),
            "load_gpu_ms": rng.choice([400, 1200, 2500]),
            "load_cpu_ms": rng.choice([0, 300])}}
    if rng.random() < 0.4:
        tools["b"]["hints"] = {"gpus": [1]}
    gpus: list[dict[str, Any]] = [{"vram_mb": rng.choice([3000, 4500])},
                                  {"vram_mb": rng.choice([6000, 9000]),
                                   "speed": rng.choice([1.0, 1.5])}]
    if rng.random() < 0.3:
        gpus.append({"vram_mb": 2500, "background": {"vram_mb": 500, "gpu_share": 0.3}})
    if rng.random() < 0.3:
        gpus[1]["resident"] = ["a"]
    batches, rounds = rng.choice([([["a", "b"]], 2), ([["a"], ["b"]], 2), ([["b"], ["a"]], 1),
                                  ([["a"]], 3)])
    return Scenario.model_validate({
        "name": "tiny_gpus", "category": "residency",
        "testbed": {"gpus": gpus, "cpu_cores": 2, "noise": 0, "physics": physics},
        "tools": tools, "workload": {"kind": "sequence", "batches": batches, "rounds": rounds,
                                     "think_ms": rng.choice([0.0, 1000.0, 3000.0])}}), rounds


def _brute_force(scenario: Scenario, rounds: int, *, beside: bool = True,
                 ) -> tuple[float, list[float]]:
    """The least total over every sequence of placements and loads between steps or beside a
    step (``beside``: one load started with a step, then none between those steps), each
    step run on the testbed, and each round's least."""
    batches = scenario_batches(scenario)
    steps = [b for _ in range(rounds) for b in batches]
    bed = scenario.make_testbed(noise=0.0)
    k = bed.gpu_count
    least = [float("inf")]
    per_round = [float("inf")] * rounds

    def walk(i: int, spent: list[float]) -> None:
        if i == len(steps):
            least[0] = min(least[0], sum(spent))
            per_round[:] = [min(x, y) for x, y in zip(per_round, spent, strict=True)]
            return
        batch, state = steps[i], bed.residency()
        per_call = []
        for call in batch.calls:
            pins = call.spec.gpus
            per_call.append([(o, g) for o in DEVICE_OPTIONS
                             for g in ([None] if o == "cpu" else
                                       [g for g in range(k) if pins is None or g in pins])])
        for placement in itertools.product(*per_call):
            bed.restore(state)
            calls = [(c.call_id, c.tool, o) for c, (o, _) in zip(batch.calls, placement,
                                                                   strict=True)]
            gpus = {c.call_id: g for c, (_, g) in zip(batch.calls, placement, strict=True)
                    if g is not None}
            span = bed.run_step(calls, gpus=gpus).makespan_ms
            r = i // len(batches)
            think = scenario.workload.think_ms
            ways = [(s, 0.0) for s in idle_states(bed, think if i + 1 < len(steps) else 0.0)]
            if beside and i + 1 < len(steps):
                on_gpus: dict[int, list[str]] = {}  # several GPUs: the calls placed on each
                for c, (_, g) in zip(batch.calls, placement, strict=True):
                    if g is not None:
                        on_gpus.setdefault(g, []).append(c.tool)
                ways += beside_states(bed, on_gpus, span, think)
            for after, delay in ways:
                bed.restore(after)
                more = list(spent)
                more[r] += span + delay
                walk(i + 1, more)

    walk(0, [0.0] * rounds)
    return least[0], per_round


@pytest.mark.parametrize("case", range(17))
def test_the_whole_run_reference_on_several_gpus_is_the_least_any_sequence_pays(
        case: int) -> None:
    rng = random.Random(100 + case)
    physics = ["processor_sharing", "time_slicing", "idle_queue", "bandwidth"][case % 4]
    scenario, rounds = _tiny(rng, physics)
    whole = scenario_whole_run(scenario, rounds)
    least, per_round = _brute_force(scenario, rounds)
    assert whole.exact
    assert whole.total_ms == pytest.approx(least, rel=1e-12)
    ref = scenario_reference(scenario, rounds)  # each round's least, from every state
    assert ref.exact and list(ref.round_ms) == pytest.approx(per_round, rel=1e-12)
    # the public search on the testbed gives the same figure, and leaves the testbed as it was
    bed = scenario.make_testbed(noise=0.0)
    before = bed.residency()
    direct = whole_run_reference(bed, scenario_batches(scenario), rounds,
                                 think_ms=scenario.workload.think_ms)
    assert direct.total_ms == whole.total_ms and bed.residency() == before
    assert bed.now_ms == 0.0


@pytest.mark.parametrize("case", [1, 2, 10, 14, 15, 16])
def test_without_loads_beside_a_step_the_search_misses_the_least_on_some_tiny_cases(
        case: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The brute force above walks loads beside a step; a search without them (a mutant)
    pays more on these cases (of the 17, only these), so that test would catch it."""
    rng = random.Random(100 + case)
    physics = ["processor_sharing", "time_slicing", "idle_queue", "bandwidth"][case % 4]
    scenario, rounds = _tiny(rng, physics)
    batches, think = scenario_batches(scenario), scenario.workload.think_ms
    full = horizon_gpus.gpus_reference(scenario.make_testbed(noise=0.0), batches, rounds, think)
    monkeypatch.setattr(horizon_gpus._Search, "beside", lambda *_: [])
    mutant = horizon_gpus.gpus_reference(scenario.make_testbed(noise=0.0), batches, rounds,
                                         think)
    assert full.exact and mutant.exact
    assert mutant.total_ms > full.total_ms + 1.0


def test_a_model_loaded_on_the_gpu_it_fits_pays_off_where_the_per_step_optimum_stays_cold(
        ) -> None:
    """Three steps of one cold model that fits only on GPU 1: the per-step optimum stays on
    the CPU (2,600 ms a step); the whole run runs the first on the CPU while the model loads
    on GPU 1 beside it (3,000 ms: the next step waits 400 ms), then runs it warm (220 ms):
    3,440 ms, below loading it with the first call (3,220 + 2 x 220 = 3,660 ms)."""
    scenario = Scenario.model_validate({
        "name": "cold_on_gpu1", "category": "residency",
        "testbed": {"gpus": [{"vram_mb": 2000}, {"vram_mb": 12000}], "noise": 0},
        "tools": {"asr": {"params": {"cpu_ms": 2600, "gpu_ms": 220, "vram_mb": 700,
                                     "weights_mb": 3100, "load_gpu_ms": 3000}}},
        "workload": {"kind": "sequence", "batches": [["asr"]] * 3, "rounds": 1,
                     "think_ms": 0}})
    result = run_scenario(scenario, ["heft", "static"], decision_cost="none")
    assert result.total_reference_exact and result.reference_exact
    assert result.total_reference_ms == pytest.approx(3440.0)
    assert result.optimal_devices == {"b0/asr": "cpu", "b1/asr": "cuda:1", "b2/asr": "cuda:1"}
    for r in result.results.values():
        assert r.total_ratio is not None and r.total_ratio >= 1.0 - 1e-9
        assert r.below_reference == []


def test_beyond_its_budget_the_search_says_so_in_the_json_and_the_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    scenario, rounds = _tiny(rng, "processor_sharing")
    scenario = scenario.model_copy(update={"name": "tiny_budget"})
    exact = runner.scenario_whole_run(scenario, rounds)
    monkeypatch.setattr(horizon_gpus, "MAX_PLACEMENTS", 1)
    monkeypatch.setattr(runner, "_WHOLE_RUNS", type(runner._WHOLE_RUNS)())
    monkeypatch.setattr(runner, "_GPU_REFERENCES", type(runner._GPU_REFERENCES)())
    monkeypatch.setattr(runner, "_REFERENCES", type(runner._REFERENCES)())
    cut = runner.scenario_whole_run(scenario, rounds)
    assert exact.exact and not cut.exact
    assert cut.total_ms >= exact.total_ms - 1e-9  # a plan that exists, not a bound
    result = run_scenario(scenario, ["static"], rounds=rounds, decision_cost="none")
    data = to_json(BenchResult([result], ["static"], rounds, None, None))
    assert data["scenarios"][0]["total_reference_exact"] is False


def test_cli_bench_on_several_gpus_reports_an_exact_whole_run_reference(tmp_path) -> None:
    rng = random.Random(3)
    scenario, _ = _tiny(rng, "idle_queue")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(scenario.model_dump(mode="json", exclude_none=True)))
    out = tmp_path / "r.json"
    run = CliRunner().invoke(app, ["bench", "--scenarios", str(path), "--schedulers",
                                   "heft,static,monitor", "--decision-cost", "none",
                                   "--json", str(out)])
    assert run.exit_code == 0, run.output
    s = json.loads(out.read_text())["scenarios"][0]
    assert s["total_reference_exact"] is True and s["reference_exact"] is True
    least, per_round = _brute_force(scenario, scenario.workload.rounds)
    assert s["total_reference_ms"] == pytest.approx(least, abs=0.01)
    assert s["reference_makespans_ms"] == pytest.approx(per_round, abs=0.01)
    for r in s["results"].values():
        assert r["total_ratio"] >= 1.0 - 1e-6
