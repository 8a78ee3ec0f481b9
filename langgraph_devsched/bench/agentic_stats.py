"""Bench-side counting for the agentic scheduler: what its decisions say about the LLM.

`AgenticStats` is fed every decision of one scheduler's run (`AgenticStats.add`); decisions
that carry no consultation record (other schedulers) are ignored. `AgenticStats.summary`
gives an `AgenticSummary`: consultations, valid answers, whole-step fallbacks by cause (a
failed consultation), the guard's vetoes by kind (an answered one, not a failure),
decisions with per-call repairs, LLM latency p50/p95 per consultation, the server's prompt
cache hit rate (cached / prompt tokens), and the answer channels used. `format_agentic`
renders one line of it for the report.

>>> from langgraph_devsched.schedulers.agentic.record import AgenticDecision, ConsultationRecord
>>> stats = AgenticStats()
>>> stats.add(AgenticDecision(mapping={}, consultation=ConsultationRecord(
...     channel="json_schema", via="text", latency_ms=800, prompt_tokens=600, cached_tokens=450)))
>>> stats.add(AgenticDecision(mapping={}, fallback="scheduler_error",
...     consultation=ConsultationRecord(cause="timeout", latency_ms=30000, prompt_tokens=600)))
>>> stats.add(AgenticDecision(mapping={}, consultation=ConsultationRecord(cached=True)))
>>> s = stats.summary()
>>> s.consultations, s.valid_answers, s.fallbacks, s.cached_decisions, s.cache_hit_rate
(2, 1, {'timeout': 1}, 1, 0.375)
>>> print(format_agentic("agentic", s).replace(", LLM", ",\\nLLM"))
agentic: 1/2 valid answers (50%), fallbacks timeout=1, 1 cached,
LLM p50 15400 ms p95 28540 ms, prompt cache 38%, channels free=1, json_schema=1
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

MAX_VETO_FIGURES = 200
"""Vetoes whose two figures a summary keeps (every veto is counted)."""
EXACT_TIE_MS = 0.5
"""An exact difference within this is no difference (float residue, not a win or a loss)."""


class AgenticSummary(BaseModel):
    """What one agentic scheduler's decisions recorded over a run."""

    decisions: int = Field(description="decisions that carry a consultation record")
    consultations: int = Field(description="decisions that consulted the model")
    cached_decisions: int = Field(description="decisions reused from the cache (no LLM call)")
    skipped: dict[str, int] = Field(
        default_factory=dict,
        description="decisions made without asking the model, by why (probe, one_candidate)",
    )
    valid_answers: int = Field(description="consultations whose answer was parsed and used")
    valid_rate: float | None = Field(description="valid_answers / consultations")
    answered: int = Field(
        0, description="consultations the model answered validly: its answer used, or "
                       "vetoed by the guard (the guard's verdict is the scheduler's)")
    answered_rate: float | None = Field(None, description="answered / consultations")
    fallbacks: dict[str, int] = Field(
        description="failed consultations by cause (timeout, llm_error, no_answer, busy): "
                    "the fallback decided the whole step; a veto is not one (``vetoes``)")
    repaired: int = Field(description="used answers that needed per-call repairs")
    llm_calls: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    prompt_tokens: int
    cached_tokens: int
    cache_hit_rate: float | None = Field(description="cached_tokens / prompt_tokens")
    channels: dict[str, int] = Field(description="answer channel of each consultation")
    answered_via: dict[str, int] = Field(description="where each valid answer was found")
    compared: int = Field(0, description="valid consultations compared with the policy's mapping")
    agreed: int = Field(0, description="... whose answer was the classical policy's mapping")
    agreement_rate: float | None = Field(None, description="agreed / compared")
    deviations: int = Field(0, description="compared consultations that deviated")
    deviations_won: int = Field(0, description="deviations that beat the policy's mapping")
    deviations_lost: int = Field(0, description="deviations that did worse than it")
    deviation_won_ms: float = Field(
        0.0, description="sum over deviations of the policy's makespan minus the answer's")
    deviations_measured: int = Field(
        0, description="deviations judged by measurement (both mappings ran), else the twin")
    deviations_exact: int = Field(
        0, description="deviations the simulated bench judged exactly (`exact_policy_ms`); 0 "
                       "outside it")
    deviations_won_exact: int = Field(
        0, description=f"... that beat the policy's mapping by more than {EXACT_TIE_MS} ms")
    deviations_lost_exact: int = Field(
        0, description=f"... that did worse than it by more than {EXACT_TIE_MS} ms")
    deviation_won_exact_ms: float = Field(
        0.0, description="sum over the deviations judged exactly of the policy's mapping's "
                         "noise-free makespan from the step's state minus the answer's: what "
                         "each deviation won, with no noise and no estimate (the bench's "
                         "ground truth, never shown to the scheduler)")
    guard_waived: int = Field(0, description="answers the guard let through as hinted probes")
    guarded_measured: int = Field(
        0, description="vetoed answers judged by measurement (their mapping ran, e.g. slower "
                       "than the fastest measured one of the shape), not by the twin")
    cached_deviations: int = Field(
        0, description="cached decisions that reused a deviation (counted in the deviations)")
    explorations: int = Field(
        0, description="deviations whose mapping had never run: probes of the shape's budget")
    exploration_cost_ms: float = Field(
        0.0, description="what the explorations lost against the policy's mapping, ms (>= 0)")
    exploration_predicted_ms: float = Field(
        0.0, description="what the explorations were predicted to cost before they ran, ms")
    vetoes: dict[str, int] = Field(
        default_factory=dict,
        description="answers the guard vetoed, by kind (each an answered consultation, never "
                    "a fallback): refuted (measured slower than the fastest measured "
                    "mapping), budget (predicted cost over the shape's exploration budget) "
                    "or twin (predicted beyond guard_ratio of the best mapping)")
    veto_figures: list[tuple[str, float, float]] = Field(
        default_factory=list,
        description=f"each veto (first {MAX_VETO_FIGURES}): kind, the answer's ms (measured "
                    "or predicted cost) and the limit it broke (fastest measured ms, budget)")
    latencies_ms: list[float] = Field(
        default_factory=list, description="each consultation's latency, in order"
    )


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[max(0, min(98, round(q * 100) - 1))]


class AgenticStats:
    """Accumulates the consultation records of one scheduler's decisions."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.exact: list[float] = []
        """What each deviation judged exactly won (`exact_policy_ms`), in order."""
        self.repaired = 0

    def add(self, decision: Any, *, exact_won_ms: float | None = None) -> None:
        """Count ``decision`` if it carries a consultation record (else ignore it);
        ``exact_won_ms``: what its deviation won, judged exactly by the bench."""
        record = getattr(decision, "consultation", None)
        if record is None:
            return
        if exact_won_ms is not None and ran_deviation(decision) is not None:
            self.exact.append(exact_won_ms)
        self.records.append(record)
        if not record.cached and record.cause is None and decision.fallback == "invalid_decision":
            self.repaired += 1

    def summary(self) -> AgenticSummary | None:
        """None when no decision had a record (not an agentic scheduler)."""
        if not self.records:
            return None
        asked = [r for r in self.records if r.asked]
        valid = [r for r in asked if r.valid]
        compared = [r for r in valid if getattr(r, "agrees", None) is not None]
        devs = [r.deviation for r in compared if not r.agrees and r.deviation is not None]
        reused = [r.deviation for r in self.records if r.cached and r.cause is None
                  and getattr(r, "deviation", None) is not None]
        devs += reused
        won = [d.won_ms for d in devs if d.won_ms is not None]
        exact = self.exact
        explored = [d for d in devs if getattr(d, "explored", False)]
        vetoes = [r.veto for r in asked if getattr(r, "veto", None) is not None]
        agreed = sum(1 for r in compared if r.agrees)
        return _with_rates(
            decisions=len(self.records),
            consultations=len(asked),
            cached_decisions=sum(1 for r in self.records if r.cached),
            skipped=dict(Counter(str(r.skipped) for r in self.records
                                 if r.skipped is not None and not r.cached)),
            valid_answers=len(valid),
            answered=sum(1 for r in asked if getattr(r, "answered", r.valid)),
            fallbacks=dict(Counter(str(r.cause) for r in asked if r.cause is not None)),
            repaired=self.repaired,
            llm_calls=sum(int(r.llm_calls) for r in asked),
            prompt_tokens=sum(int(r.prompt_tokens) for r in asked),
            cached_tokens=sum(int(r.cached_tokens) for r in asked),
            channels=dict(Counter(str(r.channel) for r in asked)),
            answered_via=dict(Counter(str(r.via) for r in valid)),
            compared=len(compared),
            agreed=agreed,
            deviations=len(compared) - agreed + len(reused),
            cached_deviations=len(reused),
            explorations=len(explored),
            exploration_cost_ms=sum(max(0.0, -(d.won_ms or 0.0)) for d in explored),
            exploration_predicted_ms=sum(max(0.0, d.predicted_cost_ms or 0.0)
                                         for d in explored),
            vetoes=dict(Counter(v.kind for v in vetoes)),
            veto_figures=[(v.kind, round(v.answer_ms, 3), round(v.limit_ms, 3))
                          for v in vetoes[:MAX_VETO_FIGURES]],
            deviations_won=sum(1 for w in won if w > 0),
            deviations_lost=sum(1 for w in won if w < 0),
            deviation_won_ms=sum(won),
            deviations_measured=sum(1 for d in devs if d.by == "measured"),
            deviations_exact=len(exact),
            deviations_won_exact=sum(1 for w in exact if w > EXACT_TIE_MS),
            deviations_lost_exact=sum(1 for w in exact if w < -EXACT_TIE_MS),
            deviation_won_exact_ms=sum(exact),
            guard_waived=sum(1 for r in valid if getattr(r, "guard_waived", None)),
            guarded_measured=sum(1 for r in asked if getattr(r, "veto", None) is not None
                                 and getattr(r, "guard_by", "twin") == "measured"),
            latencies_ms=[float(r.latency_ms) for r in asked],
        )


_RATES = ("valid_rate", "answered_rate", "latency_p50_ms", "latency_p95_ms", "cache_hit_rate",
          "agreement_rate")


def _with_rates(**counts: Any) -> AgenticSummary:
    """The summary of ``counts``, its rates and percentiles derived from them."""
    asked, prompt, compared = counts["consultations"], counts["prompt_tokens"], counts["compared"]
    return AgenticSummary(
        **{**counts, **{k: round(counts[k], 3) for k in (
            "deviation_won_ms", "deviation_won_exact_ms", "exploration_cost_ms",
            "exploration_predicted_ms")}},
        valid_rate=counts["valid_answers"] / asked if asked else None,
        answered_rate=counts["answered"] / asked if asked else None,
        latency_p50_ms=_percentile(counts["latencies_ms"], 0.5),
        latency_p95_ms=_percentile(counts["latencies_ms"], 0.95),
        cache_hit_rate=counts["cached_tokens"] / prompt if prompt else None,
        agreement_rate=counts["agreed"] / compared if compared else None,
    )


def summarize(decisions: Iterable[Any]) -> AgenticSummary | None:
    """`AgenticStats.summary` of ``decisions``."""
    stats = AgenticStats()
    for decision in decisions:
        stats.add(decision)
    return stats.summary()


def merge(summaries: Iterable[AgenticSummary | None]) -> AgenticSummary | None:
    """One summary over several runs (e.g. every scenario): counts summed, the p50/p95 over
    every consultation of every run."""
    found = [s for s in summaries if s is not None]
    if not found:
        return None
    counts: dict[str, Any] = {}
    for name in AgenticSummary.model_fields:
        values = [getattr(s, name) for s in found]
        if name in _RATES:
            continue
        if isinstance(values[0], dict):
            counts[name] = dict(sum((Counter(v) for v in values), Counter()))
        elif isinstance(values[0], list):
            counts[name] = [x for v in values for x in v]
            if name == "veto_figures":
                counts[name] = counts[name][:MAX_VETO_FIGURES]
        else:
            counts[name] = sum(values)
    return _with_rates(**counts)


def format_agentic(name: str, s: AgenticSummary) -> str:
    """One report line for scheduler ``name``."""

    def kv(d: dict[str, int]) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(d.items())) or "none"

    rate = f" ({s.valid_rate:.0%})" if s.valid_rate is not None else ""
    parts = [
        f"{name}: {s.valid_answers}/{s.consultations} valid answers{rate}",
        f"fallbacks {kv(s.fallbacks)}",
    ]
    if s.answered != s.valid_answers:
        parts.insert(1, f"answered by the model {s.answered}/{s.consultations} "
                        f"({s.answered_rate or 0:.0%}, the guard vetoed "
                        f"{s.answered - s.valid_answers})")
    if s.repaired:
        parts.append(f"{s.repaired} repaired")
    parts.append(f"{s.cached_decisions} cached")
    if s.skipped:
        parts.append(f"not asked {kv(s.skipped)}")
    if s.latency_p50_ms is not None and s.latency_p95_ms is not None:
        parts.append(f"LLM p50 {s.latency_p50_ms:.0f} ms p95 {s.latency_p95_ms:.0f} ms")
    if s.cache_hit_rate is not None:
        parts.append(f"prompt cache {s.cache_hit_rate:.0%}")
    parts.append(f"channels {kv(s.channels)}")
    if s.compared:
        parts.append(
            f"agreement with the policy {s.agreed}/{s.compared} ({s.agreement_rate:.0%}), "
            f"deviations {s.deviations}: {s.deviations_won} won, {s.deviations_lost} lost, "
            f"net {s.deviation_won_ms:+.0f} ms ({s.deviations_measured} measured)"
        )
    if s.deviations_exact:
        parts.append(
            f"exactly (noise-free, from each step's state): {s.deviations_won_exact} won, "
            f"{s.deviations_lost_exact} lost, net {s.deviation_won_exact_ms:+.0f} ms")
    if s.explorations or s.vetoes:
        parts.append(
            f"exploration {s.explorations} probes, cost {s.exploration_cost_ms:.0f} ms "
            f"(predicted {s.exploration_predicted_ms:.0f} ms), vetoes {kv(s.vetoes)}")
    if s.guard_waived:
        parts.append(f"{s.guard_waived} hinted probes past the guard")
    if s.guarded_measured:
        parts.append(f"{s.guarded_measured} guarded by measurement")
    return ", ".join(parts)


def ran_deviation(decision: Any) -> Any:
    """The `Deviation` that ``decision`` ran (a used answer, or a cached reuse of one, that
    is not the policy's mapping); None where the policy's mapping ran or nothing deviated."""
    record = getattr(decision, "consultation", None)
    if record is None or record.cause is not None or getattr(record, "veto", None) is not None:
        return None
    return getattr(record, "deviation", None)


def _policy_options(deviation: Any, call_ids: Sequence[str], gpu_count: int
                   ) -> tuple[list[str], dict[str, int] | None] | None:
    """The options (in ``call_ids`` order) and, on several GPUs, the GPU of each GPU-placed
    call of ``deviation``'s policy mapping (spelled ``gpu_now@1`` there); None where it
    does not name them all."""
    from langgraph_devsched.schedulers.agentic.gpu_choice import split

    options, gpus = [], {}
    for call in call_ids:
        value = deviation.policy.get(call)
        if value is None:
            return None
        option, gpu = split(str(value))
        options.append(option)
        if option != "cpu" and gpu_count > 1:
            if gpu is None or not 0 <= gpu < gpu_count:
                return None
            gpus[call] = gpu
    return options, (gpus if gpu_count > 1 else None)


def exact_policy_ms(bed: Any, batch: Any, decision: Any) -> float | None:
    """Where ``decision`` runs a deviation: the policy's mapping's noise-free makespan for
    ``batch`` from ``bed``'s state now, before the step runs (`SimulatedTestbed.makespan`:
    the oracle's physics, changing nothing). The step's own noise-free makespan less this
    is what the deviation won with no noise and no estimate; the scheduler's own figure
    (`Deviation.won_ms`) judges one noisy run against a mean of others. None: no deviation
    ran, or its policy mapping names an option the bench cannot price."""
    deviation = ran_deviation(decision)
    if deviation is None or not getattr(deviation, "policy", None):
        return None
    mapped = _policy_options(deviation, batch.call_ids, int(getattr(bed, "gpu_count", 1)))
    if mapped is None:
        return None
    options, gpus = mapped
    calls = [(c.call_id, c.tool, o) for c, o in zip(batch.calls, options, strict=True)]
    return float(bed.makespan(calls, gpus=gpus))
