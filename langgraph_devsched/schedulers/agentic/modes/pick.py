"""Pick mode, the ratifying variant: the model chooses one of the policy's candidates.

Candidate 1 is the classical policy's own mapping (`lead_candidate`), the others the twin's
best distinct mappings held to the hard constraints within ``pick_within`` of its best
(`pick_candidates`), shown numbered with their predictions (`prompts.pick_prompt`); a lone
candidate is not asked. The model answers ``{"pick": N}``: through ``json_schema`` an enum
of 1..k (`answers.pick_schema`), through ``text`` read as that object or a lone integer;
``auto`` walks `PICK_CHAIN`. The model is asked again when the policy's settled mapping
moves (`lead_key`). Measured with Qwen2.5-Coder-1.5B, the model picked candidate 1 in 72 of
73 consultations: the classical policy, ratified. The default mode (`modes.agent`) is the
one where the model decides.

>>> PickMode("auto").channel.current
'json_schema'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AnyMessage

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic.answers import (
    ParsedAnswer,
    parse_pick,
    pick_schema,
    text_of,
)
from langgraph_devsched.schedulers.agentic.cache import occurrences
from langgraph_devsched.schedulers.agentic.config import AnswerChannel
from langgraph_devsched.schedulers.agentic.constraints import HardConstraints, repair
from langgraph_devsched.schedulers.agentic.consult import Consultation, Outcome
from langgraph_devsched.schedulers.agentic.fallback import held_to_rules
from langgraph_devsched.schedulers.agentic.guard import GPU_DEMAND
from langgraph_devsched.schedulers.agentic.model import ChannelState
from langgraph_devsched.schedulers.agentic.modes.agent import AgentMode
from langgraph_devsched.schedulers.agentic.prompts import pick_prompt

if TYPE_CHECKING:
    from langgraph_devsched.schedulers.agentic.guard import TwinView
    from langgraph_devsched.schedulers.agentic.modes.agent import Step
    from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
    from langgraph_devsched.telemetry import DeviceState

logger = logging.getLogger(__name__)

PICK_CHAIN: tuple[AnswerChannel, ...] = ("json_schema", "text")
"""The ``auto`` chain of a pick consultation (tool channels are not used for a pick)."""
PICK_TOOL = "submit_pick"
PICK_MAX_TOKENS = 48
"""Completion tokens of a pick turn: ``{"pick": N, "reason": ...}`` is at most ~25."""
DEFAULT_PICK_CANDIDATES = 3
MAX_SCANNED = 512
"""Ranked mappings looked at for ``k`` distinct ones after the hard-constraint repair."""


@dataclass(frozen=True)
class Candidate:
    """One mapping the model may pick, held to the hard constraints, and its prediction."""

    mapping: dict[str, DeviceOption]
    predicted_ms: float


def pick_candidates(
    twin_view: TwinView,
    device: DeviceState,
    constraints: HardConstraints,
    k: int,
    *,
    vram_seen_mb: Mapping[str, float] | None = None,
    within: float | None = None,
) -> list[Candidate]:
    """The twin's ``k`` best distinct mappings after the hard-constraint repair, best first
    (ties: fewer GPU options first). ``within``: only those predicted at most this times the
    best (the guard's ratio: a pick beyond it would be rejected anyway); the best is kept."""
    batch = twin_view.batch
    seen: set[tuple[str, ...]] = set()
    found: list[Candidate] = []
    for ms, mapping in twin_view.rank()[:MAX_SCANNED]:
        fixed, causes = repair(
            ParsedAnswer(dict(mapping)), batch, device, constraints, fallback={},
            vram_seen_mb=vram_seen_mb,
        )
        key = tuple(fixed[c] for c in batch.call_ids)
        if key in seen:
            continue
        seen.add(key)
        found.append(Candidate(fixed, twin_view.predict(fixed) if causes else ms))
        if len(found) >= 4 * k:
            break
    found.sort(key=lambda c: (c.predicted_ms, [GPU_DEMAND[c.mapping[i]] for i in batch.call_ids]))
    if within is not None and found:
        limit = within * found[0].predicted_ms + 1e-9
        found = [found[0], *(c for c in found[1:] if c.predicted_ms <= limit)]
    return found[:k]


def with_lead(
    lead: Candidate | None, candidates: Sequence[Candidate], k: int
) -> list[Candidate]:
    """``lead`` (the fallback scheduler's own mapping) first, then the other ``candidates``,
    ``k`` in all; ``candidates`` alone without a lead."""
    if lead is None:
        return list(candidates)[:k]
    rest = [c for c in candidates if c.mapping != lead.mapping]
    return [lead, *rest][: max(1, k)]


@dataclass
class PickConsultation(Consultation):
    """One pick consultation: the consultation loop (`consult.Consultation`) with one
    forced turn (a second through ``text`` under ``auto``), no tools, and this reader."""

    candidates: list[Candidate] = field(default_factory=list)
    lead: bool = False
    """Whether candidate 1 is the fallback scheduler's own mapping (then picking it is never
    guarded: a rejection would fall back to that very mapping)."""
    no_answer = "the reply names no candidate number"

    def skip(self) -> Outcome | None:
        """A lone candidate is the answer, the model not asked (there is nothing to pick)."""
        if len(self.candidates) != 1:
            return None
        return Outcome(
            ParsedAnswer(dict(self.candidates[0].mapping),
                         "the only candidate near the best prediction"),
            via="one_candidate", tally=self.tally, pick=1, unguarded=self.lead,
            skipped="one_candidate",
        )

    def answer_in(self, messages: Sequence[AnyMessage]) -> Outcome | None:
        for message in reversed(messages):
            found = parse_pick(text_of(message), len(self.candidates)) if isinstance(
                message, AIMessage) else None
            if found is not None:
                n, reason = found
                why = f"pick {n}/{len(self.candidates)}" + (f" ({reason.strip()})" if reason
                                                            else "")
                return Outcome(ParsedAnswer(dict(self.candidates[n - 1].mapping), why),
                               via="pick", tally=self.tally, pick=n, messages=list(messages),
                               unguarded=self.lead and n == 1)
        return None


def lead_candidate(
    batch: Batch, view: SchedulerView, rules: HardConstraints, twin_view: TwinView,
    seen: Mapping[str, float], lead: Decision | None,
) -> Candidate | None:
    """The lead's mapping as a candidate, held to the hard constraints, with the policy's
    own prediction (the twin's where the constraints changed it); None without a lead
    (`fallback_lead` gives none that leaves a call out)."""
    if lead is None:
        return None
    mapping, _ = held_to_rules(batch, view, rules, lead, seen)
    ends = [float(lead.predicted_ms[c]) for c in batch.call_ids if c in lead.predicted_ms]
    same = mapping == dict(lead.mapping) and len(ends) == len(batch)
    return Candidate(mapping, max(ends) if same else twin_view.predict(mapping))


def lead_key(batch: Batch, lead: Decision | None) -> Any:
    """The lead's part of the cache key: its options by (tool, occurrence), ``"probe"`` for
    a probe (never cached), ``"no lead"`` without one.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> from langgraph_devsched.schedulers.base import Batch, Decision
    >>> batch = Batch.of([("c1", "asr", ToolDeviceSpec()), ("c2", "asr", ToolDeviceSpec())])
    >>> lead_key(batch, Decision(mapping={"c1": "cpu", "c2": "gpu_now"}))
    ((('asr', 0), 'cpu'), (('asr', 1), 'gpu_now'))
    """
    if lead is None:
        return "no lead"
    if lead.probe:
        return "probe"
    options = tuple(lead.mapping[c] for c in batch.call_ids)
    return tuple(sorted(zip(occurrences(batch), options, strict=True)))


class PickMode:
    """``pick``: the policy's mapping and the twin's best as numbered candidates; asked
    again when the policy's settled mapping moves (`lead_key`)."""

    name = "pick"

    def __init__(self, answer: AnswerChannel) -> None:
        if answer.startswith("tool"):
            raise ValueError(
                f"mode 'pick' answers through json_schema or text, not {answer!r}; "
                "use answer='auto', 'json_schema' or 'text'"
            )
        self.channel = ChannelState(answer, PICK_CHAIN)
        self.fallback = AgentMode(answer, inline=True)
        """For a step without candidates: the default consultation, outputs inline."""

    def key(self, step: Step) -> Any:
        return lead_key(step.batch, step.lead)

    def trial(self, step: Step) -> str | None:
        """None: the policy's mapping is candidate 1 already."""
        return None

    def consultation(self, step: Step) -> PickConsultation | Consultation:
        """A pick consultation, or without candidates for this step (a tool with neither a
        declared profile nor a measurement) the default one with the outputs inline.

        Candidate 1 is the fallback scheduler's own mapping (held to the constraints, with
        its own prediction; its probes never come here): the ``monitor`` policy knows more
        than the guard's twin (its contention fit, observed makespans, resident-model
        loads). The others are the twin's best."""
        twin_view = step.twin_view
        if twin_view is None:
            return self.fallback.consultation(step)
        k = step.candidates or DEFAULT_PICK_CANDIDATES
        try:
            ranked = pick_candidates(
                twin_view, step.view.device, step.constraints, k, vram_seen_mb=step.vram_seen,
                within=step.pick_within or step.guard_ratio,
            )
        except Exception as exc:  # the twin is advice: never let it break a step
            logger.info("agentic pick candidates unavailable: %s", exc)
            return self.fallback.consultation(step)
        if not ranked:
            return self.fallback.consultation(step)
        lead = lead_candidate(step.batch, step.view, step.constraints, twin_view,
                              step.vram_seen, step.lead)
        candidates = with_lead(lead, ranked, k)
        tokens = step.max_tokens or PICK_MAX_TOKENS
        consultation = PickConsultation(
            model=step.model, batch=step.batch,
            messages=pick_prompt(step.batch, candidates, step.constraints, step.policy),
            observations=[], channel=self.channel, max_turns=1, max_tokens=tokens,
            long_tokens=tokens, deadline=0.0, inline=True, schema=pick_schema(len(candidates)),
            schema_name=PICK_TOOL, nudges=False, retry_transport=True, clock=step.clock,
            on_llm_call=step.on_llm_call, candidates=candidates, lead=lead is not None,
        )
        consultation.tally.mode, consultation.tally.candidates = "pick", len(candidates)
        consultation.graph()  # compiled outside the consultation's time
        consultation.deadline = step.clock() + step.timeout_s
        return consultation
