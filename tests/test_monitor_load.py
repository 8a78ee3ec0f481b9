"""Loading stats never raises, whatever the file holds; concurrent saves never collide.

Regression tests for issue 12 (class 8): deeply nested JSON (RecursionError) and huge integers
(ValueError) crashed `RuntimeMonitor.load`; concurrent saves through one fixed ``.tmp`` name
raised FileNotFoundError.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from langgraph.store.memory import InMemoryStore

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor import RuntimeMonitor, load_file, persist
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.monitor.state import MonitorState
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

HEAD = '{"format": "langgraph_devsched.monitor", "version": 1, '


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ((HEAD + '"stats": ' + "{\"k\": " * 100_000 + "1" + "}" * 100_000 + "}").encode(),
         "nested too deeply"),
        ((HEAD + '"step": ' + "9" * 5000 + "}").encode(), "not valid JSON"),
        ((HEAD + '"step": 1, "resets": NaN}').encode(), "not valid JSON"),
        (b"\xff\xfe\x00\x81 not text \xc3\x28", "cannot read it"),
        (bytes(range(256)) * 64, "cannot read it"),
    ],
    ids=["nested-100k", "nested-in-stats", "5000-digit-int", "nan", "non-utf8", "binary"],
)
def test_hostile_files_start_cold_with_a_warning(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "stats.json"
    path.write_bytes(content)
    with pytest.warns(MonitorStatsWarning, match=f"ignored, starting cold: {why}"):
        mon = RuntimeMonitor.load(path)
    assert mon.state == MonitorState()
    assert mon.snapshot().step == 0


def test_a_file_over_the_size_cap_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stats.json"
    RuntimeMonitor().save(path)
    assert load_file(path) == MonitorState()
    monkeypatch.setattr(persist, "MAX_FILE_BYTES", 20)
    with pytest.warns(MonitorStatsWarning, match="larger than 20 bytes"):
        assert load_file(path) == MonitorState()


def test_a_directory_or_a_deep_store_item_starts_cold(tmp_path: Path) -> None:
    with pytest.warns(MonitorStatsWarning, match="cannot read it"):
        assert load_file(tmp_path) == MonitorState()
    deep: dict[str, object] = {}
    inner = deep
    for _ in range(100_000):
        inner["k"] = {}
        inner = inner["k"]  # type: ignore[assignment]
    store = InMemoryStore()
    store.put(("langgraph_devsched", "monitor"), "stats",
              {"format": "langgraph_devsched.monitor", "version": 1, "stats": deep})
    with pytest.warns(MonitorStatsWarning, match="ignored, starting cold"):
        assert RuntimeMonitor.load_from_store(store).state == MonitorState()


def warm(steps: int) -> RuntimeMonitor:
    bed = SimulatedTestbed({"ocr": ToolParams(cpu_ms=90, gpu_ms=30)}, vram_budget_mb=8000)
    mon = RuntimeMonitor()
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    for i in range(steps):
        option = "cpu" if i % 2 else "gpu_now"
        mon.record_step(batch, Decision({"c1": option}), bed.run_step([("c1", "ocr", option)]),
                        bed.device_state())
    return mon


def test_concurrent_saves_of_one_path_never_fail(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    monitors = [warm(i + 1) for i in range(8)]
    errors: list[BaseException] = []
    bad_loads: list[str] = []
    done = threading.Event()

    def saver(mon: RuntimeMonitor) -> None:
        try:
            for _ in range(50):
                mon.save(path)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        while not done.is_set():
            if not path.exists():
                continue
            state = load_file(path)  # every saved monitor has recorded a step: 0 is cold
            if not state.step:
                bad_loads.append("loaded cold while saves were under way")

    threads = [threading.Thread(target=saver, args=(m,)) for m in monitors]
    check = threading.Thread(target=reader)
    check.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    check.join()
    assert errors == []
    assert bad_loads == []
    assert load_file(path) in [m.state for m in monitors]
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]  # no temp file left


def test_a_failed_save_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "stats.json"
    warm(1).save(path)

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(persist.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        warm(2).save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]
    assert load_file(path).step == 1


def test_threads_may_share_one_monitor(tmp_path: Path) -> None:
    before = sys.getswitchinterval()
    mon = RuntimeMonitor(max_shapes=3, max_outcomes=4)
    bed = SimulatedTestbed({f"t{i}": ToolParams(cpu_ms=9, gpu_ms=3) for i in range(6)},
                           vram_budget_mb=8000)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(60):
                tools = [f"t{(i + j) % 6}", f"t{(i * j + 1) % 6}"]
                calls = [(f"{i}-{j}-{k}", t, "cpu" if k else "gpu_now")
                         for k, t in enumerate(tools)]
                batch = Batch.of([(c, t, ToolDeviceSpec()) for c, t, _ in calls])
                step = bed.run_step(calls)
                mon.record_step(batch, Decision({c: o for c, _, o in calls}), step,
                                bed.device_state())
                mon.snapshot(batch)
                mon.snapshot(tools=tools)
                if j % 20 == 0:
                    mon.save(tmp_path / "shared.json")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    try:
        sys.setswitchinterval(1e-6)  # switch threads often: races show up at once
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(before)
    assert errors == []
    assert mon.state.step == 360 and mon.sizes().shapes <= 3
    assert load_file(tmp_path / "shared.json").step > 0
