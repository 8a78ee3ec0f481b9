"""What one agentic decision records about its consultation, for traces and the benchmark.

`AgenticDecision` is a `Decision` with a `ConsultationRecord`: how the model was asked
(answer channel), where the answer was found, what it cost (latency, model calls, prompt
and cached prompt tokens), why it failed (``cause``) or what the guard vetoed (``veto``: not a
failure, the model answered), and the guard's two predictions.

>>> from langgraph_devsched.schedulers.agentic.record import AgenticDecision, ConsultationRecord
>>> d = AgenticDecision(mapping={"c1": "cpu"}, consultation=ConsultationRecord(
...     channel="json_schema", via="text", latency_ms=812.0, llm_calls=1))
>>> d.consultation.valid, d.consultation.channel
(True, 'json_schema')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langgraph_devsched.schedulers.agentic.exploration import Veto
from langgraph_devsched.schedulers.agentic.guard import distinguishes
from langgraph_devsched.schedulers.base import Decision


@dataclass
class Deviation:
    """A consultation whose mapping is not the classical policy's, and what that won (ms,
    positive) or lost (negative) against the policy's mapping: by measurement where both
    ran (the policy's mapping's mean makespan against this step's) and the gap is beyond
    the noise (`guard.distinguishes`), else by the twin, else by measurement within the
    noise (nothing else judges it). A step that ran 18 ms faster than a two-run mean of the
    policy's mapping, at 30 ms of noise per run, is not a measured win: judged so, it funded
    a deviation the twin priced at 13 ms a step for the rest of a run."""

    policy: dict[str, str] = field(default_factory=dict)
    twin_won_ms: float | None = None
    policy_measured_ms: float | None = None
    policy_runs: int = 0
    """How many runs ``policy_measured_ms`` is the mean of."""
    noise_ms: float | None = None
    """The spread of one run's makespan in the shape (`guard.shape_noise_ms`; None: not
    known yet, measurement then judges only where nothing predicts)."""
    answer_measured_ms: float | None = None
    """This step's measured makespan, set when the step has run (`measured`)."""
    predicted_cost_ms: float | None = None
    """What it was predicted to cost before it ran (its measured or the twin's makespan less
    the policy's mapping's; negative: predicted to win), held against the shape's budget;
    None: nothing could price it (or it was not run on the budget)."""
    explored: bool = False
    """Its mapping had never run: an exploration, one probe of the shape's budget."""
    budgeted: bool = False
    """It ran on the shape's exploration budget: what it won or lost is settled there."""

    def measured(self, makespan_ms: float) -> None:
        if self.answer_measured_ms is None:
            self.answer_measured_ms = makespan_ms

    def won_by_measurement(self, answer_ms: float | None, answer_runs: int) -> float | None:
        """What measurement says the answer's mapping wins against the policy's, ``answer_ms``
        being the mean of ``answer_runs`` runs of it, where measurement judges (see the
        class: the gap beyond the noise, or nothing predicts); None where it does not. The
        price before a deviation runs (its mapping's mean) and the judgement after (this
        step's run) both read it."""
        if self.policy_measured_ms is None or answer_ms is None:
            return None
        gap = self.policy_measured_ms - answer_ms
        if self.twin_won_ms is None or distinguishes(gap, self.noise_ms, self.policy_runs,
                                                     answer_runs):
            return gap
        return None

    @property
    def won_ms(self) -> float | None:
        measured = self.won_by_measurement(self.answer_measured_ms, 1)
        return measured if measured is not None else self.twin_won_ms

    @property
    def by(self) -> str:
        """How ``won_ms`` was judged: ``measured``, ``twin`` or ``unknown``."""
        if self.won_by_measurement(self.answer_measured_ms, 1) is not None:
            return "measured"
        return "twin" if self.twin_won_ms is not None else "unknown"


@dataclass(frozen=True)
class ConsultationRecord:
    """One consultation (or a cached reuse of one, ``cached=True``)."""

    channel: str = "free"
    """The answer channel of the last forced turn ("free": answered before any forcing)."""
    channels_tried: tuple[str, ...] = ()
    """The channel of every forced turn, in order (``auto`` walks the chain)."""
    via: str | None = None
    """Where the answer was found: tool_call, wrapped_call, text; None: no answer."""
    latency_ms: float = 0.0
    llm_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cause: str | None = None
    """Why the consultation failed, the fallback deciding the whole step (timeout,
    llm_error, no_answer, busy); None where the model answered, vetoed or not (``veto``)."""
    detail: str = ""
    guard_answer_ms: float | None = None
    guard_best_ms: float | None = None
    guard_by: str = "twin"
    """What judged the guard's two figures: ``twin`` (predictions) or ``measured`` (the
    answer's mapping and the fastest of its shape both ran)."""
    cached: bool = False
    mode: str = "agent"
    """The consultation mode that ran: agent, one_shot, pick (a pick consultation without
    candidates, e.g. a tool with neither a profile nor a measurement, runs as one_shot)."""
    pick: int | None = None
    """``pick`` mode: the number of the candidate the model chose (1 = the twin's best)."""
    candidates: int = 0
    """How many whole mappings the model was offered: ``pick`` mode's numbered candidates,
    or the mappings the json_schema admitted (`admitted`; 1: the one taken without asking);
    0: not limited (every allowed option per call)."""
    guard_waived: str | None = None
    """The guard would have rejected the answer, but it measures this exploration hint."""
    agrees: bool | None = None
    """Whether the answer (repaired) is the classical policy's mapping; None: not compared
    (no policy mapping, or a whole-step fallback)."""
    deviation: Deviation | None = None
    """Where the answer deviates from the policy's mapping: what that won or lost."""
    veto: Veto | None = None
    """Why the guard vetoed the answer (refuted by measurement, over the shape's exploration
    budget, or predicted by the twin beyond ``guard_ratio``), with both figures; the policy's
    mapping ran instead. Not a failure: ``cause`` stays None. On a cached reuse
    (``cached``), the earlier answer's veto."""
    skipped: str | None = None
    """``pick`` mode, why the model was not asked: ``probe`` (the fallback's exploratory
    probe runs as it is: a measurement it asked for, not a choice to make) or
    ``one_candidate`` (one mapping only is predicted within ``pick_within`` of the best)."""

    @property
    def valid(self) -> bool:
        """An answer was parsed and used (it may still have had per-call repairs)."""
        return self.answered and self.veto is None

    @property
    def answered(self) -> bool:
        """The model gave a parsed answer (the consultation did not fail): used (`valid`),
        or vetoed by the guard (``veto``)."""
        return self.via is not None and self.cause is None and not self.cached

    @property
    def asked(self) -> bool:
        """The model was consulted for this decision (not a cached reuse, not skipped)."""
        return not self.cached and self.skipped is None


@dataclass(frozen=True)
class AgenticDecision(Decision):
    """A `Decision` of the agentic scheduler, with its consultation's record."""

    consultation: ConsultationRecord | None = None
