"""The agentic scheduler: an LLM sub-agent that decides a device option per call.

For a step it asks the classical policy (the fallback, ``monitor``) beside it: the policy's
probe, the monitor's symmetric or swap reprobe, runs as it is, unconsulted (`_probe`); its
mapping is never shown, only kept for agreement figures and for fallback. Otherwise, unless
the cache has an answer for the same observations (`cache`), the mode (`modes`) builds a
consultation: by default the monitor's observation tools called for the model and their
outputs as tool messages (`observations`), one forced turn answering one option per call
id through a json_schema with an enum per call (`model`, `consult`). The answer is read
leniently (`answers`) and never trusted: held to the hints and hard constraints
(`constraints.repair`), the fallback's option for what it cannot repair; the twin guard
rejects an answer predicted beyond ``guard_ratio`` of the best it knows unless it measures
what an exploration hint names (`guard`); an error, a timeout or a full set of consultation
threads (`slots`) falls back for the whole step (``scheduler_error``). An answer the guard
vetoes (measured slower, unfunded exploration, the twin's ratio: `exploration.Veto`) is no
failure: the policy's mapping runs, with the veto in `Decision.veto` and the record. Every
cause is in the decision's ``reason``/``fallback``/``veto``, per call in
`AgenticScheduler.last_fallbacks`, and the
consultation's record (channel, latency, tokens, guard predictions, agreement) in
`AgenticDecision.consultation` (`record`). On a machine with several GPUs the answer names
each GPU call's GPU (``gpu_now@1``, `gpu_choice`), kept in `Decision.gpus`.

>>> from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
>>> from langchain_core.messages import AIMessage
>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, SchedulerView
>>> from langgraph_devsched.telemetry import DeviceState
>>> class Scripted(FakeMessagesListChatModel):
...     def bind_tools(self, tools, **kw): return self
>>> scheduler = AgenticScheduler(Scripted(responses=[AIMessage('{"c1": "cpu"}')]),
...                              fallback="static")
>>> batch = Batch.of([("c1", "embed", ToolDeviceSpec(vram_mb=300))])
>>> view = SchedulerView(DeviceState(True, "gpu", 8000, 0, 0.0, 8))
>>> d = scheduler.decide(batch, view)
>>> dict(d.mapping), d.llm_calls, d.consultation.channel, d.consultation.agrees
({'c1': 'cpu'}, 1, 'json_schema', False)
>>> scheduler.decide(batch, view).llm_calls, scheduler.llm_calls   # same situation: cached
(0, 1)
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption, FallbackCause
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.agentic.admitted import admitted, candidates
from langgraph_devsched.schedulers.agentic.answers import ParsedAnswer
from langgraph_devsched.schedulers.agentic.cache import (
    DecisionCache,
    Entry,
    Key,
    estimates,
    fingerprint,
    occurrences,
)
from langgraph_devsched.schedulers.agentic.config import (
    ANSWER_CHANNELS,
    CONSULT_MODES,
    AnswerChannel,
    ConsultMode,
    check_choice,
    env_options,
)
from langgraph_devsched.schedulers.agentic.constraints import (
    REPAIRED,
    AgenticCause,
    HardConstraints,
    repair_on_gpus,
)
from langgraph_devsched.schedulers.agentic.consult import Outcome, Runner, Tally
from langgraph_devsched.schedulers.agentic.exploration import ExplorationLedger, Veto
from langgraph_devsched.schedulers.agentic.fallback import (
    TIE_MS,
    agreement,
    fallback_lead,
    held_to_rules,
)
from langgraph_devsched.schedulers.agentic.gpu_choice import (
    kept,
    several,
    slot_mapping,
    spell,
    split_answer,
)
from langgraph_devsched.schedulers.agentic.gpu_outcomes import GpuOutcomes
from langgraph_devsched.schedulers.agentic.guard import (
    MEASURED_MARGIN,
    MeasuredVerdict,
    TwinView,
    guard,
    hinted_probe,
    measured_guard,
)
from langgraph_devsched.schedulers.agentic.model import ChannelState, openai_model
from langgraph_devsched.schedulers.agentic.modes import Mode, Step, make_mode
from langgraph_devsched.schedulers.agentic.observations import (
    answer_values,
    mapping_of,
    outcomes_of,
)
from langgraph_devsched.schedulers.agentic.record import (
    AgenticDecision,
    ConsultationRecord,
    Deviation,
)
from langgraph_devsched.schedulers.agentic.slots import ConsultationSlots
from langgraph_devsched.schedulers.agentic.words_reader import (
    MAX_UNDECLARED,
    MessageReader,
    undeclared,
)
from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerBase
from langgraph_devsched.schedulers.base import SchedulerView as View

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Screen:
    """What the guard's checks say of one mapping (`AgenticScheduler._screen`)."""

    fields: dict[str, Any]
    """Record fields: the guard's figures, agreement and deviation, the veto."""
    measured: MeasuredVerdict | None
    rejected: str | None = None
    """Why the mapping may not run (a veto's or the twin guard's text); None: it may."""


@dataclass
class _Prepared(Step):
    """A step about to be consulted: its cache key, start time and consultation."""

    key: Key = ()
    started: float = 0.0
    consultation: Any = None

    @functools.cached_property
    def held_policy(self) -> dict[str, DeviceOption] | None:
        """The policy's mapping held to the hard constraints (`fallback.held_to_rules`), once
        a step: every answer the screen judges is compared with it; None without a lead."""
        if self.lead is None or self.lead.probe:
            return None
        return held_to_rules(self.batch, self.view, self.constraints, self.lead,
                             self.vram_seen)[0]


class AgenticScheduler(SchedulerBase):
    """An LLM sub-agent that decides, given the monitor's observations; held to the rules.

    ``model``: any LangChain chat model. ``policy``: operator guidance in plain words, given
    to the model. ``min_free_vram_mb``, ``pinned`` (tool -> option) and ``cpu_forbidden``
    are enforced on every answer. ``fallback``: the classical policy (or its name) decided
    beside the model: its probes run unconsulted, its mapping is the agreement reference
    and the fallback (default ``"monitor"``, else ``"static"``). ``timeout_s`` bounds one
    consultation; each request gets what is left of it. ``mode``: ``"agent"`` (default; the
    observations as tool outputs, ``max_turns`` turns, the last forced), ``"one_shot"`` (the
    outputs inline) or ``"pick"`` (ratifying: the policy's mapping and the twin's best as
    ``candidates`` numbered, default 3, within ``pick_within`` of the best; tool channels
    refused). ``answer``: the forced turn's channel (``"auto"``: json_schema, tool_required,
    text; or one of them, or ``"tool_named"``).
    ``max_tokens``: completion tokens per turn (None: sized to the batch). ``guard_ratio``:
    reject an answer the twin predicts worse than this times the best mapping it knows,
    unless it measures what an exploration hint names (None: off).
    ``max_explorations``: deviations from the policy whose mapping never ran, run as probes
    per shape at most, each only while the shape's budget is positive and covers its
    predicted cost (``explore_allowance_ms`` plus what the shape's deviations won;
    `exploration`); None, or the guard off: unbounded. A deviation measured slower than the
    fastest measured mapping of its shape is refuted and vetoed (with the guard on).
    ``screen``: before asking, screen every answer of the step (at most
    `admitted.MAX_ENUMERATED`) with those same checks; the json_schema answer admits only
    the survivors, and where one alone survives the step takes it without asking
    (``skipped="one_admitted"``). False: the model is offered every allowed option and the
    guard judges its answer afterwards only.
    ``max_consultations``: consultation threads alive at once (a hung model holds one; all
    held: the step falls back at once, ``busy``). ``drift_tolerance``: the relative change
    of an estimate's mean that invalidates a cached decision. ``retry_failed_after``: steps
    a failed consultation's fallback is reused before the model is asked again. ``clock``:
    monotonic seconds (latency, budgets).
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
        max_tokens: int | None = None,
        guard_ratio: float | None = 1.5,
        candidates: int = 0,
        pick_within: float | None = 1.05,
        max_explorations: int | None = 2,
        explore_allowance_ms: float = 0.0,
        screen: bool = True,
        max_consultations: int = 2,
        drift_tolerance: float = 0.25,
        retry_failed_after: int = 10,
        cache_size: int = 256,
        read_messages: bool = True,
        device_classes: bool = False,
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
        check_choice(answer, ANSWER_CHANNELS, "answer channel")
        self._mode: Mode = make_mode(mode, answer)  # pick refuses the tool channels
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
        self.max_tokens = max_tokens
        self.guard_ratio = guard_ratio
        self.screen = screen
        self.candidates = candidates
        self.pick_within = pick_within
        self.retry_failed_after = retry_failed_after
        self._explorations = None if max_explorations is None else ExplorationLedger(
            allowance_ms=explore_allowance_ms, max_probes=max_explorations)
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
        self._runner = Runner(ConsultationSlots(max_consultations), timeout_s, clock)
        self._lock = threading.Lock()
        self._private_monitor: Any = None
        self._last_device: Any = None
        self._gpu_outcomes = GpuOutcomes()
        """Executed mappings with their GPUs (several GPUs: the monitor's lack the GPU)."""
        self.read_messages = read_messages
        """Whether the sub-agent forecasts from the user's request (`forecast_words`)."""
        self.device_classes = device_classes
        """Whether its reading also asks a device class for each tool that declares nothing
        (a `device_prior` until measured). Off by default: measured with Qwen2.5-Coder-1.5B
        on TaskBench under ``--declare none``, it put heavy tools on the CPU (8 of 12
        conversations longer, up to 34x) and tripled the reading's latency (docs/words.md)."""
        self._words = MessageReader(model, timeout_s=timeout_s)
        self._undeclared: frozenset[str] = frozenset()

    @property
    def channel(self) -> AnswerChannel:
        """The answer channel the next forced turn uses (``auto`` moves it on failures)."""
        return self._mode.channel.current

    @property
    def channel_state(self) -> ChannelState:
        return self._mode.channel

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
        options = {**env_options(), **options}
        chat = openai_model(
            model, base_url=base_url, api_key=api_key, timeout_s=options.get("timeout_s", 30.0)
        )
        return cls(chat, **options)

    # -- protocol ------------------------------------------------------------------------------

    def decide(self, batch: Batch, view: View, *, config: RunnableConfig | None = None) -> Decision:
        step = self._prepare(batch, view, asynchronous=False)
        if isinstance(step, Decision):
            return step
        outcome = step.consultation.skip() or self._runner.run(step.consultation, config)
        return self._carried(step, self._conclude(step, outcome))

    async def adecide(
        self, batch: Batch, view: View, *, config: RunnableConfig | None = None
    ) -> Decision:
        """`decide` without blocking the event loop: a natively async model runs on the loop
        and is cancelled at the deadline; any other runs in a consultation thread."""
        step = self._prepare(batch, view, asynchronous=True)
        if isinstance(step, Decision):
            return step
        outcome = step.consultation.skip() or await self._runner.arun(step.consultation, config)
        return self._carried(step, self._conclude(step, outcome))

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        deviation = getattr(getattr(decision, "consultation", None), "deviation", None)
        if deviation is not None and deviation.answer_measured_ms is None:
            deviation.measured(float(record.makespan_ms))
            if self._explorations is not None and deviation.budgeted:
                with self._lock:
                    self._explorations.settled(batch.shape, deviation.predicted_cost_ms,
                                               won_ms=deviation.won_ms)
        if self._last_device is not None and several(self._last_device):
            self._gpu_outcomes.record(record)
        if self._private_monitor is not None and self._last_device is not None:
            self._private_monitor.record_step(batch, decision, record, self._last_device)
        self.fallback.observe(batch, decision, record)

    # -- the policy's loads as investments -----------------------------------------------------

    def declare_tools(self, specs: Mapping[str, Any]) -> None:
        """The app's tools, known before any step, passed to the policy beside the model
        (``monitor``: its `Investments` may warm declared models before their first use).
        With ``device_classes``, those that declare no solo time and no device prior, and
        may run on either side, are the ones the sub-agent gives a device class when it
        reads a request (`undeclared`)."""
        declare = getattr(self.fallback, "declare_tools", None)
        if declare is not None:
            declare(specs)
        if self.device_classes:
            self._undeclared = frozenset(list(
                t for t, spec in specs.items() if undeclared(spec))[:MAX_UNDECLARED])

    @property
    def reads_words(self) -> bool:
        """Whether `forecast_words` answers (``read_messages``)."""
        return self.read_messages

    def forecast_words(self, text: str, tools: Sequence[tuple[str, str]]) -> list[Any] | None:
        """The sub-agent's forecast from words (`words_reader.MessageReader`): the request's
        text and the tools' names and descriptions, nothing else; in two stages, words
        without a model at once, then the model's with it. None with
        ``read_messages=False``."""
        return (self._words.read(text, tools, self._undeclared) if self.read_messages
                else None)

    def expect(self, forecast: Any) -> None:
        """A forecast from words now in force, handed to the policy beside the model (its
        loads' economics: `DefaultPolicy.expect`)."""
        expect = getattr(self.fallback, "expect", None)
        if expect is not None:
            expect(forecast)

    def preloads(self, device: Any, idle_ms: float) -> list[Any]:
        """The model loads the policy beside the model finds worth running in ``idle_ms``
        before the next step (its `Investments`: forecast uses against load cost); none
        without such a policy. Without this, the agentic scheduler ran its policy's mappings
        without its preloads (`residency_cold_burst`: Σ 1.21x against the monitor's 1.04x)."""
        ask = getattr(self.fallback, "preloads", None)
        return list(ask(device, idle_ms)) if ask is not None else []

    def calibration(self) -> tuple[Batch, Decision] | None:
        """The one-call run the policy beside the model asks for in idle time (its hedge
        calibration: a side never measured), fed back through `observe`; None without
        such a policy. Without this the policy learned less beside the model than alone,
        and its probes drifted from its own (serial_llm_colocated: 9,855 ms against the
        monitor's 9,847 in the same run, with no deviation)."""
        ask = getattr(self.fallback, "calibration", None)
        return ask() if ask is not None else None

    def _with_observations(self, batch: Batch, view: View) -> View:
        """Without a monitor in the view, keep a private one fed by `observe`."""
        self._last_device = view.device
        if view.observations is not None:
            return view
        if self._private_monitor is None:
            from langgraph_devsched.monitor import RuntimeMonitor

            self._private_monitor = RuntimeMonitor()
        return View(view.device, self._private_monitor.snapshot(
            batch, tools={c.tool for c in batch.calls}))

    # -- fingerprint, cache, probes ------------------------------------------------------------

    def _step(self, batch: Batch, view: View) -> _Prepared:
        """The step with the fallback policy's decision beside it (`classical.fallback_lead`)
        and its cache key: the fingerprint (hints, estimates, device bucket) and the mode's
        part (the default mode: the executed mappings of the shape; pick: the policy's
        mapping). With several GPUs the executed mappings are the scheduler's own, each call
        on its GPU (`gpu_outcomes`)."""
        key, obs = fingerprint(batch, view)
        if several(view.device):
            obs = {**obs, "outcomes": self._gpu_outcomes.rows(batch)}
        step = _Prepared(
            model=self.model, batch=batch, view=view, obs=obs, constraints=self.constraints,
            policy=self.policy, max_turns=self.max_turns, max_tokens=self.max_tokens,
            timeout_s=self.timeout_s, clock=self.clock, on_llm_call=self._count_llm_call,
            lead=fallback_lead(self.fallback, batch, view), candidates=self.candidates,
            pick_within=self.pick_within, guard_ratio=self.guard_ratio,
            explore_ms=self._explore_ms(batch),
            uses_next=self._uses_next(batch),
            started=self.clock(),
        )
        step.key = (*key, self._mode.key(step))
        return step

    def _count_llm_call(self) -> None:
        with self._lock:
            self.llm_calls += 1

    def _uses_next(self, batch: Batch) -> dict[str, float]:
        """The policy's forecast uses over the coming steps of each model of ``batch`` (none
        without such a policy): what repays a load, an observation for the model."""
        coming = getattr(self.fallback, "coming_uses", None)
        if coming is None:
            return {}
        models = {m for c in batch.calls if (m := c.spec.model_name(c.tool)) is not None}
        return {m: float(coming(m)) for m in sorted(models)}

    def _explore_ms(self, batch: Batch) -> float | None:
        """What a probe of an unmeasured mapping of ``batch``'s shape may cost now (None:
        no bound, the guard off)."""
        if self._explorations is None or self.guard_ratio is None:
            return None
        with self._lock:
            return self._explorations.left_ms(batch.shape)

    def _prepare(self, batch: Batch, view: View, *, asynchronous: bool) -> _Prepared | Decision:
        """The decision made without the model (a probe, a cached answer, every consultation
        thread held: ``busy``), else the step with its consultation built."""
        step = self._step(batch, self._with_observations(batch, view))
        decided = self._without_model(step, asynchronous=asynchronous)
        return step if decided is None else self._carried(step, decided)

    def _carried(self, step: _Prepared, decision: Decision) -> Decision:
        """``decision`` as the policy's own where it runs the policy's mapping: an answer
        the same in effect (``agrees``: ``gpu_now`` for the policy's ``gpu_queued`` on a
        lone GPU call, two calls of one tool swapping options) runs in the policy's own
        spelling, so that what the policy and its monitor learn from the step is what the
        policy decided (the monitor keys what ran by option: spelled otherwise, the
        policy's probes drifted from its own, 2 ms lost in serial_audio_features with no
        deviation); and on the policy's mapping and GPUs, what it decided beside the
        mapping (its background loads, its hedges) comes too: its investments for that
        very mapping. Dropped, a load the monitor started in the background of a CPU step
        ran on the critical path instead (gen-s1-9: 5,540 ms against the monitor's 4,587,
        with no deviation at all)."""
        lead, held = step.lead, step.held_policy
        record = getattr(decision, "consultation", None)
        if (record is not None and record.agrees and held is not None
                and self.guard_ratio is not None  # the guard off: answers run as given
                and not several(step.view.device) and dict(decision.mapping) != held):
            decision = replace(decision, mapping=dict(held))
        if lead is None or not (lead.background or lead.hedges):
            return decision
        if dict(decision.mapping) != dict(lead.mapping) or (
                several(step.view.device)
                and dict(decision.gpus) != kept(lead.gpus, decision.mapping)):
            return decision
        return replace(decision, background=lead.background, hedges=dict(lead.hedges),
                       hedge_bound=lead.hedge_bound)

    def _without_model(self, step: _Prepared, *, asynchronous: bool) -> Decision | None:
        """The decision made without the model, or None: the model is to be asked (the
        step's consultation is then built)."""
        batch = step.batch
        if step.lead is not None and step.lead.probe:
            return self._probe(step, step.lead)
        try:
            step.twin_view = TwinView.build(batch, step.view.device, step.view.observations,
                                            reload=getattr(self.fallback, "reload_ms", None))
        except Exception as exc:  # the twin is advice: never let it break a step
            logger.info("agentic twin unavailable: %s", exc)
        trial = self._mode.trial(step)
        if trial is not None and step.lead is not None:
            return self._probe(step, step.lead, trial=trial)
        cached = self._lookup(step)
        if cached is not None:
            return cached
        if self._runner.full(self.model, asynchronous=asynchronous):
            return self._conclude(step, self._runner.late(Tally(mode=self.mode), "busy"))
        step.admitted = lambda: self._admitted(step)
        step.consultation = self._mode.consultation(step)
        return None

    def _lookup(self, step: _Prepared) -> Decision | None:
        """The cached decision for the step's key, its options carried over to the new call
        ids by occurrence; a cached failure or veto answered by the fallback. A cached answer whose
        mapping has since measured slower than the fastest of its shape (`measured_guard`)
        is no hit: that measurement is an observation the model is asked about."""
        batch = step.batch
        entry = self._cache.lookup(step.key, estimates(step.obs, batch.shape))
        if entry is None:
            return None
        where = dict(zip(batch.call_ids, occurrences(batch), strict=True))
        named = {c: entry.gpus[where[c]] for c in batch.call_ids if where[c] in entry.gpus}
        options = {c: entry.options[where[c]] for c in batch.call_ids} if (
            not entry.provisional) else {}
        answer = ParsedAnswer({c: spell(o, named.get(c)) for c, o in options.items()})
        if not entry.provisional and not entry.fallback_mapping:
            measured = self._measured_verdict(step, options, named)
            if measured is not None and measured.rejected:
                return None
        with self._lock:
            self.cache_hits += 1
        record = ConsultationRecord(cached=True, cause=entry.failure, veto=entry.veto,
                                    mode=self.mode)
        if entry.veto is not None:
            return self._instead(step, record, "vetoed", entry.veto.text(),
                                 f"agentic answer vetoed earlier ({entry.veto.text()}), not "
                                 "consulted again yet; policy", veto=entry.veto.text())
        if entry.failure is not None:
            return self._whole_fallback(step, entry.failure, "not consulted again yet", record,
                                        cached=True)
        prior = {c: entry.causes[where[c]] for c in batch.call_ids if where[c] in entry.causes}
        decision, mapping = self._finish(step, answer, f"agentic (cached): {entry.reason}",
                                         record, prior=prior, fit_vram=not entry.fallback_mapping)
        if entry.fallback_mapping:
            return decision
        compared = agreement(batch, step.view, self.constraints, mapping, step.lead, step.obs,
                             step.twin_view, decision.gpus, self._scored(batch))
        deviation = compared.get("deviation")
        if deviation is not None and self._explore(
                step, deviation, self._measured_verdict(step, mapping, decision.gpus)):
            return None  # a deviation the evidence no longer allows: the model is asked
        return replace(decision, consultation=replace(record, **compared))

    def _probe(self, step: _Prepared, lead: Decision, *, trial: str | None = None) -> Decision:
        """The monitor's reprobe, run without consulting: symmetric, swap or unknown-side
        probes that the fallback policy (``monitor``) sizes from the exploration hints.

        A probe is a measurement, not a choice among mappings: the model is not asked, the
        cache is left as it is, and the measurement reaches the model as an observation at
        its next consultation (a new executed mapping, new estimates). Measured with
        Qwen2.5-Coder-1.5B (docs/agentic.md): not running the probes left the fallback
        unable to learn (8 of 13 built-ins optimal); offering each probe for the model to
        ratify consulted on every step. The probe is held to the hard constraints."""
        mapping, repairs = held_to_rules(step.batch, step.view, self.constraints, lead,
                                         step.vram_seen)
        self.last_fallbacks, self.last_issues = {}, ()
        what = f"{self.fallback.name} trial, not consulted: {trial}" if trial else (
            f"{self.fallback.name} probe, not consulted: {lead.reason}")
        return self._decision(
            mapping, what + _repaired(mapping, repairs),
            predicted_ms={} if repairs else dict(lead.predicted_ms), probe=True,
            consultation=ConsultationRecord(mode=self.mode,
                                            skipped="trial" if trial else "probe"),
            **_lead_gpus(step, lead, mapping),
        )

    def clear_cache(self) -> None:
        """Forget every cached decision: the next step consults the model."""
        self._cache.clear()

    def prompt(self, batch: Batch, view: View | None = None) -> list[AnyMessage]:
        """The first messages of a consultation of ``batch`` (for a look at them)."""
        from langgraph_devsched.telemetry import DeviceState

        view = self._with_observations(batch, view or View(DeviceState(False, "none", 0, 0,
                                                                       0.0, 1)))
        return self._mode.consultation(self._step(batch, view)).prompt()

    # -- from an answer to a decision ----------------------------------------------------------

    def _record(self, outcome: Outcome, started: float, **kw: Any) -> ConsultationRecord:
        tally: Tally = outcome.tally
        return ConsultationRecord(
            channel=tally.channel, channels_tried=tuple(tally.channels_tried), via=outcome.via,
            latency_ms=(self.clock() - started) * 1000.0, llm_calls=tally.llm_calls,
            prompt_tokens=tally.prompt_tokens, cached_tokens=tally.cached_tokens,
            cause=outcome.failure, detail=outcome.detail, mode=tally.mode or self.mode,
            pick=outcome.pick, candidates=tally.candidates, skipped=outcome.skipped, **kw,
        )

    def _conclude(self, step: _Prepared, outcome: Outcome) -> Decision:
        """The consultation's outcome as a decision: repaired, guarded (a veto runs the
        policy's mapping), compared with the policy's mapping, cached (a failure or a veto
        too, the model asked again after ``retry_failed_after``)."""
        batch, obs = step.batch, step.obs
        if outcome.skipped is None:
            with self._lock:
                self.consultations += 1
        self.last_messages = outcome.messages
        if outcome.answer is None:
            return self._failed(step, outcome.failure or "no_answer", outcome.detail,
                                self._record(outcome, step.started))
        issues = list(outcome.answer.issues)
        unknown = sorted(set(outcome.answer.options) - set(batch.call_ids))
        if unknown:
            issues.append(f"unknown call id(s) {', '.join(unknown)}; valid: "
                          + ", ".join(batch.call_ids))
        record = self._record(outcome, step.started)
        decision, mapping = self._finish(
            step, outcome.answer, f"agentic: {outcome.answer.reason}".rstrip(": "), record,
            issues=tuple(issues),
            fit_vram=not outcome.unguarded,  # the fallback's own mapping: its twin fitted it
        )
        screen = self._screen(step, mapping, decision.gpus, unguarded=outcome.unguarded)
        extra = screen.fields
        deviation = extra.get("deviation")
        if screen.rejected is None and deviation is not None and not outcome.unguarded:
            veto = self._explore(step, deviation, screen.measured)  # priced again, atomically
            if veto is not None:
                extra = {**{k: v for k, v in extra.items() if k != "guard_waived"},
                         "veto": veto,
                         "guard_by": "measured" if screen.measured is not None else "twin"}
        if extra.get("veto") is not None:
            return self._vetoed(step, replace(record, **extra))
        decision = replace(decision, consultation=replace(record, **extra))
        where = dict(zip(batch.call_ids, occurrences(batch), strict=True))
        self._cache.store(step.key, Entry(
            options={where[c]: o for c, o in decision.mapping.items()},
            causes={where[c]: cause for c, cause in self.last_fallbacks.items()},
            reason=outcome.answer.reason, estimates=estimates(obs, batch.shape),
            fallback_mapping=outcome.unguarded,
            gpus={where[c]: g for c, g in decision.gpus.items()},
        ))
        return decision

    def _screen(self, step: _Prepared, mapping: Mapping[str, DeviceOption],
                gpus: Mapping[str, int] | None, *, unguarded: bool = False) -> _Screen:
        """The guard's checks on ``mapping`` (an answer held to the rules), in order:
        refuted by measurement (`measured_guard`), predicted by the twin beyond
        ``guard_ratio`` of the best unless it measures an exploration hint (`guard`), then
        compared with the policy's mapping (`agreement`) and, for a deviation, the shape's
        exploration budget looked at without spending it. ``unguarded``: the policy's own
        mapping, never rejected, and so is an answer that is the policy's mapping (a
        rejection would fall back to that very mapping, and count the answer invalid). The
        one rule for an answer (`_conclude`) and for the mappings offered before asking
        (`_admitted`)."""
        batch = step.batch
        unguarded = unguarded or self._is_policy(step, mapping, gpus)
        measured = self._measured_verdict(step, mapping, gpus)
        if measured is not None and measured.rejected and not unguarded:
            veto = Veto("refuted", measured.answer_ms, measured.fastest_ms)
            return _Screen({"guard_answer_ms": measured.answer_ms,
                            "guard_best_ms": measured.fastest_ms, "guard_by": "measured",
                            "veto": veto}, measured, veto.text())
        extra: dict[str, Any] = {}
        if self.guard_ratio is not None and step.twin_view is not None:
            verdict = guard(step.twin_view, mapping, ratio=self.guard_ratio)
            extra = {"guard_answer_ms": verdict.answer_ms, "guard_best_ms": verdict.best_ms}
            if verdict.rejected and not unguarded:
                asked_for = hinted_probe(mapping, batch, step.obs.get("hints", ()))
                if asked_for is None:
                    veto = Veto("twin", verdict.answer_ms, verdict.ratio * verdict.best_ms)
                    return _Screen({**extra, "veto": veto}, measured, veto.text())
                extra["guard_waived"] = asked_for
        extra.update(agreement(batch, step.view, self.constraints, mapping, step.lead,
                               step.obs, step.twin_view, gpus, self._scored(batch)))
        deviation = extra.get("deviation")
        if deviation is not None and not unguarded and self._explorations is not None and (
                self.guard_ratio is not None):
            cost, explores = self._price(step, deviation, measured)
            with self._lock:
                unfunded = self._explorations.check(batch.shape, cost, explores=explores)
            if unfunded is not None:
                extra = {k: v for k, v in extra.items() if k != "guard_waived"}
                extra.update(veto=unfunded,
                             guard_by="measured" if measured is not None else "twin")
                return _Screen(extra, measured, unfunded.text())
        return _Screen(extra, measured)

    def _is_policy(self, step: _Prepared, mapping: Mapping[str, DeviceOption],
                   gpus: Mapping[str, int] | None) -> bool:
        """Whether ``mapping`` (on ``gpus``) is the policy's mapping held to the rules."""
        policy = step.held_policy
        if step.lead is None or policy is None or dict(mapping) != policy:
            return False
        return not several(step.view.device) or dict(gpus or {}) == kept(step.lead.gpus,
                                                                          policy)

    def _admitted(self, step: _Prepared) -> list[dict[str, str]] | None:
        """The answers the evidence admits for the step (`admitted`): held to the rules
        without a repair and passing `_screen`, the policy's mapping first; None with the
        guard off or when the step's answers are not screened (`admitted.candidates`)."""
        lead, held = step.lead, step.held_policy
        if not self.screen or self.guard_ratio is None or lead is None or held is None:
            return None
        batch, device = step.batch, step.view.device
        values = {c.call_id: answer_values(c, self.constraints, device) for c in batch.calls}
        policy: dict[str, str] = dict(held)
        if several(device):  # the answer's values name the GPU, as the executed rows do
            policy = slot_mapping(batch, device, held, kept(lead.gpus, held), step.vram_seen)
        measured = (mapping_of(row.get("placement", ()), batch)
                    for row in outcomes_of(step.obs, batch))
        known: list[dict[str, str]] = [policy, *(m for m in measured if m is not None)]
        # no unmeasured deviation can run (each priced, on several GPUs as no win; none
        # funded): the policy's mapping and the measured ones are all the guard can admit
        complete = self._explore_ms(batch) == 0.0 and (
            step.twin_view is not None or several(device))

        def judge(options: dict[str, str]) -> bool | None:
            mapping, causes, gpus, _ = self._held(step, ParsedAnswer(options))
            if causes:
                return None
            screen = self._screen(step, mapping, gpus)
            return None if screen.rejected is not None else bool(screen.fields.get("agrees"))

        try:
            answers = candidates(values, known, complete=complete)
            return None if answers is None else admitted(answers, judge)
        except Exception as exc:  # the screen is advice before the guard: never break a step
            logger.info("agentic admitted mappings unavailable: %s", exc)
            return None

    def _price(self, step: _Prepared, deviation: Deviation, measured: MeasuredVerdict | None
               ) -> tuple[float | None, bool]:
        """A deviation's predicted cost (None: nothing predicts it) and whether it explores
        (its mapping never ran). The win is the least that any evidence sees: the gap of
        the two measured means where both mappings ran, and the twin's (or the policy's
        scores') difference; a win under `_least_win` is a tie at best, and a tie runs only
        on a funded budget (`ExplorationLedger.check`). Judged exactly by the bench, a model
        answering whatever the screen admitted lost 46.7 ms over the 17 built-ins (20
        rounds, seeds 0-2) and won nothing: ties priced 0 ms, a twin-predicted 4 ms win on a
        39 ms step, and measured wins of 25 ms (an under-estimated noise) that the twin saw
        as 0.6 ms losses. On several GPUs, where no twin prices a mapping, a deviation
        nothing prices (its mapping or the policy's never ran) is priced 0 ms: not a win.
        Unpriced there, such probes cost a model proposing another mapping every step
        1.1-18x the policy's whole run on the four multi-GPU built-ins, and the real model
        5.7 s in the first round of gpus_embed_beside_large_model; a measured answer beside
        a policy mapping that never ran still went unpriced, and lost 2.8 ms twice exactly
        in gen-s7-37 (a workload not tuned on)."""
        gap = None
        if measured is not None and deviation.policy_measured_ms is not None:
            gap = deviation.policy_measured_ms - measured.answer_ms
        seen = [w for w in (gap, deviation.twin_won_ms) if w is not None]
        won = min(seen) if seen else None  # a win every piece of evidence sees
        if won is None and several(step.view.device):
            won = 0.0  # no twin prices it there, and the policy's mapping never ran: no win
        if won is not None and won < self._least_win(step, deviation, measured):
            won = min(won, 0.0)  # within what the evidence tells apart: a tie at best
        return (None if won is None else -won), measured is None

    def _least_win(self, step: _Prepared, deviation: Deviation,
                   measured: MeasuredVerdict | None) -> float:
        """The least predicted win that is one: the larger of one run's noise in the shape
        (`Deviation.noise_ms`) and `MEASURED_MARGIN` of the policy's mapping's makespan
        (measured, else the twin's; the margin by which measurement refutes a mapping), at
        least `fallback.TIE_MS`."""
        base = deviation.policy_measured_ms
        if base is None and step.twin_view is not None and not several(step.view.device):
            try:
                base = step.twin_view.predict(cast("dict[str, DeviceOption]", deviation.policy))
            except Exception:  # the prediction is advice
                base = None
        if base is None and measured is not None:
            base = measured.answer_ms
        least = max(TIE_MS, deviation.noise_ms or 0.0)
        return max(least, MEASURED_MARGIN * base) if base is not None else least

    def _explore(
        self, step: _Prepared, deviation: Deviation, measured: MeasuredVerdict | None
    ) -> Veto | None:
        """The shape's exploration budget on ``deviation`` (`exploration`): its cost as
        `_price` predicts it (None: unpriced); a veto, or None with the deviation started on
        the budget. A win the evidence does not tell apart from a tie does not price it as
        one: at 30 ms of noise per run, a mapping measured 13 times and the policy's
        measured twice, both at 644 ms, once priced a deviation the twin put at 13 ms a step
        as a win, and it ran for the rest of the run."""
        if self._explorations is None or self.guard_ratio is None:
            return None  # the guard off: no bound on evidence either
        cost, explores = self._price(step, deviation, measured)  # cost None: an unpriced probe
        shape = step.batch.shape
        with self._lock:
            veto = self._explorations.check(shape, cost, explores=explores)
            if veto is None:
                self._explorations.started(shape, cost, explores=explores)
        if veto is None:
            deviation.predicted_cost_ms, deviation.explored = cost, explores
            deviation.budgeted = True
        return veto

    def _scored(self, batch: Batch) -> Callable[[Mapping[str, DeviceOption]], float | None] | None:
        """The fallback policy's own score of a mapping of ``batch`` (`DefaultPolicy.scored`),
        where the policy has one."""
        scored = getattr(self.fallback, "scored", None)
        if not callable(scored):
            return None
        return lambda mapping: scored(batch, mapping)

    def _measured_verdict(
        self, step: _Prepared, mapping: Mapping[str, str], gpus: Mapping[str, int] | None = None
    ) -> MeasuredVerdict | None:
        """Measurement's verdict on ``mapping`` (None: it never ran, or the guard is off);
        with several GPUs on each call's GPU (``gpus`` named, else the default rule's)."""
        if self.guard_ratio is None:
            return None
        device = step.view.device
        if several(device):
            mapping = slot_mapping(step.batch, device, mapping, gpus, step.vram_seen)
        return measured_guard(outcomes_of(step.obs, step.batch), step.batch, mapping)

    def _failed(
        self, step: _Prepared, cause: AgenticCause, detail: str, record: ConsultationRecord
    ) -> Decision:
        logger.warning("agentic scheduler: %s (%s); falling back", cause, detail)
        self._cache.store(step.key, Entry({}, {}, "", {}, cause, self.retry_failed_after, detail))
        return self._whole_fallback(step, cause, detail, record)

    def _vetoed(self, step: _Prepared, record: ConsultationRecord) -> Decision:
        """The model answered and the guard vetoed its answer (``record.veto``, with both
        figures): the policy's mapping runs. The guard doing its job, not a failed
        consultation: no ``cause``, no ``scheduler_error``; the veto is in `Decision.veto`.
        Cached like a failure: the model is asked again after ``retry_failed_after`` steps."""
        veto = cast("Veto", record.veto)
        text = veto.text()
        logger.info("agentic scheduler: answer vetoed (%s); the policy's mapping runs", text)
        self._cache.store(step.key, Entry({}, {}, "", {}, hits_left=self.retry_failed_after,
                                          detail=text, veto=veto))
        return self._instead(step, record, "vetoed", text,
                             f"agentic answer vetoed ({text}); policy", veto=text)

    def _fallback_decision(self, step: _Prepared) -> tuple[Decision, str]:
        """The fallback policy's decision: the one made beside the model for this step
        (``lead``) where there is one, else asked now (static if it fails)."""
        if step.lead is not None and not step.lead.probe:
            return step.lead, self.fallback.name
        try:
            return self.fallback.decide(step.batch, step.view), self.fallback.name
        except Exception as exc:
            from langgraph_devsched.schedulers.classic.static import StaticHintScheduler

            logger.warning(
                "fallback scheduler %s failed (%s); using static", self.fallback.name, exc
            )
            return StaticHintScheduler().decide(step.batch, step.view), "static"

    def _finish(
        self, step: _Prepared, answer: ParsedAnswer, reason: str, record: ConsultationRecord,
        *, prior: Mapping[str, AgenticCause] | None = None, issues: tuple[str, ...] = (),
        fit_vram: bool = True,
    ) -> tuple[AgenticDecision, dict[str, DeviceOption]]:
        """An answer held to the hints and hard constraints (`constraints.repair`), the
        fallback's option for each call it cannot repair, every cause in the reason. With
        several GPUs the answer's values name the GPU (`gpu_choice.split_answer`): the
        decision's ``gpus`` keeps the valid ones (the fallback's own for the calls it gives)."""
        mapping, causes, gpus, used = self._held(step, answer, fit_vram=fit_vram)
        causes = {**(prior or {}), **causes}
        self.last_fallbacks, self.last_issues = causes, issues
        repaired = {c: k for c, k in causes.items() if k in REPAIRED}
        fell = {c: k for c, k in causes.items() if k not in REPAIRED}
        reason += _repaired(mapping, repaired)
        if fell:
            reason += f"; fallback {used} for " + ", ".join(f"{c} ({k})" for c, k in fell.items())
        decision = self._decision(
            mapping, "; ".join([reason, *issues]),
            fallback="invalid_decision" if causes or issues else None,
            llm_calls=record.llm_calls, consultation=record, gpus=gpus,
        )
        return decision, mapping

    def _held(
        self, step: _Prepared, answer: ParsedAnswer, *, fit_vram: bool = True
    ) -> tuple[dict[str, DeviceOption], dict[str, AgenticCause], dict[str, int], str]:
        """``answer`` held to the hints and hard constraints (`constraints.repair_on_gpus`;
        with several GPUs its values split into option and GPU first): the mapping, the
        cause of each call changed, the GPUs named, and the scheduler whose options filled
        the calls the answer did not give validly."""
        batch, device = step.batch, step.view.device
        fallback: Mapping[str, DeviceOption] = {}
        used = self.fallback.name
        named: dict[str, int] = {}
        gpu_causes: dict[str, AgenticCause] = {}
        if several(device):
            split = split_answer(answer, batch, device)
            answer, named, gpu_causes = split.answer, split.named, split.causes
        taken = [c for c in batch.call_ids if answer.options.get(c) not in DEVICE_OPTIONS]
        if taken:
            base, used = self._fallback_decision(step)
            fallback = base.mapping
            if several(device):
                named.update({c: base.gpus[c] for c in taken if c in base.gpus})
        mapping, causes, gpus = repair_on_gpus(
            answer, batch, device, self.constraints, fallback=fallback,
            vram_seen_mb=step.vram_seen, fit_vram=fit_vram, gpus=named)
        return mapping, {**gpu_causes, **causes}, gpus, used

    def _decision(
        self, mapping: Mapping[str, DeviceOption], reason: str, **kw: Any
    ) -> AgenticDecision:
        return AgenticDecision(mapping=dict(mapping), reason=reason, scheduler=self.name, **kw)

    def _whole_fallback(
        self, step: _Prepared, cause: AgenticCause, detail: str, record: ConsultationRecord,
        *, cached: bool = False,
    ) -> Decision:
        """The consultation failed (``cause``): the fallback decides the whole step,
        ``scheduler_error``."""
        how = "earlier consultation failed" if cached else "consultation failed"
        return self._instead(step, record, cause, detail,
                             f"agentic {how} ({cause}: {detail}); fallback",
                             fallback="scheduler_error")

    def _instead(
        self, step: _Prepared, record: ConsultationRecord, cause: AgenticCause, detail: str,
        head: str, *, fallback: FallbackCause | None = None, veto: str | None = None,
    ) -> Decision:
        """The fallback policy's decision for the whole step instead of an answer (failed,
        or vetoed), every call's cause ``cause``; the reason ``head``, then the policy's."""
        base, used = self._fallback_decision(step)
        lead_gpus = _lead_gpus(step, base, base.mapping)
        # the policy's own mapping is not VRAM-fitted again (its twin weighed the VRAM, the
        # ledger queues what does not fit): fitted, a vetoed answer's fallback moved a call
        # the policy ran now to the queue (memory_llm_heavy, 1.05x against the policy alone)
        mapping, repairs, gpus = repair_on_gpus(
            ParsedAnswer(dict(base.mapping)), step.batch, step.view.device, self.constraints,
            fallback={}, gpus=lead_gpus.get("gpus"), vram_seen_mb=step.vram_seen,
            fit_vram=base is not step.lead)
        self.last_fallbacks = dict.fromkeys(step.batch.call_ids, cause)
        self.last_issues = (detail,) if detail else ()
        reason = f"{head} {used}: {base.reason}"
        return self._decision(
            mapping, reason + _repaired(mapping, repairs), predicted_ms=dict(base.predicted_ms),
            probe=base.probe, fallback=fallback, veto=veto, llm_calls=record.llm_calls,
            consultation=record, **({"gpus": gpus} if lead_gpus else {}),
        )


def _lead_gpus(step: _Prepared, lead: Decision, mapping: Mapping[str, str]) -> dict[str, Any]:
    """``{"gpus": ...}``: the GPUs ``lead`` (the fallback policy's decision) named for the
    calls still on a GPU, on a machine with several GPUs; else nothing (one GPU: as before)."""
    if not several(step.view.device):
        return {}
    return {"gpus": kept(lead.gpus, mapping)}


def _repaired(mapping: Mapping[str, str], repairs: Mapping[str, str]) -> str:
    """``"; repaired c->option (cause), ..."`` for ``repairs``, else empty."""
    if not repairs:
        return ""
    return "; repaired " + ", ".join(f"{c}->{mapping[c]} ({k})" for c, k in repairs.items())


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
