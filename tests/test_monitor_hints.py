"""Exploration hints: symmetric and swap reprobes fire when they should, and hints never
name a mapping to adopt."""

from __future__ import annotations

import itertools
import json
import re

import pytest

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor import ExplorationHint, RuntimeMonitor
from langgraph_devsched.options import DeviceOption
from langgraph_devsched.records import CallRecord, StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

PARAMS = {
    "asr": ToolParams(cpu_ms=300, gpu_ms=60, vram_mb=2000, gpu_share=1.0),
    "emb": ToolParams(cpu_ms=90, gpu_ms=40, vram_mb=800, gpu_share=1.0),
    "ocr": ToolParams(cpu_ms=120, gpu_ms=50, vram_mb=1000, gpu_share=0.9),
}


def specs(**overrides: ToolDeviceSpec) -> dict[str, ToolDeviceSpec]:
    base = {t: ToolDeviceSpec(vram_mb=p.vram_mb) for t, p in PARAMS.items()}
    base.update(overrides)
    return base


def run(
    mon: RuntimeMonitor, bed: SimulatedTestbed, placement: dict[str, DeviceOption],
    spec: dict[str, ToolDeviceSpec] | None = None, probe: bool = False,
) -> Batch:
    spec = spec or specs()
    batch = Batch.of([(f"c-{t}", t, spec[t]) for t in placement])
    calls = [(f"c-{t}", t, o) for t, o in placement.items()]
    decision = Decision({f"c-{t}": o for t, o in placement.items()}, probe=probe)
    mon.record_step(batch, decision, bed.run_step(calls), bed.device_state())
    return batch


def kinds(hints: tuple[ExplorationHint, ...]) -> set[tuple[str, tuple[str, ...]]]:
    return {(h.kind, h.tools) for h in hints}


def bed() -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=8000, cpu_cores=4)


def test_first_step_proposes_the_never_measured_device() -> None:
    mon, b = RuntimeMonitor(), bed()
    batch = run(mon, b, {"asr": "gpu_now", "ocr": "cpu"})
    hints = mon.snapshot(batch).hints
    assert ("unknown", ("asr",)) in kinds(hints)  # never on the CPU
    assert ("unknown", ("ocr",)) in kinds(hints)  # never on the GPU
    unknown_asr = next(h for h in hints if h.kind == "unknown" and h.tools == ("asr",))
    assert unknown_asr.devices == ("cpu",)
    assert unknown_asr.text.startswith("`asr` has never run on the CPU")


def test_symmetric_reprobe_fires_when_the_other_device_is_missing_in_this_context() -> None:
    mon, b = RuntimeMonitor(), bed()
    run(mon, b, {"ocr": "cpu"})                       # ocr on the CPU, alone
    batch = run(mon, b, {"asr": "gpu_now", "ocr": "gpu_now"})  # ocr on the GPU beside asr
    hint = next(h for h in mon.snapshot(batch).hints if h.tools == ("ocr",))
    assert hint.kind == "symmetric" and hint.devices == ("cpu",)
    assert hint.context == "gpu1-cpu0-low-idle"
    assert "while 1 other call was on the GPU" in hint.text


def test_symmetric_reprobe_silent_once_both_sides_are_measured_under_the_context() -> None:
    mon, b = RuntimeMonitor(), bed()
    run(mon, b, {"asr": "gpu_now", "ocr": "cpu"})          # ocr on the CPU, asr on the GPU
    batch = run(mon, b, {"asr": "gpu_now", "ocr": "gpu_now"})
    ocr = [h for h in mon.snapshot(batch).hints if h.tools == ("ocr",)]
    assert ocr == []  # CPU measured under gpu1 too: both sides comparable


def test_symmetric_reprobe_fires_again_when_the_other_side_went_stale() -> None:
    mon, b = RuntimeMonitor(stale_after_steps=2), bed()
    run(mon, b, {"asr": "gpu_now", "ocr": "cpu"})
    batch = Batch.of([])
    for _ in range(3):
        batch = run(mon, b, {"asr": "gpu_now", "ocr": "gpu_now"})
    assert ("symmetric", ("ocr",)) in kinds(mon.snapshot(batch).hints)


def test_no_device_hint_for_a_device_the_tool_may_not_use() -> None:
    mon, b = RuntimeMonitor(), bed()
    pinned = specs(asr=ToolDeviceSpec(vram_mb=2000, cpu_allowed=False))
    batch = run(mon, b, {"asr": "gpu_now"}, pinned)
    assert mon.snapshot(batch).hints == ()


def test_swap_reprobe_fires_for_a_gpu_cpu_pair_until_the_exchange_ran() -> None:
    mon, b = RuntimeMonitor(), bed()
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_now", "ocr": "cpu"})
    swaps = [h for h in mon.snapshot(batch).hints if h.kind == "swap"]
    assert {h.tools for h in swaps} == {("asr", "ocr"), ("emb", "ocr")}
    asr_ocr = next(h for h in swaps if h.tools == ("asr", "ocr"))
    assert asr_ocr.devices == ("cpu", "gpu") and asr_ocr.option == "gpu_now"
    run(mon, b, {"asr": "cpu", "emb": "gpu_now", "ocr": "gpu_now"})   # the exchange
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_now", "ocr": "cpu"})
    swaps = [h for h in mon.snapshot(batch).hints if h.kind == "swap"]
    assert {h.tools for h in swaps} == {("emb", "ocr")}


def test_no_swap_reprobe_without_a_gpu_cpu_pair() -> None:
    mon, b = RuntimeMonitor(), bed()
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_queued"})
    assert not [h for h in mon.snapshot(batch).hints if h.kind == "swap"]


def test_probe_budget_is_bounded_per_shape() -> None:
    mon, b = RuntimeMonitor(probe_budget=2), bed()
    batch = run(mon, b, {"asr": "gpu_now", "ocr": "cpu"}, probe=True)
    assert {h.probes_left for h in mon.snapshot(batch).hints} == {1}
    batch = run(mon, b, {"asr": "cpu", "ocr": "cpu"}, probe=True)
    assert {h.probes_left for h in mon.snapshot(batch).hints} == {0}
    other = run(mon, b, {"emb": "gpu_now"})  # another shape has its own budget
    assert {h.probes_left for h in mon.snapshot(other).hints} == {2}


def test_expected_gain_uses_the_declared_profile() -> None:
    mon, b = RuntimeMonitor(), bed()
    declared = specs(ocr=ToolDeviceSpec(vram_mb=1000, profile=SoloProfile(cpu_ms=120, gpu_ms=40)))
    batch = run(mon, b, {"ocr": "cpu"}, declared)
    (hint,) = mon.snapshot(batch).hints
    assert hint.kind == "unknown" and hint.expected_gain_ms == 80.0  # 120 measured - 40 declared


_IMPERATIVE = re.compile(r"\b(use|run it|should|must|choose|switch|move|adopt|pick)\b", re.I)


def test_hints_never_name_a_mapping() -> None:
    mon, b = RuntimeMonitor(), bed()
    tools = list(PARAMS)
    for combo in itertools.product(("gpu_now", "gpu_queued", "cpu"), repeat=3):
        batch = run(mon, b, dict(zip(tools, combo, strict=True)))
        for hint in mon.snapshot(batch).hints:
            data = hint.model_dump(mode="json")
            assert set(data) == {"kind", "tools", "devices", "option", "context",
                                 "expected_gain_ms", "probes_left", "text"}
            assert len(hint.tools) < len(batch)           # never every call of the batch
            blob = json.dumps(data)
            assert not any(cid in blob for cid in batch.call_ids)  # no call ids at all
            assert not _IMPERATIVE.search(hint.text), hint.text
            assert hint.text and "\n" not in hint.text


def test_shared_hint_when_a_queued_call_waited_and_never_shared_the_gpu() -> None:
    mon, b = RuntimeMonitor(), bed()
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_queued"})  # shares 1.0 + 1.0: emb waits
    hint = next(h for h in mon.snapshot(batch).hints if h.kind == "shared")
    assert hint.tools == ("emb",) and hint.option == "gpu_now"
    assert hint.expected_gain_ms == pytest.approx(60.0)  # it waited for asr's 60 ms
    run(mon, b, {"asr": "gpu_now", "emb": "gpu_now"})     # now it has shared the GPU
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_queued"})
    assert not [h for h in mon.snapshot(batch).hints if h.kind == "shared"]


def test_queued_hint_when_slowed_beside_others_and_never_queued() -> None:
    mon, b = RuntimeMonitor(), bed()
    profiled = specs(
        asr=ToolDeviceSpec(vram_mb=2000, profile=SoloProfile(cpu_ms=300, gpu_ms=60)),
        emb=ToolDeviceSpec(vram_mb=800, profile=SoloProfile(cpu_ms=90, gpu_ms=40)),
    )
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_now"}, profiled)  # both slowed 2x
    queued = {h.tools: h for h in mon.snapshot(batch).hints if h.kind == "queued"}
    assert set(queued) == {("asr",), ("emb",)}
    assert queued[("emb",)].expected_gain_ms == pytest.approx(40.0)  # 80 ms beside asr, 40 alone
    run(mon, b, {"asr": "gpu_now", "emb": "gpu_queued"}, profiled)
    batch = run(mon, b, {"asr": "gpu_now", "emb": "gpu_now"}, profiled)
    assert {h.tools for h in mon.snapshot(batch).hints if h.kind == "queued"} == {("asr",)}


def test_no_queued_hint_for_a_call_that_ran_alone() -> None:
    mon, b = RuntimeMonitor(), bed()
    batch = run(mon, b, {"asr": "gpu_now", "emb": "cpu"})
    assert not [h for h in mon.snapshot(batch).hints if h.kind == "queued"]


def _one(tool: str, option: DeviceOption, run_ms: float) -> tuple[Batch, Decision, StepRecord]:
    device = "cpu" if option == "cpu" else "cuda:0"
    rec = CallRecord("c", tool, option, device, None, 0.0, run_ms, 0.0, 0)
    batch = Batch.of([("c", tool, ToolDeviceSpec())])
    return batch, Decision({"c": option}), StepRecord((rec,), run_ms)


def test_sparse_hint_only_under_noise_and_only_while_barely_measured() -> None:
    state = bed().device_state()
    quiet = RuntimeMonitor()
    for args in (_one("ocr", "cpu", 110.0), _one("ocr", "gpu_now", 100.0),
                 _one("ocr", "gpu_now", 100.0)):
        quiet.record_step(*args, state)
    assert not quiet.snapshot().hints  # noise-free: one CPU sample is enough
    noisy = RuntimeMonitor()
    for args in (_one("ocr", "cpu", 110.0), _one("ocr", "gpu_now", 90.0),
                 _one("ocr", "gpu_now", 110.0)):
        noisy.record_step(*args, state)
    (hint,) = noisy.snapshot().hints
    assert hint.kind == "sparse" and hint.devices == ("cpu",)
    assert "measured 1 time there, 110 ms" in hint.text
    for _ in range(2):
        noisy.record_step(*_one("ocr", "cpu", 110.0), state)
    noisy.record_step(*_one("ocr", "gpu_now", 100.0), state)
    assert not noisy.snapshot().hints  # three CPU samples: no longer sparse
