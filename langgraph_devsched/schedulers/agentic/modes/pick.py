"""Pick mode, the ratifying variant: the model chooses one of the policy's candidates.

Candidate 1 is the classical policy's own mapping, the others the twin's best within
``pick_within`` of it; a lone candidate is not asked. Measured with Qwen2.5-Coder-1.5B, the
model picked candidate 1 in 72 of 73 consultations: the classical policy, ratified. The
default mode (`modes.agent`) is the one where the model decides.

For a small model on a CPU every token costs: a 1.5B model on two shared cores reads about
12 prompt tokens/s and writes about 4. In ``pick`` mode the scheduler ranks the step's
mappings with the monitor's twin (`agentic_guard.TwinView`), holds each to the hard
constraints, keeps the ``k`` best distinct ones (`pick_candidates`), and shows them numbered,
each with its predicted makespan and a one-line difference to the first (`candidates_text`).
The model answers ``{"pick": N}`` (a short ``"reason"`` may follow; the prompt does not ask
for one, as every generated token costs):

- ``json_schema``: ``response_format`` with `pick_schema`, whose ``pick`` is an enum of
  1..k, so a server that constrains decoding (llama.cpp, vLLM, OpenAI) cannot answer
  anything else;
- ``text``: nothing constrained; the reply is read as that object or as a lone integer.

``auto`` starts with ``json_schema`` and moves to ``text`` when the endpoint gives no answer
or rejects the request (`PICK_CHAIN`). The system message is the same for every
consultation of a scheduler (`pick_system`), so a server's prompt cache keeps it, and only
the step's few lines are read anew. The picked candidate's mapping is the answer; it is
repaired and guarded like any other.

>>> PickMode("auto").channel.current
'json_schema'
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic.answers import ParsedAnswer, parse_pick, pick_schema
from langgraph_devsched.schedulers.agentic.config import AnswerChannel
from langgraph_devsched.schedulers.agentic.constraints import HardConstraints, repair
from langgraph_devsched.schedulers.agentic.consult import (
    Consultation,
    DeadlineError,
    Outcome,
    Tally,
)
from langgraph_devsched.schedulers.agentic.lead import held_to_rules, lead_key
from langgraph_devsched.schedulers.agentic.model import ChannelState, bind_turn
from langgraph_devsched.schedulers.agentic.modes.agent import AgentMode
from langgraph_devsched.schedulers.agentic.prompts import pick_system, pick_task

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

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


_DEMAND = {"cpu": 0, "gpu_queued": 1, "gpu_now": 2}


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
    found.sort(key=lambda c: (c.predicted_ms, [_DEMAND[c.mapping[i]] for i in batch.call_ids]))
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
class PickConsultation:
    """One pick consultation: a single model turn (a second through ``text`` under
    ``auto``), read inside the deadline; same interface as `agentic_consult.Consultation`."""

    model: BaseChatModel
    batch: Batch
    candidates: list[Candidate]
    system: str
    channel: ChannelState
    max_tokens: int | None
    deadline: float
    clock: Callable[[], float] = time.monotonic
    on_llm_call: Callable[[], None] | None = None
    tally: Tally = field(default_factory=lambda: Tally(mode="pick"))
    replies: list[AnyMessage] = field(default_factory=list)
    lead: bool = False
    _retried: bool = False
    """Whether candidate 1 is the fallback scheduler's own mapping (then picking it is never
    guarded: a rejection would fall back to that very mapping)."""

    def __post_init__(self) -> None:
        self.tally.candidates = len(self.candidates)

    def prompt(self) -> list[AnyMessage]:
        return [SystemMessage(self.system), HumanMessage(pick_task(self.batch, self.candidates))]

    def skip(self) -> Outcome | None:
        """The outcome without asking the model: the lone candidate; None when there is a
        choice to make."""
        return self.only() if len(self.candidates) == 1 else None

    def only(self) -> Outcome:
        """The one candidate as the answer, the model not asked (there is nothing to pick)."""
        chosen = self.candidates[0]
        return Outcome(
            ParsedAnswer(dict(chosen.mapping), "the only candidate near the best prediction"),
            via="one_candidate", tally=self.tally, pick=1, unguarded=self.lead,
            skipped="one_candidate",
        )

    def graph(self) -> None:
        """Nothing to compile (one turn, no graph)."""
        return None

    def _bound(self, channel: AnswerChannel) -> Any:
        left = self.deadline - self.clock()
        if left <= 0:
            raise DeadlineError("the consultation's deadline passed")
        self.tally.channel = channel
        self.tally.channels_tried.append(channel)
        self.tally.llm_calls += 1
        if self.on_llm_call is not None:
            self.on_llm_call()
        return bind_turn(
            self.model, [], channel=channel, max_tokens=self.max_tokens, timeout_s=left,
            schema=pick_schema(len(self.candidates)), schema_name=PICK_TOOL,
        )

    def _read(self, reply: Any) -> Outcome | None:
        self.tally.count(reply)
        self.replies.append(reply)
        text = getattr(reply, "content", "")
        if not isinstance(text, str):
            text = " ".join(
                str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in text
            )
        found = parse_pick(text, len(self.candidates))
        if found is None:
            return None
        n, reason = found
        chosen = self.candidates[n - 1]
        why = f"pick {n}/{len(self.candidates)}" + (f" ({reason.strip()})" if reason else "")
        return Outcome(
            ParsedAnswer(dict(chosen.mapping), why), via="pick", tally=self.tally, pick=n,
            messages=[*self.prompt(), *self.replies], unguarded=self.lead and n == 1,
        )

    def _next(self, exc: Exception | None) -> Outcome | None:
        """After a turn without an answer: None to ask again (``auto`` moved on), else the
        failure. A request cut at the deadline is a timeout and leaves the channel as is."""
        if self.clock() >= self.deadline:
            return Outcome(failure="timeout", detail="the consultation's deadline passed",
                           tally=self.tally)
        if exc is not None and getattr(exc, "status_code", None) is None and not self._retried:
            # a transport error (e.g. a pooled keep-alive connection the server closed) says
            # nothing about the channel: the same channel once more
            self._retried = True
            return None
        if self.channel.advance():
            return None
        if exc is not None:
            return Outcome(failure="llm_error", detail=f"{type(exc).__name__}: {exc}"[:300],
                           tally=self.tally)
        return Outcome(failure="no_answer", detail="the reply names no candidate number",
                       tally=self.tally, messages=[*self.prompt(), *self.replies])

    def _after(self, reply: Any = None, exc: Exception | None = None) -> Outcome | None:
        """What one turn ended in: the outcome, or None to ask again."""
        if isinstance(exc, DeadlineError):
            return Outcome(failure="timeout", detail=str(exc), tally=self.tally)
        if exc is not None:
            return self._next(exc)
        outcome = self._read(reply)
        return outcome if outcome is not None else self._next(None)

    def invoke(self, config: RunnableConfig) -> Outcome:
        outcome = None
        while outcome is None:
            try:
                bound = self._bound(self.channel.current)
                outcome = self._after(bound.invoke(self.prompt(), config))
            except Exception as exc:
                outcome = self._after(exc=exc)
        return outcome

    async def ainvoke(self, config: RunnableConfig) -> Outcome:
        outcome = None
        while outcome is None:
            try:
                bound = self._bound(self.channel.current)
                outcome = self._after(await bound.ainvoke(self.prompt(), config))
            except Exception as exc:
                outcome = self._after(exc=exc)
        return outcome


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



class PickMode:
    """``pick``: the policy's mapping and the twin's best as numbered candidates; asked
    again when the policy's settled mapping moves (`lead.lead_key`)."""

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
        return PickConsultation(
            model=step.model,
            batch=step.batch,
            candidates=with_lead(lead, ranked, k),
            system=pick_system(step.constraints, step.policy),
            channel=self.channel,
            max_tokens=step.max_tokens or PICK_MAX_TOKENS,
            deadline=step.clock() + step.timeout_s,
            clock=step.clock,
            on_llm_call=step.on_llm_call,
            lead=lead is not None,
        )
