"""The agentic scheduler: an LLM sub-agent that reads the monitor and answers a mapping.

For a step it runs a small LangGraph graph: a model node bound to read-only observation
tools (`agentic_tools`) and the ``submit_mapping`` answer tool; after ``max_turns`` model
turns (or a turn without tool calls) one last turn binds only the answer tool with a forced
``tool_choice`` (``"any"``, sent as ``"required"`` to OpenAI-compatible servers, which
llama.cpp server, vLLM, Ollama and LM Studio accept; no ``json_schema`` response format).

The answer is never trusted: `agentic_answer.repair` holds it to the hints and the hard
constraints and takes the fallback scheduler's option (``monitor``, else ``static``) for what
it cannot repair; an error or a timeout falls back for the whole step. Every cause is in the
decision's ``reason``/``fallback`` and per call in `AgenticScheduler.last_fallbacks`.

A decision is reused while the step's fingerprint (batch shape, hints, device-state bucket,
the monitor's hints and epoch) is unchanged and no estimate of the batch's tools drifted;
only then is the model consulted again (`AgenticScheduler.llm_calls` counts every call).

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
>>> dict(d.mapping), d.reason, d.llm_calls
({'c1': 'cpu'}, 'agentic: embed is tiny', 1)
>>> scheduler.decide(batch, view).llm_calls, scheduler.llm_calls   # same situation: cached
(0, 1)
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import SecretStr

from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.agentic_answer import (
    ANSWER_TOOL,
    REPAIRED,
    AgenticCause,
    HardConstraints,
    MappingAnswer,
    ParsedAnswer,
    answer_from_text,
    parse_answer,
    repair,
)
from langgraph_devsched.schedulers.agentic_tools import observation_tools, observations_data
from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerBase
from langgraph_devsched.schedulers.base import SchedulerView as View

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

logger = logging.getLogger(__name__)

ENV_MODEL = "DEVSCHED_LLM_MODEL"
ENV_BASE_URL = "DEVSCHED_LLM_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
BUSY_UTILIZATION = 0.1
VRAM_BUCKETS = 10

SYSTEM_PROMPT = """\
You are the device scheduler of an agent application. One agent step is about to run \
several tool calls at once; choose a device option for each call so that the step's \
makespan (the time until its last call ends) is as small as possible.
Options:
- gpu_now: start on the GPU at once, sharing it with the other GPU calls (they slow each \
other down); its VRAM must fit now, else it fails out of memory and reruns on the CPU.
- gpu_queued: wait until its VRAM fits and the GPU is free enough, then run on the GPU.
- cpu: run on the CPU (no VRAM; slow for heavy compute, fast for transfer-bound tools).
Read what you need with the observation tools (step_calls, tool_estimates, device_state, \
exploration_hints, past_outcomes): they report declared hints and measurements only. \
Then call submit_mapping once, with one entry per call id and a short reason.
Hard constraints, enforced after you answer: {constraints}"""

FORCE_PROMPT = "Submit your answer now: call submit_mapping with one option per call id."


class AgenticNotConfiguredError(RuntimeError):
    """No chat model to consult: the message says what to set."""


def _not_configured(missing: str) -> AgenticNotConfiguredError:
    return AgenticNotConfiguredError(
        f"the agentic scheduler is not configured: {missing}. Set {ENV_MODEL} (the model name, "
        f"e.g. gpt-4o-mini or the name your local server serves) and either {ENV_API_KEY} "
        f"(OpenAI) or {ENV_BASE_URL} (an OpenAI-compatible server such as llama.cpp server, "
        "vLLM, Ollama or LM Studio, e.g. http://localhost:8080/v1); or build "
        "AgenticScheduler(model=<any LangChain chat model>)"
    )


def openai_model(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
    timeout_s: float | None = 60.0,
    max_retries: int = 1,
    **kwargs: Any,
) -> BaseChatModel:
    """A `ChatOpenAI` for OpenAI or any OpenAI-compatible server; arguments override env.

    ``model`` defaults to ``$DEVSCHED_LLM_MODEL``, ``base_url`` to ``$DEVSCHED_LLM_BASE_URL``,
    ``api_key`` to ``$OPENAI_API_KEY`` (a placeholder for a local server that needs none).

    >>> chat = openai_model("qwen2.5-7b-instruct", base_url="http://localhost:8080/v1")
    >>> chat.model_name, str(chat.openai_api_base)
    ('qwen2.5-7b-instruct', 'http://localhost:8080/v1')
    """
    name = model or os.environ.get(ENV_MODEL)
    if not name:
        raise _not_configured(f"no model name (argument or ${ENV_MODEL})")
    base_url = base_url or os.environ.get(ENV_BASE_URL) or None
    api_key = api_key or os.environ.get(ENV_API_KEY) or ("not-needed" if base_url else None)
    if api_key is None:
        raise _not_configured(f"model {name!r} but neither ${ENV_API_KEY} nor ${ENV_BASE_URL}")
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise ImportError(
            "openai_model needs the langchain-openai package: pip install 'langgraph-devsched[llm]'"
        ) from None
    return ChatOpenAI(
        model=name,
        base_url=base_url,
        api_key=SecretStr(api_key),
        temperature=temperature,
        timeout=timeout_s,
        max_retries=max_retries,
        **kwargs,
    )


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int
    forced: bool


@dataclass
class _Run:
    """One consultation: what came back and what it cost."""

    answer: ParsedAnswer | None = None
    failure: AgenticCause | None = None
    detail: str = ""
    llm_calls: int = 0
    messages: list[AnyMessage] = field(default_factory=list)


@dataclass
class _Entry:
    """A cached outcome for one fingerprint: options and causes by (tool, occurrence)."""

    options: dict[tuple[str, int], DeviceOption]
    causes: dict[tuple[str, int], AgenticCause]
    reason: str
    estimates: dict[tuple[str, str, str], tuple[float, str]]
    failure: AgenticCause | None = None
    hits_left: int = 0


def _slots(batch: Batch) -> list[tuple[str, int]]:
    """Each call's (tool, k-th call of that tool): how a decision maps onto a new batch."""
    seen: dict[str, int] = {}
    out = []
    for call in batch.calls:
        k = seen.get(call.tool, 0)
        seen[call.tool] = k + 1
        out.append((call.tool, k))
    return out


class AgenticScheduler(SchedulerBase):
    """An LLM sub-agent over the monitor's observations, guarded by hard constraints.

    ``model``: any LangChain chat model with ``bind_tools``. ``policy``: operator guidance in
    plain words, given to the model. ``min_free_vram_mb``, ``pinned`` (tool -> option) and
    ``cpu_forbidden`` are enforced on every answer. ``fallback``: the scheduler (or name)
    used for what the answer lacks (default ``"monitor"``, else ``"static"``).
    ``timeout_s`` bounds one consultation; ``max_turns`` the model turns before the forced
    answer turn; ``final_tool_choice`` what that turn sends (``"any"``; a tool name forces it
    by name on servers that support that). ``drift_tolerance``: the relative change of an
    estimate's mean that invalidates a cached decision. ``retry_failed_after``: steps a
    failed consultation's fallback is reused before the model is asked again.
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
        max_turns: int = 4,
        final_tool_choice: str = "any",
        drift_tolerance: float = 0.25,
        retry_failed_after: int = 10,
        cache_size: int = 256,
    ) -> None:
        if not hasattr(model, "bind_tools"):
            raise TypeError(f"model must be a LangChain chat model, got {type(model).__name__}")
        if timeout_s <= 0 or max_turns < 1:
            raise ValueError("timeout_s must be > 0 and max_turns >= 1")
        self.model = model
        self.policy = policy
        self.constraints = HardConstraints(
            min_free_vram_mb=min_free_vram_mb, pinned=pinned, cpu_forbidden=cpu_forbidden
        )
        self.fallback: Scheduler = _fallback_scheduler(fallback)
        self.timeout_s = timeout_s
        self.max_turns = max_turns
        self.final_tool_choice = final_tool_choice
        self.drift_tolerance = drift_tolerance
        self.retry_failed_after = retry_failed_after
        self.cache_size = cache_size
        self.llm_calls = 0
        """Model calls made so far (every consultation's turns, late ones included)."""
        self.consultations = 0
        self.cache_hits = 0
        self.last_fallbacks: dict[str, AgenticCause] = {}
        """Per call id of the last decision: why its option is not the model's own answer."""
        self.last_issues: tuple[str, ...] = ()
        """What was wrong with the last answer beyond single calls (e.g. unknown call ids)."""
        self.last_messages: list[AnyMessage] = []
        self._cache: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._private_monitor: Any = None
        self._last_device: Any = None

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
        ``$OPENAI_API_KEY``); `AgenticNotConfiguredError` says what to set when unset."""
        return cls(openai_model(model, base_url=base_url, api_key=api_key), **options)

    # -- protocol ------------------------------------------------------------------------------

    def decide(self, batch: Batch, view: View, *, config: RunnableConfig | None = None) -> Decision:
        view = self._with_observations(batch, view)
        key, obs = self._fingerprint(batch, view)
        cached = self._lookup(key, batch, view, obs)
        if cached is not None:
            return cached
        return self._conclude(batch, view, key, obs, self._run_sync(batch, view, config))

    async def adecide(
        self, batch: Batch, view: View, *, config: RunnableConfig | None = None
    ) -> Decision:
        """`decide` with the sub-agent run by ``ainvoke``: the event loop is never blocked."""
        view = self._with_observations(batch, view)
        key, obs = self._fingerprint(batch, view)
        cached = self._lookup(key, batch, view, obs)
        if cached is not None:
            return cached
        return self._conclude(batch, view, key, obs, await self._run_async(batch, view, config))

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
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
        return self._fingerprint(batch, view)[0]

    def _fingerprint(self, batch: Batch, view: View) -> tuple[tuple[Any, ...], dict[str, Any]]:
        obs = observations_data(view.observations)
        tools = set(batch.shape)
        specs = tuple(
            (c.tool, json.dumps(c.spec.model_dump(mode="json"), sort_keys=True))
            for c in sorted(batch.calls, key=lambda c: c.tool)
        )
        d = view.device
        free = 0
        if d.gpu_available and d.vram_budget_mb > 0:
            left = max(0.0, d.vram_budget_mb - d.vram_used_mb)
            free = int(VRAM_BUCKETS * left / d.vram_budget_mb)
        device = (d.gpu_available, free, d.gpu_utilization >= BUSY_UTILIZATION)
        hints = tuple(
            sorted(
                json.dumps([h.get(k) for k in ("kind", "tools", "devices", "option", "context")])
                for h in obs.get("hints", ())
                if isinstance(h, Mapping) and tools & set(h.get("tools") or ())
            )
        )
        epoch = (obs.get("epoch"), bool(obs.get("drift")))
        return (batch.shape, specs, device, hints, epoch), obs

    @staticmethod
    def _estimates(obs: Mapping[str, Any], tools: Collection[str]) -> dict[Any, tuple[float, str]]:
        out = {}
        for e in obs.get("estimates", ()):
            if isinstance(e, Mapping) and e.get("tool") in tools:
                key = (e.get("tool"), e.get("option"), e.get("context"))
                out[key] = (float(e.get("run_ms") or 0.0), str(e.get("status", "")))
        return out

    def _drifted(self, entry: _Entry, now: Mapping[Any, tuple[float, str]]) -> bool:
        for key, (mean, status) in entry.estimates.items():
            if key not in now:
                continue
            new_mean, new_status = now[key]
            if new_status != status:
                return True
            if abs(new_mean - mean) > self.drift_tolerance * max(abs(mean), 1e-9):
                return True
        return False

    def _lookup(
        self, key: tuple[Any, ...], batch: Batch, view: View, obs: dict[str, Any]
    ) -> Decision | None:
        with self._lock:
            entry = self._cache.get(key)
            if entry is None:
                return None
            if entry.failure is None and self._drifted(entry, self._estimates(obs, batch.shape)):
                del self._cache[key]
                return None
            if entry.failure is not None:
                entry.hits_left -= 1
                if entry.hits_left < 0:
                    del self._cache[key]
                    return None
            self._cache.move_to_end(key)
            self.cache_hits += 1
        slots = _slots(batch)
        if entry.failure is not None:
            return self._whole_fallback(
                batch, view, entry.failure, "not consulted again yet", cached=True
            )
        answer = ParsedAnswer(
            {c.call_id: entry.options[s] for c, s in zip(batch.calls, slots, strict=True)}
        )
        causes_before = {
            c.call_id: entry.causes[s]
            for c, s in zip(batch.calls, slots, strict=True)
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
        )

    def _store(self, key: tuple[Any, ...], entry: _Entry) -> None:
        with self._lock:
            self._cache[key] = entry
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def clear_cache(self) -> None:
        """Forget every cached decision: the next step consults the model."""
        with self._lock:
            self._cache.clear()

    # -- the sub-agent -------------------------------------------------------------------------

    def _answer_tool(self) -> BaseTool:
        def submit_mapping(**kwargs: Any) -> str:
            return "recorded"

        return StructuredTool.from_function(
            submit_mapping,
            name=ANSWER_TOOL,
            description=(MappingAnswer.__doc__ or "").strip(),
            args_schema=MappingAnswer,
        )

    def prompt(self, batch: Batch) -> list[AnyMessage]:
        """The first two messages of a consultation: rules (policy included) and the task."""
        system = SYSTEM_PROMPT.format(constraints=json.dumps(self.constraints.describe()))
        if self.policy:
            system += f"\nOperator policy: {self.policy}"
        listed = ", ".join(f"{c.call_id} ({c.tool})" for c in batch.calls)
        task = (
            f"This step has {len(batch)} tool call(s): {listed}. Choose one of "
            f"{', '.join(DEVICE_OPTIONS)} for each call id."
        )
        return [SystemMessage(system), HumanMessage(task)]

    def _graph(self, batch: Batch, view: View, counter: list[int]) -> Any:
        tools = observation_tools(batch, view, self.constraints)
        answer = self._answer_tool()
        explore = self.model.bind_tools([*tools, answer])
        final = self.model.bind_tools([answer], tool_choice=self.final_tool_choice)

        def turn(state: _State) -> tuple[Any, list[AnyMessage]]:
            last = state["messages"][-1]
            forced = state["turns"] >= self.max_turns - 1 or (
                isinstance(last, AIMessage) and not last.tool_calls
            )
            with self._lock:
                counter[0] += 1
                self.llm_calls += 1
            if forced:
                nudge = HumanMessage(FORCE_PROMPT)
                return final, [nudge]
            return explore, []

        def agent(state: _State, config: RunnableConfig) -> dict[str, Any]:
            model, extra = turn(state)
            reply = model.invoke([*state["messages"], *extra], config)
            return {"messages": [*extra, reply], "turns": state["turns"] + 1, "forced": bool(extra)}

        async def aagent(state: _State, config: RunnableConfig) -> dict[str, Any]:
            model, extra = turn(state)
            reply = await model.ainvoke([*state["messages"], *extra], config)
            return {"messages": [*extra, reply], "turns": state["turns"] + 1, "forced": bool(extra)}

        def route(state: _State) -> str:
            last = state["messages"][-1]
            names = [c["name"] for c in getattr(last, "tool_calls", None) or []]
            if ANSWER_TOOL in names or state["forced"] or state["turns"] >= self.max_turns:
                return END
            if not names:  # a text turn: one more, forced
                return "agent"
            return "observe"

        builder = StateGraph(_State)
        builder.add_node("agent", RunnableLambda(agent, afunc=aagent, name="agent"))
        builder.add_node("observe", ToolNode(tools, handle_tool_errors=True))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["agent", "observe", END])
        builder.add_edge("observe", "agent")
        return builder.compile(checkpointer=False, name="devsched_agentic")

    def _config(self, config: RunnableConfig | None) -> RunnableConfig:
        base: dict[str, Any] = {
            "run_name": "devsched_agentic",
            "recursion_limit": 2 * self.max_turns + 4,
            "configurable": {},  # a standalone graph, never a checkpointed subgraph
            "tags": ["devsched:agentic"],
        }
        if config is not None:
            base["callbacks"] = config.get("callbacks")
            base["tags"] = [*(config.get("tags") or []), "devsched:agentic"]
            base["metadata"] = dict(config.get("metadata") or {})
        return base  # type: ignore[return-value]

    def _inputs(self, batch: Batch) -> dict[str, Any]:
        return {"messages": self.prompt(batch), "turns": 0, "forced": False}

    def _run_sync(self, batch: Batch, view: View, config: RunnableConfig | None) -> _Run:
        counter = [0]
        graph = self._graph(batch, view, counter)
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["state"] = graph.invoke(self._inputs(batch), self._config(config))
            except BaseException as exc:  # reported below
                box["error"] = exc
            finally:
                done.set()

        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(work,), daemon=True, name="devsched-agentic").start()
        if not done.wait(self.timeout_s):
            return _Run(
                failure="timeout",
                detail=f"no answer within {self.timeout_s:g} s",
                llm_calls=counter[0],
            )
        return self._read(box, counter[0])

    async def _run_async(self, batch: Batch, view: View, config: RunnableConfig | None) -> _Run:
        counter = [0]
        graph = self._graph(batch, view, counter)
        box: dict[str, Any] = {}
        try:
            box["state"] = await asyncio.wait_for(
                graph.ainvoke(self._inputs(batch), self._config(config)), self.timeout_s
            )
        except asyncio.TimeoutError:
            return _Run(
                failure="timeout",
                detail=f"no answer within {self.timeout_s:g} s",
                llm_calls=counter[0],
            )
        except Exception as exc:
            box["error"] = exc
        return self._read(box, counter[0])

    @staticmethod
    def _read(box: dict[str, Any], llm_calls: int) -> _Run:
        if "error" in box:
            exc = box["error"]
            return _Run(
                failure="llm_error",
                detail=f"{type(exc).__name__}: {exc}"[:300],
                llm_calls=llm_calls,
            )
        messages = list(box["state"]["messages"])
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        for call in getattr(last, "tool_calls", None) or []:
            if call["name"] == ANSWER_TOOL:
                return _Run(parse_answer(call["args"]), llm_calls=llm_calls, messages=messages)
        text = last.text if isinstance(last, AIMessage) else ""
        found = answer_from_text(text) if text else None
        if found is not None:
            return _Run(parse_answer(found), llm_calls=llm_calls, messages=messages)
        return _Run(
            failure="no_answer",
            detail="the model never called submit_mapping",
            llm_calls=llm_calls,
            messages=messages,
        )

    # -- from an answer to a decision ----------------------------------------------------------

    def _conclude(
        self, batch: Batch, view: View, key: tuple[Any, ...], obs: dict[str, Any], run: _Run
    ) -> Decision:
        with self._lock:
            self.consultations += 1
        self.last_messages = run.messages
        if run.answer is None:
            cause = run.failure or "no_answer"
            logger.warning("agentic scheduler: %s (%s); falling back", cause, run.detail)
            decision = self._whole_fallback(batch, view, cause, run.detail, llm_calls=run.llm_calls)
            self._store(key, _Entry({}, {}, "", {}, cause, self.retry_failed_after))
            return decision
        known = set(batch.call_ids)
        issues = list(run.answer.issues)
        unknown = sorted(set(run.answer.options) - known)
        if unknown:
            valid = ", ".join(batch.call_ids)
            issues.append(f"unknown call id(s) {', '.join(unknown)}; valid: {valid}")
        decision = self._finish(
            batch,
            view,
            run.answer,
            llm_calls=run.llm_calls,
            prior={},
            reason=f"agentic: {run.answer.reason}".rstrip(": "),
            issues=tuple(issues),
        )
        slots = dict(zip(batch.call_ids, _slots(batch), strict=True))
        self._store(
            key,
            _Entry(
                options={slots[c]: o for c, o in decision.mapping.items()},
                causes={slots[c]: cause for c, cause in self.last_fallbacks.items()},
                reason=run.answer.reason,
                estimates=self._estimates(obs, batch.shape),
            ),
        )
        return decision

    def _fallback_decision(self, batch: Batch, view: View) -> tuple[Decision, str]:
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
    ) -> Decision:
        needs_fallback = any(answer.options.get(c) not in DEVICE_OPTIONS for c in batch.call_ids)
        fallback: Mapping[str, DeviceOption] = {}
        used = ""
        if needs_fallback:
            base, used = self._fallback_decision(batch, view)
            fallback = base.mapping
        seen = observations_data(view.observations).get("vram_seen_mb") or {}
        mapping, causes = repair(
            answer, batch, view.device, self.constraints, fallback=fallback, vram_seen_mb=seen
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
        return self._decision(
            mapping,
            "; ".join(notes),
            fallback="invalid_decision" if causes or issues else None,
            llm_calls=llm_calls,
        )

    def _whole_fallback(
        self,
        batch: Batch,
        view: View,
        cause: AgenticCause,
        detail: str,
        *,
        llm_calls: int = 0,
        cached: bool = False,
    ) -> Decision:
        base, used = self._fallback_decision(batch, view)
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
            llm_calls=llm_calls,
        )


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
