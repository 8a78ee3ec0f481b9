"""Monitor stats persist as a JSON file and in a LangGraph store; bad data starts cold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor import RuntimeMonitor, load_file, load_store, save_file, save_store
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.monitor.state import MonitorState
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams


def warm_monitor() -> RuntimeMonitor:
    bed = SimulatedTestbed(
        {"ocr": ToolParams(cpu_ms=90, gpu_ms=30, vram_mb=700),
         "asr": ToolParams(cpu_ms=300, gpu_ms=60, vram_mb=2000)},
        vram_budget_mb=8000, noise=0.05, seed=3,
    )
    mon = RuntimeMonitor()
    batch = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
    for mapping in ({"a": "gpu_now", "b": "cpu"}, {"a": "cpu", "b": "gpu_queued"}) * 3:
        rec = bed.run_step([(cid, t, mapping[cid]) for cid, t in (("a", "ocr"), ("b", "asr"))])
        mon.record_step(batch, Decision(mapping, probe=True), rec, bed.device_state())  # type: ignore[arg-type]
    return mon


def test_file_round_trip_keeps_every_stat(tmp_path: Path) -> None:
    mon = warm_monitor()
    path = tmp_path / "stats" / "monitor.json"
    mon.save(path)
    loaded = RuntimeMonitor.load(path)
    assert loaded.state == mon.state
    assert loaded.snapshot().estimates == mon.snapshot().estimates
    data = json.loads(path.read_text())
    assert data["format"] == "langgraph_devsched.monitor" and data["version"] == 1


def test_store_round_trip(tmp_path: Path) -> None:
    mon = warm_monitor()
    store = InMemoryStore()
    save_store(mon.state, store)
    assert load_store(store) == mon.state
    assert load_store(store, namespace=("other",)) == MonitorState()  # absent: cold, no warning
    mon.save_to_store(store)
    again = RuntimeMonitor.load_from_store(store)
    assert again.snapshot().estimates == mon.snapshot().estimates


def test_missing_file_starts_cold_quietly(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    assert load_file(tmp_path / "nope.json") == MonitorState()
    assert not [w for w in recwarn if issubclass(w.category, MonitorStatsWarning)]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"format": "something-else", "version": 1}', "not a langgraph_devsched.monitor file"),
        ('{"format": "langgraph_devsched.monitor", "version": 99}', "format version 99"),
        ('{"format": "langgraph_devsched.monitor", "version": 1, "step": "many"}',
         "invalid content at step"),
        ('{"format": "langgraph_devsched.monitor", "version": 1, "stats": '
         '{"k": {"run": {"count": -1}}}}', "invalid content at stats.'k'.run.count"),
    ],
)
def test_corrupt_or_foreign_files_are_rejected_with_a_reason(
    tmp_path: Path, content: str, why: str
) -> None:
    path = tmp_path / "monitor.json"
    path.write_text(content)
    with pytest.warns(MonitorStatsWarning, match=why):
        mon = RuntimeMonitor.load(path)
    assert mon.state == MonitorState()
    assert mon.snapshot().estimates == ()  # cold, and it still works


def test_binary_garbage_starts_cold(tmp_path: Path) -> None:
    path = tmp_path / "monitor.json"
    path.write_bytes(b"\x80\x04\x95pickle")
    with pytest.warns(MonitorStatsWarning, match="cannot read it"):
        assert load_file(path) == MonitorState()


def test_store_with_foreign_item_starts_cold() -> None:
    store = InMemoryStore()
    store.put(("langgraph_devsched", "monitor"), "stats", {"format": "pickle", "version": 1})
    with pytest.warns(MonitorStatsWarning, match="not a langgraph_devsched.monitor"):
        assert load_store(store) == MonitorState()


def test_save_writes_plain_json_only(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    save_file(warm_monitor().state, path)
    assert isinstance(json.loads(path.read_text()), dict)
    assert not list(tmp_path.glob("*.tmp"))
