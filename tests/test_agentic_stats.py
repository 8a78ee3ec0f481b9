"""Bench-side counting of the agentic scheduler's consultations (`bench.agentic_stats`)."""

from __future__ import annotations

import statistics

from langchain_core.messages import AIMessage

from langgraph_devsched.bench.agentic_stats import AgenticStats, format_agentic, merge
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.telemetry import DeviceState
from tests.agentic_fakes import ToolScriptModel
from tests.test_agentic import ByTool

VIEW = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8))


def answer(ids: list[str], cached: int) -> AIMessage:
    text = '{"assignments": {' + ", ".join(f'"{i}": "cpu"' for i in ids) + '}, "reason": "r"}'
    usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110,
             "input_token_details": {"cache_read": cached}}
    return AIMessage(text, usage_metadata=usage)  # type: ignore[arg-type]


def test_counts_valid_answers_fallbacks_latency_and_prompt_cache() -> None:
    now = [0.0]
    model = ToolScriptModel(script=[answer(["a"], 0), answer(["b"], 80), AIMessage("no idea")])

    def clock() -> float:
        now[0] += 0.25  # every reading of the clock is 250 ms later
        return now[0]

    scheduler = AgenticScheduler(model, fallback=ByTool({"asr": "cpu", "ocr": "cpu"}),
                                 answer="text", clock=clock, guard_ratio=None)
    stats = AgenticStats()
    steps = [("a", "asr"), ("a2", "asr"), ("b", "ocr"), ("c", "ocr")]
    for i, (cid, tool) in enumerate(steps):
        if i == 3:
            scheduler.clear_cache()
        decision = scheduler.decide(Batch.of([(cid, tool, ToolDeviceSpec())]), VIEW)
        stats.add(decision)
    stats.add(Decision(mapping={"x": "cpu"}))  # another scheduler's: ignored

    s = stats.summary()
    assert s is not None
    assert (s.decisions, s.consultations, s.cached_decisions, s.valid_answers) == (4, 3, 1, 2)
    assert s.fallbacks == {"no_answer": 1} and s.channels == {"text": 3}
    assert s.answered_via == {"text": 2}
    latencies = [r.latency_ms for r in stats.records if not r.cached]
    assert s.latency_p50_ms == statistics.median(latencies) and s.latency_p50_ms > 0
    assert s.latency_p95_ms is not None and s.latency_p95_ms <= max(latencies)
    # two answers read 100 prompt tokens each (80 cached once); "no idea" reports no usage
    assert (s.prompt_tokens, s.cached_tokens) == (200, 80)
    assert s.cache_hit_rate == 0.4
    line = format_agentic("agentic", s)
    assert line.startswith("agentic: 2/3 valid answers (67%), fallbacks no_answer=1, 1 cached")


def test_no_records_no_summary_and_merge_adds_up() -> None:
    assert AgenticStats().summary() is None and merge([None]) is None
    stats = AgenticStats()
    model = ToolScriptModel(script=[answer(["a"], 50)])
    scheduler = AgenticScheduler(model, fallback=ByTool({"asr": "cpu"}), guard_ratio=None)
    stats.add(scheduler.decide(Batch.of([("a", "asr", ToolDeviceSpec())]), VIEW))
    one = stats.summary()
    total = merge([one, one, None])
    assert total is not None and one is not None
    assert (total.consultations, total.valid_answers, total.prompt_tokens) == (2, 2, 200)
    assert total.cache_hit_rate == one.cache_hit_rate == 0.5


def test_merge_of_two_runs_is_the_summary_of_all_their_decisions() -> None:
    """Every field merged (counts, causes, channels, deviations, latencies): what one run
    of both decision lists would have said."""
    from langgraph_devsched.schedulers.agentic.exploration import Veto
    from langgraph_devsched.schedulers.agentic.record import (
        AgenticDecision,
        ConsultationRecord,
        Deviation,
    )

    def decided(**kw: object) -> AgenticDecision:
        return AgenticDecision(mapping={}, consultation=ConsultationRecord(**kw))  # type: ignore[arg-type]

    first = [decided(via="text", latency_ms=900, prompt_tokens=300, cached_tokens=100,
                     channel="json_schema", agrees=True),
             decided(cause="timeout", latency_ms=30000), decided(cached=True)]
    second = [decided(via="text", latency_ms=1200, agrees=False, guard_waived="swap",
                      deviation=Deviation(twin_won_ms=-12.5)),
              decided(via="text", veto=Veto("twin", 900.0, 90.0), latency_ms=800),
              decided(via="text", veto=Veto("refuted", 120.0, 90.0), latency_ms=700,
                      guard_by="measured"),
              decided(skipped="probe")]
    stats = [AgenticStats(), AgenticStats(), AgenticStats()]
    for d in first:
        stats[0].add(d)
        stats[2].add(d)
    for d in second:
        stats[1].add(d)
        stats[2].add(d)
    merged = merge([stats[0].summary(), None, stats[1].summary()])
    assert merged is not None and merged == stats[2].summary()
    assert merged.fallbacks == {"timeout": 1} and merged.deviations_lost == 1
    assert merged.vetoes == {"twin": 1, "refuted": 1}  # answered, not failed
    assert merged.skipped == {"probe": 1} and merged.agreement_rate == 0.5
    assert merged.guarded_measured == 1
    line = format_agentic("agentic", merged)
    assert "1 guarded by measurement" in line
    assert (merged.answered, merged.valid_answers) == (4, 2)  # two used, two vetoed
    both = AgenticStats()
    both.add(decided(via="text", latency_ms=900))
    both.add(decided(via="text", veto=Veto("refuted", 120.0, 90.0), guard_by="measured",
                     latency_ms=900))
    both.add(decided(cause="timeout", latency_ms=30000))
    s = both.summary()
    assert s is not None and (s.valid_answers, s.answered, s.consultations) == (1, 2, 3)
    assert format_agentic("agentic", s).startswith(
        "agentic: 1/3 valid answers (33%), answered by the model 2/3 (67%, the guard vetoed 1), "
        "fallbacks timeout=1")
