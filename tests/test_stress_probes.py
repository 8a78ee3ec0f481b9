"""The stress harness's scenario faults (issue 12): each probe alone, small and fast.

Every probe must (a) finish within its bound whatever the node does and (b) find nothing
wrong on fixed code. Kinds whose defect is not fixed yet are marked ``UNFIXED`` (xfail, not
strict): remove a kind from ``UNFIXED`` once its fix lands, so the test guards it.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_devsched._dev.stress import DEFAULT_RATES, FAULT_KINDS, StressConfig, run_stress
from langgraph_devsched._dev.stress import probes as probes_module
from langgraph_devsched._dev.stress.checks import Checker
from langgraph_devsched._dev.stress.faults import PROBE_FAULTS, STEP_FAULTS
from langgraph_devsched._dev.stress.kit import ProbeContext, ProbeResult
from langgraph_devsched._dev.stress.probe_llm import garbage_texts
from langgraph_devsched._dev.stress.probe_monitor import BAD_STATS, bad_stats_payload
from langgraph_devsched._dev.stress.probes import PROBES, run_probe
from langgraph_devsched._dev.stress.schedulers import MALFORMED_RETURNS, malformed_returns
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.base import Batch

UNFIXED: dict[str, str] = {}
"""``kind`` or ``kind-backend`` -> the defect still open, e.g. ``{"timeout-simulated": "a
timed-out call's CallRecord has no error"}``. Empty: on the working tree of 1 Dec 2026,
10:45 UTC every probe passed (on 8262736, before the fixes, every issue-12 kind failed)."""


OPEN_23: dict[str, str] = {}
"""Issue-23 kinds still failing (strict xfail, each naming its class: an entry must go the
moment its fix lands). On d7c8ce5 every local variant of the six failed (classes 1-5);
after the lead's fixes all pass, close() during a load included."""

NEW_23 = ("loader_error", "slow_load", "cancel_load", "close_during_call", "kept_no_room",
          "deadline_queue")


def _mark(kind: str, backend: str = "") -> pytest.MarkDecorator | tuple[()]:
    open_23 = OPEN_23.get(f"{kind}-{backend}")
    if open_23:
        return pytest.mark.xfail(reason=open_23, strict=True)
    reason = UNFIXED.get(f"{kind}-{backend}") or UNFIXED.get(kind)
    return pytest.mark.xfail(reason=f"issue 12, unfixed: {reason}", strict=False) if reason else ()


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logger = logging.getLogger("langgraph_devsched")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logger.setLevel(level)


CASES = [
    pytest.param(kind, backend, id=f"{kind}-{backend}", marks=_mark(kind, backend))
    for kind, (_, backends, _) in PROBES.items()
    for backend in backends
]


@pytest.mark.parametrize(("kind", "backend"), CASES)
def test_each_probe_finds_nothing_wrong(kind: str, backend: str, tmp_path: Path) -> None:
    for index in range(2):  # two seeds: two variants of most probes
        ctx = ProbeContext(kind, index, backend, seed=11 + index, tmp=tmp_path)
        result = run_probe(ctx, 20.0)  # past it, a problem: "did not finish (hung)"
        assert result.injected >= 1
        assert result.problems == []
        assert result.handled == result.injected


def test_a_hung_probe_is_a_bounded_violation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    release, finished = threading.Event(), threading.Event()

    def hangs(ctx: ProbeContext) -> ProbeResult:
        release.wait(60)
        finished.set()
        return ProbeResult(injected=1, handled=1)

    def raises(ctx: ProbeContext) -> ProbeResult:
        raise KeyError("boom")

    monkeypatch.setitem(PROBES, "stats_writers", (hangs, ("none",), "x"))
    result = run_probe(ProbeContext("stats_writers", 3, "none", 0, tmp_path), 0.1)
    assert not finished.is_set()  # it did not wait for the hung probe, however slow the machine
    release.set()
    assert (result.injected, result.handled) == (1, 0)
    assert result.problems == ["probe 3 did not finish within 0.1 s (hung)"]
    monkeypatch.setitem(PROBES, "stats_writers", (raises, ("none",), "x"))
    result = run_probe(ProbeContext("stats_writers", 4, "none", 0, tmp_path), 1.0)
    assert result.problems[0].startswith("probe 4 raised KeyError: 'boom' at ")
    assert probes_module.PROBES is PROBES


def test_every_new_kind_has_a_rate_an_expectation_and_a_backend() -> None:
    assert set(PROBE_FAULTS) == set(PROBES)
    assert "scheduler_returns" in STEP_FAULTS
    assert set(FAULT_KINDS) == set(DEFAULT_RATES)
    # step faults share one draw (at most one per step), so their rates sum to <= 1
    assert sum(DEFAULT_RATES[k] for k in STEP_FAULTS) <= 1.0
    # about 1,170 steps in a 10,000-call run; injections per probe as documented
    per_probe = {"cancel_gpu_sync": 2, "cross_loop": 3, "llm_hang_flood": 10,
                 "llm_garbage_flood": 4, "loader_error": 2, "slow_load": 2, "cancel_load": 2,
                 "close_during_call": 2}
    for kind in PROBE_FAULTS:
        assert DEFAULT_RATES[kind] * 1170 * per_probe.get(kind, 1) >= 120, kind
    # issue 23's kinds: over 100 on each of the two backends (one drawn per probe)
    for kind in NEW_23:
        assert PROBES[kind][1] == ("simulated", "local")
        assert DEFAULT_RATES[kind] * 1170 * per_probe.get(kind, 1) / 2 >= 120, kind


def test_malformed_returns_are_what_they_say() -> None:
    batch = Batch.of([("c1", "ocr", ToolDeviceSpec()), ("c2", "asr", ToolDeviceSpec())])
    got = {v: malformed_returns(batch, v) for v in MALFORMED_RETURNS}
    assert got["none"] is None
    assert got["dict"] == {"c1": "cpu", "c2": "cpu"}
    assert got["mapping_none"].mapping is None
    assert isinstance(got["mapping_list"].mapping, list)
    assert got["predicted_none"].predicted_ms is None
    assert dict(got["predicted_none"].mapping) == {"c1": "gpu_now", "c2": "gpu_now"}
    with pytest.raises(ValueError, match="valid: none, dict"):
        malformed_returns(batch, "nope")


def test_hostile_stats_are_hostile() -> None:
    for variant in BAD_STATS:
        payload = bad_stats_payload(variant)
        if variant == "deep_nesting":
            assert isinstance(payload, str) and payload.count("[") == 100_000
        elif variant == "huge_int":
            assert isinstance(payload, str) and "7" * 5000 in payload
        else:
            assert isinstance(payload, dict) and payload["format"] == "langgraph_devsched.monitor"


def test_garbage_answers_are_300000_characters() -> None:
    texts = garbage_texts(3)
    assert len(texts) == 5 and {len(t) for t in texts} == {300_000}


def test_a_raising_step_is_counted_lost_not_a_harness_crash() -> None:
    """Whatever the node does with malformed scheduler answers, the run completes and
    accounts for every call (answered or lost) and every injection (handled or a violation)."""
    rates = dict.fromkeys(FAULT_KINDS, 0.0)
    rates["scheduler_returns"] = 1.0
    report = run_stress(StressConfig(calls=60, seed=4, backend="simulated", rates=rates))
    assert report.calls == 60 == report.answered + report.lost
    f = next(f for f in report.faults if f.kind == "scheduler_returns")
    assert f.injected > 0
    bad = report.violations_by_kind.get("scheduler_returns", 0)
    assert f.handled == f.injected or bad > 0


def test_malformed_scheduler_answers_fall_back_on_both_backends() -> None:
    rates = dict.fromkeys(FAULT_KINDS, 0.0)
    rates["scheduler_returns"] = 1.0
    report = run_stress(StressConfig(calls=80, seed=5, backend="both", rates=rates))
    f = next(f for f in report.faults if f.kind == "scheduler_returns")
    assert f.injected > 0 and f.handled == f.injected
    assert report.lost == 0 and report.ok, report.violation_examples


def test_probes_run_from_the_driver_and_are_reported() -> None:
    rates = dict.fromkeys(FAULT_KINDS, 0.0)
    rates.update(stats_writers=1.0, max_concurrency=1.0)
    report = run_stress(StressConfig(calls=20, seed=1, backend="simulated", rates=rates))
    faults = {f.kind: f for f in report.faults}
    assert faults["stats_writers"].injected == report.steps
    assert faults["stats_writers"].backends == ["none"]
    assert faults["max_concurrency"].injected == report.steps
    assert faults["cancel_gpu_sync"].backends == []  # local only: not run here
    assert report.counters.get("probes:max_concurrency:simulated") == report.steps
    if faults["max_concurrency"].handled < report.steps:
        assert "max_concurrency" in report.failing_kinds
        assert report.violations_by_kind["max_concurrency"] > 0


def test_the_checker_expects_the_nodes_timeout_message_when_the_node_has_one() -> None:
    from langchain_core.messages import ToolMessage

    call = {"name": "asr", "args": {"payload": "h1", "fault": "hang"}, "id": "h1"}
    harness = Checker(fired={"h1": "hang"})
    harness.check_content(call, "hang", ToolMessage(
        "Error: tool asr did not answer within 0.02 s", tool_call_id="h1", status="error"))
    assert harness.violations == 0
    node = Checker(fired={"h1": "hang"}, node_timeout=True)
    node.check_content(call, "hang", ToolMessage(
        "Error: tool asr did not answer within 0.02 s", tool_call_id="h1", status="error"))
    node.check_content(call, "hang", ToolMessage(
        "Error: call h1 (asr) timed out after 0.1 s", tool_call_id="h1", status="error"))
    assert node.violations == 1
    assert node.violations_by_kind.as_dict() == {"hang": 1}


def test_a_gpu_oom_that_fired_before_a_cancellation_may_find_no_room_on_the_retry() -> None:
    """Seen in a 10,000-call run: a GPU-only call whose injected OOM fired in a cancelled
    step, whose retry then found the GPU full (as the checker already allows for a hang or
    a tool error)."""
    from langchain_core.messages import ToolMessage

    call = {"name": "rerank", "args": {"payload": "s1c3", "fault": "gpu_oom"}, "id": "s1c3"}
    checker = Checker(fired={"s1c3": "gpu_oom"})
    checker.check_content(call, "gpu_oom", ToolMessage(
        "Error: tool 'rerank' cannot run: 2000 MB of VRAM do not fit now (0 MB free), and its "
        "hints forbid the CPU", tool_call_id="s1c3", status="error"))
    checker.check_content(call, "gpu_oom", ToolMessage(
        "rerank:s1c3@cpu", tool_call_id="s1c3"))  # a GPU-only tool's OOM never runs on the CPU
    assert checker.violations == 1
    assert checker.counts.get("handled:gpu_oom") == 1


def test_a_call_beside_a_hang_may_time_out_waiting_for_its_device() -> None:
    """Under the node's call_timeout_s a hanging sync call keeps its thread (and its CPU slot
    or VRAM) past its deadline, and a loaded machine may stall a step as long; the deadline of
    a call that waits for a device covers the wait (issue 23), so "timed out" is the answer of
    a call whose own fault never fired, under the node's deadline only, and never early."""
    from types import SimpleNamespace

    from langchain_core.messages import ToolMessage

    from langgraph_devsched.records import CallRecord, StepRecord

    def calls(*ids: str) -> list[dict[str, object]]:
        return [{"name": "classify", "args": {"payload": c, "fault": "none"}, "id": c}
                for c in ids]

    timed_out = "Error: tool 'classify' timed out after 0.5 s; it was stopped waiting for"
    answers = [ToolMessage(timed_out, tool_call_id=c, status="error") for c in ("h1", "c2")]
    checker = Checker(fired={"h1": "hang"}, node_timeout=True)
    checker.check_answers(calls("h1", "c2"), {"h1": "hang", "c2": "none"}, answers)
    assert checker.violations == 0
    assert checker.counts.get("timed_out_behind_a_hang") == 1
    alone = Checker(fired={}, node_timeout=True)  # a stalled machine: it never started
    alone.check_answers(calls("c2"), {"c2": "hang"}, answers[1:])
    assert alone.violations == 0
    assert alone.counts.get("timed_out_waiting") == 1
    raised = Checker(fired={"c2": "tool_error"}, node_timeout=True)  # its fault did fire
    raised.check_answers(calls("c2"), {"c2": "tool_error"}, answers[1:])
    assert raised.violations == 1
    harness = Checker(fired={})  # no node deadline: nothing may time out
    harness.check_answers(calls("c2"), {"c2": "none"}, answers[1:])
    assert harness.violations == 1

    def report(end_ms: float) -> SimpleNamespace:
        rec = CallRecord(
            call_id="c2", tool="classify", option="cpu", device="cpu", fallback=None, start_ms=0.0,
            end_ms=end_ms, vram_reserved_mb=0.0, gpu_peers=0,
            error="timeout: tool 'classify' timed out",
        )
        step = StepRecord(calls=(rec,), makespan_ms=end_ms)
        empty = SimpleNamespace(calls=[])
        return SimpleNamespace(batch=empty, decision=SimpleNamespace(mapping={}),
                               fallbacks={}, record=step)

    lane = SimpleNamespace(ledger=object(), name="local")
    timed = Checker(fired={}, node_timeout=True, node_deadline_s=0.5)
    timed.check_report(lane, report(503.0))  # type: ignore[arg-type]
    assert timed.violations == 0
    timed.check_report(lane, report(120.0))  # type: ignore[arg-type]
    assert timed.violations == 1 and "before its 0.5 s deadline" in timed.violation_examples[0]
