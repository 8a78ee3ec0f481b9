"""Monitor state keys: any tool name round-trips, and malformed persisted keys are dropped.

Regression tests for issue 12 (class 2): stats that passed validation but carried malformed
keys made every later `record_step` / `snapshot` raise. Since issue 23 (class 7) a bad entry
is dropped with a warning and the rest of the file is kept (it used to start cold).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.monitor.state import KeyStats, MonitorState
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

ODD = ("a|b,c", "d=e%2C", "@x@")


def step(mon: RuntimeMonitor, bed: SimulatedTestbed, placement: dict[str, DeviceOption]) -> Batch:
    batch = Batch.of([(f"c{i}", t, ToolDeviceSpec()) for i, t in enumerate(placement)])
    calls = [(f"c{i}", t, o) for i, (t, o) in enumerate(placement.items())]
    decision = Decision({f"c{i}": o for i, o in enumerate(placement.values())})
    mon.record_step(batch, decision, bed.run_step(calls), bed.device_state())
    return batch


def odd_bed() -> SimulatedTestbed:
    return SimulatedTestbed(
        {t: ToolParams(cpu_ms=90 + i, gpu_ms=30 + i) for i, t in enumerate(ODD)},
        vram_budget_mb=8000,
    )


def test_tool_names_with_separators_round_trip(tmp_path: Path) -> None:
    bed, mon = odd_bed(), RuntimeMonitor()
    step(mon, bed, {"a|b,c": "gpu_now"})
    batch = step(mon, bed, {"a|b,c": "cpu", "d=e%2C": "gpu_now", "@x@": "cpu"})
    obs = mon.snapshot(batch)
    assert {e.tool for e in obs.estimates} == set(ODD)
    assert obs.estimate("a|b,c", "gpu_now").run_ms == 30.0  # type: ignore[union-attr]
    shapes = {o.shape: o.placement for o in obs.outcomes}
    assert shapes[("a|b,c",)] == (("a|b,c", "gpu_now"),)
    assert shapes[("@x@", "a|b,c", "d=e%2C")] == (
        ("@x@", "cpu"), ("a|b,c", "cpu"), ("d=e%2C", "gpu_now"))
    assert {t for h in obs.hints for t in h.tools} <= set(ODD)
    assert {h.kind for h in obs.hints} >= {"unknown"}
    path = tmp_path / "stats.json"
    mon.save(path)
    loaded = RuntimeMonitor.load(path)
    assert loaded.state == mon.state
    again = loaded.snapshot(batch)  # no device state yet: compare what was persisted
    assert (again.estimates, again.outcomes, again.hints) == (obs.estimates, obs.outcomes,
                                                               obs.hints)
    step(loaded, bed, {"a|b,c": "gpu_queued"})  # recording after a load still works
    assert loaded.snapshot().estimate("a|b,c", "gpu_queued") is not None


GOOD_STAT = {"run": {"count": 1, "mean": 5.0, "last_step": 1},
             "latency": {"count": 1, "mean": 5.0, "last_step": 1}, "device": "cpu"}
GOOD_OUTCOME = {"makespan": {"count": 1, "mean": 5.0, "last_step": 1}}
GOOD_CALL = {"tool": "ocr", "option": "cpu", "device": "cpu", "context": "gpu0-cpu0-low-idle",
             "run_ms": 5.0}

MALFORMED: dict[str, dict[str, Any]] = {
    "a stats key without separators": {"stats": {"bogus": GOOD_STAT}},
    "an unknown option in a stats key": {"stats": {"ocr|tpu|gpu0-cpu0-low-idle": GOOD_STAT}},
    "a bad context in a stats key": {"stats": {"ocr|cpu|nowhere": GOOD_STAT}},
    "a stats key with too many parts": {"stats": {"ocr|cpu|gpu0-cpu0-low-idle|x": GOOD_STAT}},
    "an outcome key without a placement": {"outcomes": {"ocr": GOOD_OUTCOME}},
    "an unknown option in an outcome key": {"outcomes": {"ocr|ocr=tpu": GOOD_OUTCOME}},
    "an outcome placement of other tools": {"outcomes": {"ocr|asr=cpu": GOOD_OUTCOME}},
    "a bad escape in a tool name": {"stats": {"o%zz|cpu|gpu0-cpu0-low-idle": GOOD_STAT}},
    "a last step with a bad context": {"last": {"ocr": {
        "shape": "ocr", "placement": "ocr=cpu", "bg": "idle", "makespan_ms": 5.0,
        "calls": [{**GOOD_CALL, "context": "elsewhere"}]}}},
    "a last step filed under another shape": {"last": {"asr": {
        "shape": "ocr", "placement": "ocr=cpu", "bg": "idle", "makespan_ms": 5.0,
        "calls": [GOOD_CALL]}}},
    "a probe key with an unknown background": {"probes_used": {"ocr@loud": 1}},
    "a negative probe count": {"probes_used": {"ocr@idle": -7}},
    "a negative fallback count": {"stats": {"ocr|cpu|gpu0-cpu0-low-idle": {
        **GOOD_STAT, "fallbacks": -3}}},
}


def stats_data(extra: dict[str, Any]) -> dict[str, Any]:
    return {"format": "langgraph_devsched.monitor", "version": 1, "step": 1, **extra}


def still_works(mon: RuntimeMonitor, before: int = 0) -> None:
    bed = SimulatedTestbed({"ocr": ToolParams(cpu_ms=90, gpu_ms=30)}, vram_budget_mb=8000)
    batch = step(mon, bed, {"ocr": "gpu_now"})
    obs = mon.snapshot(batch)
    assert obs.step == before + 1 and obs.estimate("ocr", "gpu_now") is not None
    if not before:
        assert [h.kind for h in obs.hints] == ["unknown"]


GOOD_KEY = "asr|cpu|gpu0-cpu0-low-idle"


def with_good_entry(bad: dict[str, Any]) -> dict[str, Any]:
    """``bad`` beside a valid stats row (and step 1): what must survive the load."""
    data = stats_data({"stats": {GOOD_KEY: GOOD_STAT}})
    for table, rows in bad.items():
        data[table] = {**data.get(table, {}), **rows}
    return data


def kept_only_the_good_entry(mon: RuntimeMonitor) -> None:
    assert mon.state == MonitorState(step=1, stats={GOOD_KEY: KeyStats.model_validate(GOOD_STAT)})
    assert mon.snapshot().estimate("asr", "cpu").run_ms == 5.0  # type: ignore[union-attr]
    still_works(mon, before=1)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_keys_in_a_file_are_dropped_and_the_rest_kept(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(with_good_entry(MALFORMED[kind])))
    with pytest.warns(MonitorStatsWarning) as caught:
        mon = RuntimeMonitor.load(path)
    [text] = [str(w.message) for w in caught]
    assert text.startswith(f"monitor stats file {path}: dropped 1 invalid entry, kept the rest "
                           f"(invalid content at {next(iter(MALFORMED[kind]))}.")
    kept_only_the_good_entry(mon)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_keys_in_a_store_are_dropped_and_the_rest_kept(kind: str) -> None:
    store = InMemoryStore()
    store.put(("langgraph_devsched", "monitor"), "stats", with_good_entry(MALFORMED[kind]))
    with pytest.warns(MonitorStatsWarning, match="store item langgraph_devsched/monitor/stats: "
                      "dropped 1 invalid entry, kept the rest"):
        mon = RuntimeMonitor.load_from_store(store)
    kept_only_the_good_entry(mon)


def test_well_formed_keys_still_load(tmp_path: Path) -> None:
    data = stats_data({
        "stats": {"ocr|cpu|gpu0-cpu0-low-idle": GOOD_STAT},
        "outcomes": {"ocr|ocr=cpu": GOOD_OUTCOME},
        "last": {"ocr": {"shape": "ocr", "placement": "ocr=cpu", "bg": "idle",
                         "makespan_ms": 5.0, "calls": [GOOD_CALL]}},
        "probes_used": {"ocr@idle": 1}, "last_shape": "ocr",
    })
    path = tmp_path / "stats.json"
    path.write_text(json.dumps(data))
    mon = RuntimeMonitor.load(path)
    assert mon.state.step == 1 and len(mon.state.stats) == 1
    assert mon.snapshot().estimate("ocr", "cpu").run_ms == 5.0  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), -5.0])
def test_non_finite_or_negative_numbers_in_a_store_are_dropped(bad: float) -> None:
    stat = {**GOOD_STAT["run"], "mean": bad}
    store = InMemoryStore()
    store.put(("langgraph_devsched", "monitor"), "stats", with_good_entry(
        {"stats": {"ocr|cpu|gpu0-cpu0-low-idle": {**GOOD_STAT, "run": stat}}}))
    why = "greater than or equal to 0" if bad == -5.0 else "finite number"
    with pytest.warns(MonitorStatsWarning, match=f"invalid content at stats.*{why}"):
        mon = RuntimeMonitor.load_from_store(store)
    kept_only_the_good_entry(mon)


def test_a_non_finite_time_is_not_a_measurement(tmp_path: Path) -> None:
    from langgraph_devsched.records import CallRecord, StepRecord
    from langgraph_devsched.telemetry import DeviceState

    mon = RuntimeMonitor()
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec()), ("c2", "asr", ToolDeviceSpec())])
    recs = (CallRecord("c1", "ocr", "cpu", "cpu", None, 0.0, float("nan"), 0.0, 0),
            CallRecord("c2", "asr", "cpu", "cpu", None, 0.0, 5.0, 0.0, 0))
    step = StepRecord(calls=recs, makespan_ms=float("nan"), vram_peak_mb=0.0)
    mon.record_step(batch, Decision({"c1": "cpu", "c2": "cpu"}), step,
                    DeviceState(True, "sim", 8000.0, 0.0, 0.0, 8))
    obs = mon.snapshot()
    assert [e.tool for e in obs.estimates] == ["asr"] and obs.outcomes == ()
    mon.save(tmp_path / "stats.json")
    assert RuntimeMonitor.load(tmp_path / "stats.json").state == mon.state
