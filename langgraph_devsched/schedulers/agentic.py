"""The agentic scheduler: an LLM sub-agent that reads the monitor and answers a mapping.

For a step it runs a small LangGraph graph (`agentic_consult`): a model node bound to
read-only observation tools (`agentic_tools`) and the ``submit_mapping`` answer tool, the
same tool list on every turn; the last turn (or a turn after a reply without tool calls) is
forced through an answer channel (`agentic_model`: ``tool_choice`` required or named,
``response_format`` json_schema, or plain text; ``auto`` detects what the endpoint honours).
In ``one_shot`` mode the observations are inline in the prompt and the only turn is forced.
In ``pick`` mode (`agentic_pick`) the model is shown the twin's best mappings, numbered, and
answers one number: a few tokens of answer for a few lines of prompt.

The answer is read from any turn, in any common wrapper (`agentic_text`), and never
trusted: `agentic_answer.repair` holds it to the hints and the hard constraints and takes
the fallback scheduler's option (``monitor``, else ``static``) for what it cannot repair;
the monitor's twin rejects an answer predicted much worse than the best mapping it knows
(`agentic_guard`); an error, a timeout or a full set of consultation threads
(`agentic_slots`) falls back for the whole step. Every cause is in the decision's
``reason``/``fallback``, per call in `AgenticScheduler.last_fallbacks`, and the
consultation's record (channel, latency, tokens, guard predictions) in
`AgenticDecision.consultation`.

A decision is reused while the step's fingerprint is unchanged (`agentic_cache`).

>>> from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
>>> from langchain_core.messages import AIMessage
>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, SchedulerView
>>> from langgraph_devsched.telemetry import DeviceState
>>> answer = AIMessage("", tool_calls=[{"name": "submit_mapping", "id": "t1", "args": {
...     "assignments": [{"call_id": "c1", "option": "cpu"}], "reason": "embed is tiny"}}])
>>> class Scripted(FakeMessagesListChatModel):
...     def bind_tools(self, tools, **kw): return self
>>> scheduler = AgenticScheduler(Scripted(responses=[answer]))
>>> batch = Batch.of([("c1", "embed", ToolDeviceSpec(vram_mb=300))])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8))
>>> d = scheduler.decide(batch, view)
>>> dict(d.mapping), d.reason, d.llm_calls, d.consultation.via
({'c1': 'cpu'}, 'agentic: embed is tiny', 1, 'tool_call')
>>> scheduler.decide(batch, view).llm_calls, scheduler.llm_calls   # same situation: cached
(0, 1)
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.agentic_answer import (
    REPAIRED,
    AgenticCause,
    HardConstraints,
    ParsedAnswer,
    repair,
)
from langgraph_devsched.schedulers.agentic_cache import (
    DecisionCache,
    Entry,
    Key,
    estimates,
    fingerprint,
    slots,
)
from langgraph_devsched.schedulers.agentic_consult import (
    ANSWER_PROMPT,
    FORCE_PROMPT,
    SYSTEM_PROMPT,
    ChannelState,
    Consultation,
    Outcome,
    Tally,
)
from langgraph_devsched.schedulers.agentic_guard import TwinView, guard, hinted_probe
from langgraph_devsched.schedulers.agentic_lead import (
    agreement,
    executed_key,
    fallback_lead,
    held_to_rules,
    lead_candidate,
    lead_key,
)
from langgraph_devsched.schedulers.agentic_model import (
    ANSWER_CHANNELS,
    CONSULT_MODES,
    ENV_ANSWER,
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_CANDIDATES,
    ENV_MAX_TOKENS,
    ENV_MODE,
    ENV_MODEL,
    ENV_TIMEOUT,
    LONG_BUDGET_FACTOR,
    AgenticNotConfiguredError,
    AnswerChannel,
    ConsultMode,
    answer_budget,
    check_choice,
    openai_model,
)
from langgraph_devsched.schedulers.agentic_pick import (
    DEFAULT_PICK_CANDIDATES,
    PICK_CHAIN,
    PICK_MAX_TOKENS,
    PickConsultation,
    pick_candidates,
    pick_system,
    with_lead,
)
from langgraph_devsched.schedulers.agentic_record import AgenticDecision, ConsultationRecord
from langgraph_devsched.schedulers.agentic_slots import ConsultationSlots
from langgraph_devsched.schedulers.agentic_tools import (
    allowed_options,
    compact,
    observation_tools,
)
from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerBase
from langgraph_devsched.schedulers.base import SchedulerView as View

__all__ = [
    "ANSWER_PROMPT",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "FORCE_PROMPT",
    "SYSTEM_PROMPT",
    "AgenticDecision",
    "AgenticNotConfiguredError",
    "AgenticScheduler",
    "ConsultationRecord",
    "make_agentic",
    "openai_model",
]

logger = logging.getLogger(__name__)
CANDIDATES_TOOL = "candidate_mappings"


def _native_async(model: BaseChatModel) -> bool:
    """Whether ``model`` has its own async path (cancelling it stops the request)."""
    return type(model)._agenerate is not BaseChatModel._agenerate


class AgenticScheduler(SchedulerBase):
    """An LLM sub-agent over the monitor's observations, guarded by hard constraints.

    ``model``: any LangChain chat model with ``bind_tools``. ``policy``: operator guidance in
    plain words, given to the model. ``min_free_vram_mb``, ``pinned`` (tool -> option) and
    ``cpu_forbidden`` are enforced on every answer. ``fallback``: the scheduler (or name)
    used for what the answer lacks (default ``"monitor"``, else ``"static"``).
    ``timeout_s`` bounds one consultation, answer reading included; each request gets what
    is left of it. ``mode``: ``"agent"`` (observation tools, up to ``max_turns`` turns),
    ``"one_shot"`` (observations inline, one turn) or ``"pick"`` (the twin's ``candidates``
    best mappings numbered, default 3, the answer one number; ``auto`` then means
    ``json_schema -> text``, and the tool channels are refused). ``answer``: the forced
    turn's channel (``"auto"``, ``"tool_required"``, ``"tool_named"``, ``"json_schema"``,
    ``"text"``);
    ``final_tool_choice`` is the older spelling (``"any"``: tool_required, a tool name:
    tool_named). ``max_tokens``: completion tokens per turn (None: sized to the batch).
    ``guard_ratio``: reject an answer the monitor's twin predicts worse than this times the
    best mapping it knows (None: off). ``candidates``: offer the twin's top-k mappings as an
    observation (0: off). ``pick_within``: pick mode shows only the mappings the twin
    predicts within this ratio of its best (None: up to ``guard_ratio``); when one mapping
    is left the model is not asked (measured with Qwen2.5-Coder-1.5B: shown candidates up
    to 1.5x, it picked a 1.2x one in 4 of 10 consultations of a serial step).
    ``max_consultations``: consultation threads alive at once (a hung
    model holds one; when all are held the step falls back at once, cause ``busy``).
    ``drift_tolerance``: the relative change of an estimate's mean that invalidates a cached
    decision. ``retry_failed_after``: steps a failed consultation's fallback is reused
    before the model is asked again. ``clock``: monotonic seconds (latency, budgets).
    """

    name = "agentic"
    blocking = True

    def __init__(
        self,
        model: BaseChatModel,
        *,
        policy: str | None = None,
        min_free_vram_mb: float = 0.0,
        pinned: Mapping[str, str] | None = None,
        cpu_forbidden: Collection[str] = (),
        fallback: Scheduler | str | None = None,
        timeout_s: float = 30.0,
        max_turns: int = 1,
        mode: ConsultMode = "agent",
        answer: AnswerChannel = "auto",
        final_tool_choice: str | None = None,
        max_tokens: int | None = None,
        guard_ratio: float | None = 1.5,
        candidates: int = 0,
        pick_within: float | None = 1.05,
        max_consultations: int = 2,
        drift_tolerance: float = 0.25,
        retry_failed_after: int = 10,
        cache_size: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not hasattr(model, "bind_tools"):
            raise TypeError(f"model must be a LangChain chat model, got {type(model).__name__}")
        if timeout_s <= 0 or max_turns < 1:
            raise ValueError("timeout_s must be > 0 and max_turns >= 1")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens}")
        if guard_ratio is not None and guard_ratio < 1:
            raise ValueError(f"guard_ratio must be >= 1 or None, got {guard_ratio}")
        check_choice(mode, CONSULT_MODES, "mode")
        if final_tool_choice is not None:
            answer = "tool_required" if final_tool_choice in ("any", "required") else "tool_named"
        check_choice(answer, ANSWER_CHANNELS, "answer channel")
        if mode == "pick" and answer.startswith("tool"):
            raise ValueError(
                f"mode 'pick' answers through json_schema or text, not {answer!r}; "
                "use answer='auto', 'json_schema' or 'text'"
            )
        if candidates < 0:
            raise ValueError(f"candidates must be >= 0, got {candidates}")
        if pick_within is not None and pick_within < 1:
            raise ValueError(f"pick_within must be >= 1 or None, got {pick_within}")
        self.model = model
        self.policy = policy
        self.constraints = HardConstraints(
            min_free_vram_mb=min_free_vram_mb, pinned=pinned, cpu_forbidden=cpu_forbidden
        )
        self.fallback: Scheduler = _fallback_scheduler(fallback)
        self.timeout_s = timeout_s
        self.max_turns = max_turns
        self.mode: ConsultMode = mode
        self.channel_state = ChannelState(answer)
        self.pick_channel_state = ChannelState(answer, PICK_CHAIN)
        """The pick consultations' channel (``auto``: json_schema, then text)."""
        self.max_tokens = max_tokens
        self.guard_ratio = guard_ratio
        self.candidates = candidates
        self.pick_within = pick_within
        self.retry_failed_after = retry_failed_after
        self.clock = clock
        self.llm_calls = 0
        """Model calls made so far (every consultation's turns, late ones included)."""
        self.consultations = 0
        self.cache_hits = 0
        self.last_fallbacks: dict[str, AgenticCause] = {}
        """Per call id of the last decision: why its option is not the model's own answer."""
        self.last_issues: tuple[str, ...] = ()
        """What was wrong with the last answer beyond single calls (e.g. unknown call ids)."""
        self.last_messages: list[AnyMessage] = []
        self._cache = DecisionCache(cache_size, drift_tolerance)
        self._slots = ConsultationSlots(max_consultations)
        self._lock = threading.Lock()
        self._private_monitor: Any = None
        self._last_device: Any = None

    @property
    def channel(self) -> AnswerChannel:
        """The answer channel the next forced turn uses (``auto`` moves it on failures)."""
        if self.mode == "pick":
            return self.pick_channel_state.current
        return self.channel_state.current

    @property
    def drift_tolerance(self) -> float:
        return self._cache.drift_tolerance

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        **options: Any,
    ) -> AgenticScheduler:
        """Built on `openai_model` (args, else ``$DEVSCHED_LLM_MODEL``/``_BASE_URL``/
        ``$OPENAI_API_KEY``); `AgenticNotConfiguredError` says what to set when unset.
        Unset options come from ``$DEVSCHED_LLM_TIMEOUT`` (seconds), ``_MAX_TOKENS``,
        ``_MODE`` (agent, one_shot, pick), ``_ANSWER`` (the answer channel) and
        ``_CANDIDATES`` (k)."""
        options = {**_env_options(), **options}
        chat = openai_model(
            model, base_url=base_url, api_key=api_key, timeout_s=options.get("timeout_s", 30.0)
        )
        return cls(chat, **options)

    # -- protocol ------------------------------------------------------------------------------

    def decide(self, batch: Batch, view: View, *, config: RunnableConfig | None = None) -> Decision:
        view = self._with_observations(batch, view)
        started = self.clock()
        key, obs, lead = self._key(batch, view)
        if lead is not None and lead.probe:
            return self._probe(batch, view, lead, obs)
        cached = self._lookup(key, batch, view, obs, lead)
        if cached is not None:
            return cached
        consultation, twin_view = self._consultation(batch, view, started, obs, lead)
        if _one_candidate(consultation):
            outcome = consultation.only()  # type: ignore[union-attr]
        else:
            outcome = self._run_sync(consultation, config)
        return self._conclude(batch, view, key, obs, outcome, twin_view, started, lead)

    async def adecide(
        self, batch: Batch, view: View, *, config: RunnableConfig | None = None
    ) -> Decision:
        """`decide` without blocking the event loop: a natively async model runs on the loop
        and is cancelled at the deadline; any other runs in a consultation thread."""
        view = self._with_observations(batch, view)
        started = self.clock()
        key, obs, lead = self._key(batch, view)
        if lead is not None and lead.probe:
            return self._probe(batch, view, lead, obs)
        cached = self._lookup(key, batch, view, obs, lead)
        if cached is not None:
            return cached
        consultation, twin_view = self._consultation(batch, view, started, obs, lead)
        if _one_candidate(consultation):
            outcome = consultation.only()  # type: ignore[union-attr]
        else:
            outcome = await self._run_async(consultation, config)
        return self._conclude(batch, view, key, obs, outcome, twin_view, started, lead)

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        deviation = getattr(getattr(decision, "consultation", None), "deviation", None)
        if deviation is not None:
            deviation.measured(float(record.makespan_ms))
        if self._private_monitor is not None and self._last_device is not None:
            self._private_monitor.record_step(batch, decision, record, self._last_device)
        self.fallback.observe(batch, decision, record)

    def _with_observations(self, batch: Batch, view: View) -> View:
        """Without a monitor in the view, keep a private one fed by `observe`."""
        self._last_device = view.device
        if view.observations is not None:
            return view
        if self._private_monitor is None:
            from langgraph_devsched.monitor import RuntimeMonitor

            self._private_monitor = RuntimeMonitor()
        return View(view.device, self._private_monitor.snapshot(batch))

    # -- fingerprint and cache -----------------------------------------------------------------

    def fingerprint(self, batch: Batch, view: View) -> tuple[Any, ...]:
        """The key under which a decision for ``batch`` in ``view`` is reused."""
        return self._key(batch, view)[0]

    def _key(self, batch: Batch, view: View) -> tuple[Key, dict[str, Any], Decision | None]:
        """The fingerprint, the observations as data, and the fallback policy's decision for
        this step (`agentic_lead`: computed beside the model's, for agreement and fallback;
        its probes, the monitor's reprobes, run as they are, see `_probe`). The default mode
        is asked again when the observations change: the fingerprint's hints and estimates,
        and the set of executed mappings of the shape (a new one was measured). Pick mode is
        asked again when the policy's settled mapping moves (its candidate 1)."""
        key, obs = fingerprint(batch, view)
        lead = fallback_lead(self.fallback, batch, view)
        if self.mode != "pick":
            return (*key, executed_key(obs, batch)), obs, lead
        return (*key, lead_key(batch, lead)), obs, lead

    def _lookup(
        self, key: Key, batch: Batch, view: View, obs: dict[str, Any], lead: Decision | None
    ) -> Decision | None:
        entry = self._cache.lookup(key, estimates(obs, batch.shape))
        if entry is None:
            return None
        with self._lock:
            self.cache_hits += 1
        record = ConsultationRecord(cached=True, cause=entry.failure, mode=self.mode)
        if entry.failure is not None:
            return self._whole_fallback(
                batch, view, entry.failure, "not consulted again yet", record, cached=True,
                lead=lead,
            )
        where = slots(batch)
        answer = ParsedAnswer(
            {c.call_id: entry.options[s] for c, s in zip(batch.calls, where, strict=True)}
        )
        causes_before = {
            c.call_id: entry.causes[s]
            for c, s in zip(batch.calls, where, strict=True)
            if s in entry.causes
        }
        return self._finish(
            batch,
            view,
            answer,
            llm_calls=0,
            prior=causes_before,
            reason=f"agentic (cached): {entry.reason}",
            issues=(),
            record=record,
            seen=vram_seen(obs),
            fit_vram=not entry.fallback_mapping,
            lead=lead,
        )[0]

    def _probe(
        self, batch: Batch, view: View, lead: Decision, obs: Mapping[str, Any]
    ) -> Decision:
        """The monitor's reprobe, run without consulting: symmetric, swap or unknown-side
        probes that the fallback policy (``monitor``) sizes from the exploration hints.

        A probe is a measurement, not a choice among mappings: the model is not asked, the
        cache is left as it is, and the measurement reaches the model as an observation at
        its next consultation (a new executed mapping, new estimates). Measured with
        Qwen2.5-Coder-1.5B (docs/agentic.md): not running the probes left the fallback
        unable to learn (8 of 13 built-ins optimal); offering each probe for the model to
        ratify consulted on every step. The probe is held to the hard constraints."""
        mapping, repairs = held_to_rules(batch, view, self.constraints, lead, vram_seen(obs))
        self.last_fallbacks = {}
        self.last_issues = ()
        reason = f"{self.fallback.name} probe, not consulted: {lead.reason}"
        if repairs:
            reason += "; repaired " + ", ".join(
                f"{c}->{mapping[c]} ({k})" for c, k in repairs.items())
        return self._decision(
            mapping, reason, predicted_ms={} if repairs else dict(lead.predicted_ms), probe=True,
            consultation=ConsultationRecord(mode=self.mode, skipped="probe"),
        )

    def clear_cache(self) -> None:
        """Forget every cached decision: the next step consults the model."""
        self._cache.clear()

    # -- the sub-agent -------------------------------------------------------------------------

    def prompt(self, batch: Batch, view: View | None = None) -> list[AnyMessage]:
        """The first messages of a consultation: rules (policy included) and the task."""
        from langgraph_devsched.telemetry import DeviceState

        view = view or View(DeviceState(False, "none", 0, 0, 0.0, 1))
        _, obs, lead = self._key(batch, view)
        return self._consultation(batch, view, self.clock(), obs, lead)[0].prompt()

    def _consultation(
        self, batch: Batch, view: View, started: float, obs: Mapping[str, Any],
        lead: Decision | None = None,
    ) -> tuple[Consultation | PickConsultation, TwinView | None]:
        twin_view = None
        if self.guard_ratio is not None or lead is not None or self.mode == "pick":
            try:
                twin_view = TwinView.build(batch, view.device, view.observations)
            except Exception as exc:  # the guard is advice: never let it break a step
                logger.info("agentic guard unavailable: %s", exc)

        def count() -> None:
            with self._lock:
                self.llm_calls += 1

        if self.mode == "pick":
            picked = self._pick_consultation(batch, view, twin_view, count, vram_seen(obs), lead)
            if picked is not None:
                return picked, twin_view
        budget = answer_budget(len(batch))
        rules = {k: v for k, v in self.constraints.describe().items() if v}
        consultation = Consultation(
            model=self.model,
            observations=observation_tools(batch, view, self.constraints),
            batch=batch,
            constraints_text=compact(rules) if rules else "none",
            policy=self.policy,
            mode="one_shot" if self.mode == "pick" else self.mode,
            channel=self.channel_state,
            max_turns=self.max_turns,
            max_tokens=self.max_tokens or budget,
            long_tokens=self.max_tokens or LONG_BUDGET_FACTOR * budget,
            allowed={c.call_id: allowed_options(c, self.constraints) for c in batch.calls},
            deadline=started + self.timeout_s,
            clock=self.clock,
            on_llm_call=count,
        )
        consultation.graph()  # compiled outside the consultation's time
        consultation.deadline = self.clock() + self.timeout_s
        consultation.tally.mode = consultation.mode
        return consultation, twin_view

    def _pick_consultation(
        self,
        batch: Batch,
        view: View,
        twin_view: TwinView | None,
        count: Callable[[], None],
        seen: Mapping[str, float],
        base: Decision | None,
    ) -> PickConsultation | None:
        """A pick consultation, or None when the twin has no candidates for this step (a
        tool with neither a declared profile nor a measurement): then it runs as one_shot.

        Candidate 1 is the fallback scheduler's own mapping (held to the constraints, with
        its own prediction; its probes never come here, see `_probe`): the ``monitor`` policy
        knows more than the guard's twin (its contention fit, observed makespans,
        resident-model loads). The others are the twin's best."""
        if twin_view is None:
            return None
        k = self.candidates or DEFAULT_PICK_CANDIDATES
        try:
            ranked = pick_candidates(
                twin_view, view.device, self.constraints, k, vram_seen_mb=seen,
                within=self.pick_within or self.guard_ratio,
            )
        except Exception as exc:  # the twin is advice: never let it break a step
            logger.info("agentic pick candidates unavailable: %s", exc)
            return None
        if not ranked:
            return None
        lead = lead_candidate(batch, view, self.constraints, twin_view, seen, base)
        candidates = with_lead(lead, ranked, k)
        return PickConsultation(
            model=self.model,
            batch=batch,
            candidates=candidates,
            system=pick_system(self.constraints, self.policy),
            channel=self.pick_channel_state,
            max_tokens=self.max_tokens or PICK_MAX_TOKENS,
            deadline=self.clock() + self.timeout_s,
            clock=self.clock,
            on_llm_call=count,
            lead=lead is not None,
        )

    def _config(self, config: RunnableConfig | None) -> RunnableConfig:
        base: dict[str, Any] = {
            "run_name": "devsched_agentic",
            "configurable": {},  # a standalone graph, never a checkpointed subgraph
            "tags": ["devsched:agentic"],
        }
        if config is not None:
            base["callbacks"] = config.get("callbacks")
            base["tags"] = [*(config.get("tags") or []), "devsched:agentic"]
            base["metadata"] = dict(config.get("metadata") or {})
        return base  # type: ignore[return-value]

    def _late(self, consultation: Consultation | PickConsultation, cause: AgenticCause) -> Outcome:
        detail = (
            f"no answer within {self.timeout_s:g} s"
            if cause == "timeout"
            else f"all {self._slots.size} consultation threads are held by model calls "
            "still running"
        )
        return Outcome(failure=cause, detail=detail, tally=consultation.tally)

    def _run_sync(
        self, consultation: Consultation | PickConsultation, config: RunnableConfig | None
    ) -> Outcome:
        cfg = self._config(config)
        future = self._slots.start(lambda: consultation.invoke(cfg))
        if future is None:
            return self._late(consultation, "busy")
        left = max(0.0, consultation.deadline - self.clock())
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            return self._late(consultation, "timeout")

    async def _run_async(
        self, consultation: Consultation | PickConsultation, config: RunnableConfig | None
    ) -> Outcome:
        cfg = self._config(config)
        left = max(0.0, consultation.deadline - self.clock())
        if _native_async(self.model):
            try:
                return await asyncio.wait_for(consultation.ainvoke(cfg), left)
            except asyncio.TimeoutError:
                return self._late(consultation, "timeout")
        future = self._slots.start(lambda: consultation.invoke(cfg))
        if future is None:
            return self._late(consultation, "busy")
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), left)
        except asyncio.TimeoutError:
            return self._late(consultation, "timeout")

    # -- from an answer to a decision ----------------------------------------------------------

    def _record(self, outcome: Outcome, started: float, **kw: Any) -> ConsultationRecord:
        tally: Tally = outcome.tally
        return ConsultationRecord(
            channel=tally.channel,
            channels_tried=tuple(tally.channels_tried),
            via=outcome.via,
            latency_ms=(self.clock() - started) * 1000.0,
            llm_calls=tally.llm_calls,
            prompt_tokens=tally.prompt_tokens,
            cached_tokens=tally.cached_tokens,
            cause=outcome.failure,
            detail=outcome.detail,
            mode=tally.mode or self.mode,
            pick=outcome.pick,
            candidates=tally.candidates,
            skipped=outcome.skipped,
            **kw,
        )

    def _fail(
        self, batch: Batch, view: View, key: Key, cause: AgenticCause, detail: str,
        record: ConsultationRecord, lead: Decision | None = None,
    ) -> Decision:
        logger.warning("agentic scheduler: %s (%s); falling back", cause, detail)
        decision = self._whole_fallback(batch, view, cause, detail, record, lead=lead)
        self._cache.store(key, Entry({}, {}, "", {}, cause, self.retry_failed_after, detail))
        return decision

    def _conclude(
        self,
        batch: Batch,
        view: View,
        key: Key,
        obs: dict[str, Any],
        outcome: Outcome,
        twin_view: TwinView | None,
        started: float,
        lead: Decision | None = None,
    ) -> Decision:
        if outcome.skipped is None:
            with self._lock:
                self.consultations += 1
        self.last_messages = outcome.messages
        if outcome.answer is None:
            cause = outcome.failure or "no_answer"
            record = self._record(outcome, started)
            return self._fail(batch, view, key, cause, outcome.detail, record, lead)
        known = set(batch.call_ids)
        issues = list(outcome.answer.issues)
        unknown = sorted(set(outcome.answer.options) - known)
        if unknown:
            valid = ", ".join(batch.call_ids)
            issues.append(f"unknown call id(s) {', '.join(unknown)}; valid: {valid}")
        record = self._record(outcome, started)
        decision, mapping = self._finish(
            batch,
            view,
            outcome.answer,
            llm_calls=outcome.tally.llm_calls,
            prior={},
            reason=f"agentic: {outcome.answer.reason}".rstrip(": "),
            issues=tuple(issues),
            record=record,
            seen=vram_seen(obs),
            fit_vram=not outcome.unguarded,  # the fallback's own mapping: its twin fitted it
            lead=lead,
        )
        extra: dict[str, Any] = {}
        if self.guard_ratio is not None and twin_view is not None:
            verdict = guard(twin_view, mapping, ratio=self.guard_ratio)
            extra = {"guard_answer_ms": verdict.answer_ms, "guard_best_ms": verdict.best_ms}
            if verdict.rejected and not outcome.unguarded:
                asked_for = hinted_probe(mapping, batch, obs.get("hints", ()))
                if asked_for is None:
                    record = self._record(outcome, started, **extra)
                    record = _replace(record, cause="guarded", detail=verdict.text())
                    return self._fail(batch, view, key, "guarded", verdict.text(), record,
                                      lead)
                extra["guard_waived"] = asked_for
        extra.update(agreement(batch, view, self.constraints, mapping, lead, obs, twin_view))
        decision = _replace(decision, consultation=_replace(decision.consultation, **extra))
        where = dict(zip(batch.call_ids, slots(batch), strict=True))
        self._cache.store(
            key,
            Entry(
                options={where[c]: o for c, o in decision.mapping.items()},
                causes={where[c]: cause for c, cause in self.last_fallbacks.items()},
                reason=outcome.answer.reason,
                estimates=estimates(obs, batch.shape),
                fallback_mapping=outcome.unguarded,
            ),
        )
        return decision

    def _fallback_decision(
        self, batch: Batch, view: View, lead: Decision | None = None
    ) -> tuple[Decision, str]:
        """The fallback policy's decision: the one made beside the model for this step
        (``lead``) where there is one, else asked now (static if it fails)."""
        if lead is not None and not lead.probe:
            return lead, self.fallback.name
        try:
            return self.fallback.decide(batch, view), self.fallback.name
        except Exception as exc:
            from langgraph_devsched.schedulers.static import StaticHintScheduler

            logger.warning(
                "fallback scheduler %s failed (%s); using static", self.fallback.name, exc
            )
            return StaticHintScheduler().decide(batch, view), "static"

    def _finish(
        self,
        batch: Batch,
        view: View,
        answer: ParsedAnswer,
        *,
        llm_calls: int,
        prior: Mapping[str, AgenticCause],
        reason: str,
        issues: tuple[str, ...],
        record: ConsultationRecord,
        seen: Mapping[str, float],
        fit_vram: bool = True,
        lead: Decision | None = None,
    ) -> tuple[AgenticDecision, dict[str, DeviceOption]]:
        needs_fallback = any(answer.options.get(c) not in DEVICE_OPTIONS for c in batch.call_ids)
        fallback: Mapping[str, DeviceOption] = {}
        used = ""
        if needs_fallback:
            base, used = self._fallback_decision(batch, view, lead)
            fallback = base.mapping
        mapping, causes = repair(
            answer, batch, view.device, self.constraints, fallback=fallback, vram_seen_mb=seen,
            fit_vram=fit_vram,
        )
        causes = {**prior, **causes}
        self.last_fallbacks = causes
        self.last_issues = issues
        notes = [reason]
        repaired = {c: k for c, k in causes.items() if k in REPAIRED}
        fell = {c: k for c, k in causes.items() if k not in REPAIRED}
        if repaired:
            notes.append(
                "repaired " + ", ".join(f"{c}->{mapping[c]} ({k})" for c, k in repaired.items())
            )
        if fell:
            notes.append(
                f"fallback {used or self.fallback.name} for "
                + ", ".join(f"{c} ({k})" for c, k in fell.items())
            )
        notes.extend(issues)
        decision = self._decision(
            mapping,
            "; ".join(notes),
            fallback="invalid_decision" if causes or issues else None,
            llm_calls=llm_calls,
            consultation=record,
        )
        return decision, mapping

    def _decision(
        self, mapping: Mapping[str, DeviceOption], reason: str, **kw: Any
    ) -> AgenticDecision:
        return AgenticDecision(mapping=dict(mapping), reason=reason, scheduler=self.name, **kw)

    def _whole_fallback(
        self,
        batch: Batch,
        view: View,
        cause: AgenticCause,
        detail: str,
        record: ConsultationRecord,
        *,
        cached: bool = False,
        lead: Decision | None = None,
    ) -> Decision:
        base, used = self._fallback_decision(batch, view, lead)
        mapping, repairs = repair(
            ParsedAnswer(dict(base.mapping)), batch, view.device, self.constraints, fallback={}
        )
        self.last_fallbacks = dict.fromkeys(batch.call_ids, cause)
        self.last_issues = (detail,) if detail else ()
        how = "earlier consultation failed" if cached else "consultation failed"
        reason = f"agentic {how} ({cause}: {detail}); fallback {used}: {base.reason}"
        if repairs:
            fixes = ", ".join(f"{c}->{mapping[c]} ({k})" for c, k in repairs.items())
            reason += f"; repaired {fixes}"
        return self._decision(
            mapping,
            reason,
            predicted_ms=dict(base.predicted_ms),
            probe=base.probe,
            fallback="scheduler_error",
            llm_calls=record.llm_calls,
            consultation=record,
        )


def vram_seen(obs: Mapping[str, Any]) -> Mapping[str, float]:
    """The VRAM each tool was seen to take, from the observations as data (`fingerprint`)."""
    return obs.get("vram_seen_mb") or {}


def _one_candidate(consultation: Consultation | PickConsultation) -> bool:
    return isinstance(consultation, PickConsultation) and len(consultation.candidates) == 1


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def _env_options() -> dict[str, Any]:
    """Scheduler options set in the environment (``DEVSCHED_LLM_TIMEOUT`` and friends)."""
    import os

    out: dict[str, Any] = {}
    if os.environ.get(ENV_TIMEOUT):
        out["timeout_s"] = float(os.environ[ENV_TIMEOUT])
    if os.environ.get(ENV_MAX_TOKENS):
        out["max_tokens"] = int(os.environ[ENV_MAX_TOKENS])
    if os.environ.get(ENV_MODE):
        out["mode"] = check_choice(os.environ[ENV_MODE], CONSULT_MODES, f"${ENV_MODE}")
    if os.environ.get(ENV_ANSWER):
        out["answer"] = check_choice(os.environ[ENV_ANSWER], ANSWER_CHANNELS, f"${ENV_ANSWER}")
    if os.environ.get(ENV_CANDIDATES):
        out["candidates"] = int(os.environ[ENV_CANDIDATES])
    return out


def _fallback_scheduler(fallback: Scheduler | str | None) -> Scheduler:
    from langgraph_devsched.schedulers.registry import make_scheduler

    if fallback is not None and not isinstance(fallback, str):
        return fallback
    try:
        return make_scheduler(fallback or "monitor")
    except Exception as exc:
        if fallback is not None:
            raise
        logger.info("monitor scheduler unavailable (%s); agentic falls back to static", exc)
        return make_scheduler("static")


def make_agentic(**kwargs: Any) -> AgenticScheduler:
    """Registry factory: ``model=`` a chat model, else `AgenticScheduler.from_env` (a model
    name in ``model=`` or ``$DEVSCHED_LLM_MODEL``); unconfigured: `AgenticNotConfiguredError`."""
    model = kwargs.get("model")
    if model is not None and not isinstance(model, str):
        return AgenticScheduler(**kwargs)
    return AgenticScheduler.from_env(**kwargs)
