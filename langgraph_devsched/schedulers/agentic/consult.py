"""The consultation loop: one consultation's graph and turns, and the runner that bounds it.

`Consultation` runs the sub-agent graph: a model node and a `ToolNode` over the read-only
observation tools, from the first messages the mode built (`prompts`). The last turn, a turn
after a reply without tool calls, or every turn of an ``inline`` consultation is *forced*:
it asks for the answer through the channel (`model.bind_turn`). With ``auto``, a forced turn
that gives no answer (or that the server rejects) moves the endpoint along its chain and,
time permitting, is asked again. The answer is read from any turn (`answer_in`), inside the
deadline. Pick mode's consultation is this loop with its own reader (`modes.pick`).
`Runner` runs a consultation within its deadline; only the ``await`` differs between its
sync and async paths.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from langgraph_devsched.schedulers.agentic.answers import (
    ANSWER_TOOL,
    MappingAnswer,
    ParsedAnswer,
    find_answer,
    parse_answer,
)
from langgraph_devsched.schedulers.agentic.config import AnswerChannel
from langgraph_devsched.schedulers.agentic.constraints import AgenticCause
from langgraph_devsched.schedulers.agentic.model import CHANNEL_CHAIN, ChannelState, bind_turn
from langgraph_devsched.schedulers.agentic.prompts import ANSWER_PROMPT, FORCE_PROMPT, JSON_PROMPT
from langgraph_devsched.schedulers.agentic.slots import ConsultationSlots

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langgraph_devsched.schedulers.base import Batch


MAX_FORCED = len(CHANNEL_CHAIN) + 1
"""Forced turns in one consultation at most (one per channel, one more after observations)."""


class DeadlineError(TimeoutError):
    """The consultation's deadline passed before a model turn could start."""


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    turns: int
    forced: int
    failed: bool
    empty: bool


@dataclass
class Tally:
    """What one consultation cost and how it asked."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    channel: str = "free"
    channels_tried: list[str] = field(default_factory=list)
    mode: str = ""
    candidates: int = 0
    """Whole mappings offered (``pick`` mode's candidates, or those the schema admits)."""

    def count(self, reply: Any) -> None:
        """Add the prompt and cached prompt tokens ``reply`` reports."""
        usage = getattr(reply, "usage_metadata", None) or {}
        self.prompt_tokens += int(usage.get("input_tokens") or 0)
        details = usage.get("input_token_details") or {}
        self.cached_tokens += int(details.get("cache_read") or 0)


@dataclass
class Outcome:
    """What one consultation came back with (read inside the deadline)."""

    answer: ParsedAnswer | None = None
    failure: AgenticCause | None = None
    detail: str = ""
    via: str | None = None
    tally: Tally = field(default_factory=Tally)
    messages: list[AnyMessage] = field(default_factory=list)
    pick: int | None = None
    """The candidate number the model picked (``pick`` mode)."""
    unguarded: bool = False
    """The answer is the fallback scheduler's own mapping: the guard does not reject it."""
    skipped: str | None = None
    """Why the model was not asked (``one_candidate``); None: it was."""


def answer_tool() -> BaseTool:
    """``submit_mapping``: its arguments are the answer (`MappingAnswer`)."""

    def submit_mapping(**kwargs: Any) -> str:
        return "recorded"

    return StructuredTool.from_function(
        submit_mapping, name=ANSWER_TOOL, description=(MappingAnswer.__doc__ or "").strip(),
        args_schema=MappingAnswer,
    )


@dataclass
class Consultation:
    """Everything one consultation needs; `invoke`/`ainvoke` run it and read the answer."""

    model: BaseChatModel
    batch: Batch
    messages: list[AnyMessage]
    """The first messages (`prompts`): rules, observations, task."""
    observations: list[BaseTool]
    channel: ChannelState
    max_turns: int
    max_tokens: int | None
    """The json_schema channel's token cap."""
    deadline: float
    inline: bool = False
    """The observations are in the messages (every turn forced), not callable as tools."""
    long_tokens: int | None = None
    """The token cap of the tool and text channels (their answers are longer)."""
    allowed: dict[str, list[str]] = field(default_factory=dict)
    """Each call's allowed options (the json_schema channel's enum per call)."""
    schema: dict[str, Any] | None = None
    """The json_schema channel's schema (None: `model.answer_schema` of the step)."""
    schema_name: str = ANSWER_TOOL
    nudges: bool = True
    """Whether a forced turn adds the message asking for the answer through its channel."""
    retry_transport: bool = False
    """A transport error (no HTTP status: a keep-alive connection the server closed) is
    tried once more on the same channel."""
    clock: Callable[[], float] = time.monotonic
    on_llm_call: Callable[[], None] | None = None
    ids: dict[str, str] = field(default_factory=dict)
    """The step's call ids by the short labels the model reads and answers with
    (`prompts.short_labels`; ``batch`` is then the labelled one); empty: the ids as they are."""
    settled: dict[str, str] = field(default_factory=dict)
    """Options the evidence settles (`admitted.open_calls`), by label: not asked, merged
    into the answer."""
    sole: dict[str, str] | None = None
    """The one answer the evidence admits (`admitted`), by call id: taken without asking."""
    tally: Tally = field(default_factory=Tally)
    _compiled: Any = None
    _retried: bool = False

    def prompt(self) -> list[AnyMessage]:
        return list(self.messages)

    def skip(self) -> Outcome | None:
        """The outcome without asking the model (`sole`: nothing to choose); None: ask it."""
        if self.sole is None:
            return None
        return Outcome(ParsedAnswer(dict(self.sole), "the only mapping the evidence admits"),
                       via="one_admitted", tally=self.tally, skipped="one_admitted")

    def answer_in(self, messages: Sequence[AnyMessage]) -> Outcome | None:
        """The newest answer in any AI turn of ``messages``, else None."""
        found = find_answer(messages, [*self.batch.call_ids, *self.ids.values()])
        if found is None:
            return None
        args, via = found
        answer = parse_answer(args)
        if self.settled:
            answer = replace(answer, options={**self.settled, **answer.options})
        if self.ids:  # back to the step's call ids (an answer naming the ids themselves too)
            answer = replace(answer, options={self.ids.get(k, k): v
                                              for k, v in answer.options.items()})
        return Outcome(answer, via=via, tally=self.tally, messages=list(messages))

    # -- turns ---------------------------------------------------------------------------------

    def _tools(self, channel: AnswerChannel | None) -> list[BaseTool]:
        """Agent turns with a turn budget: always every tool (the same list, so the server's
        prompt cache keeps the prefix). Otherwise the answer tool for a tool channel, no tool
        at all for json_schema and text (servers such as llama.cpp render every tool's
        schema into the prompt)."""
        if not self.inline and self.max_turns > 1:
            return [*self.observations, answer_tool()]
        return [answer_tool()] if channel is not None and channel.startswith("tool") else []

    def _turn(self, state: _State) -> tuple[Any, list[AnyMessage], bool]:
        """The bound model for this turn, messages to add first, and whether it is forced."""
        messages = state["messages"]
        last = messages[-1]
        forced = (
            self.inline
            or state["turns"] >= self.max_turns - 1
            or state["forced"] > 0
            or (isinstance(last, AIMessage) and not last.tool_calls)
        )
        extra: list[AnyMessage] = []
        channel: AnswerChannel | None = None
        if forced:
            if state.get("empty"):
                self.channel.advance()  # the last forced turn gave nothing: next channel
            channel = self.channel.current
            nudge = {"json_schema": ANSWER_PROMPT, "text": JSON_PROMPT}.get(channel, FORCE_PROMPT)
            if self.nudges and not any(isinstance(m, HumanMessage)
                                       and str(m.content).endswith(nudge) for m in messages):
                extra.append(HumanMessage(nudge))
            self.tally.channel = channel
            self.tally.channels_tried.append(channel)
        left = self.deadline - self.clock()
        if left <= 0:
            raise DeadlineError("the consultation's deadline passed")
        model = bind_turn(
            self.model, self._tools(channel), channel=channel,
            max_tokens=self.max_tokens if channel == "json_schema" else self.long_tokens,
            timeout_s=left, call_ids=list(self.batch.call_ids), allowed=self.allowed,
            schema=self.schema, schema_name=self.schema_name,
        )
        self.tally.llm_calls += 1
        if self.on_llm_call is not None:
            self.on_llm_call()
        return model, extra, forced

    def _update(self, state: _State, extra: list[AnyMessage], reply: Any, forced: bool) -> dict:
        self.tally.count(reply)
        return {
            "messages": [*extra, reply],
            "turns": state["turns"] + 1,
            "forced": state["forced"] + int(forced),
            "failed": False,
            "empty": forced and not getattr(reply, "tool_calls", None),
        }

    def _failed_turn(self, state: _State, forced: bool, exc: Exception) -> dict[str, Any]:
        """A turn that raised: with ``auto``, a forced turn's next channel gets the next turn.
        A request cut at the deadline says nothing about the channel: a timeout, as it is;
        nor does a transport error (refused, reset): final, unless ``retry_transport``."""
        if isinstance(exc, DeadlineError):
            raise exc
        if "timeout" in type(exc).__name__.lower() and self.clock() >= self.deadline:
            raise DeadlineError("the consultation's deadline passed") from exc
        if getattr(exc, "status_code", None) is None:
            if not (self.retry_transport and not self._retried):
                raise exc
            self._retried = True
        elif not (forced and self.channel.advance() and state["forced"] + 1 < MAX_FORCED):
            raise exc
        return {"turns": state["turns"] + 1, "forced": state["forced"] + 1, "failed": True,
                "empty": False}

    def _agent(self, state: _State, config: RunnableConfig) -> dict[str, Any]:
        model, extra, forced = self._turn(state)
        try:
            reply = model.invoke([*state["messages"], *extra], config)
        except Exception as exc:
            return self._failed_turn(state, forced, exc)
        return self._update(state, extra, reply, forced)

    async def _aagent(self, state: _State, config: RunnableConfig) -> dict[str, Any]:
        model, extra, forced = self._turn(state)
        try:
            reply = await model.ainvoke([*state["messages"], *extra], config)
        except Exception as exc:
            return self._failed_turn(state, forced, exc)
        return self._update(state, extra, reply, forced)

    def _route(self, state: _State) -> str:
        last = next((m for m in reversed(state["messages"]) if isinstance(m, AIMessage)), None)
        if last is not None and self.answer_in([last]) is not None:
            return END
        names = [c["name"] for c in getattr(last, "tool_calls", None) or []]
        observing = any(n != ANSWER_TOOL for n in names)
        if state["forced"] == 0:
            return "observe" if observing else "agent"
        if state["forced"] >= MAX_FORCED:
            return END
        if state.get("failed"):
            return "agent"  # the failed turn already moved to the next channel
        if observing and not self.inline:
            return "observe"  # a forced turn that still observed: answer after that
        if self.channel.configured == "auto" and self.channel.current != self.channel.chain[-1]:
            return "agent"  # no answer through this channel: try the next one
        return END

    def graph(self) -> Any:
        """The compiled sub-agent graph (compiled once, before the deadline starts)."""
        if self._compiled is None:
            builder = StateGraph(_State)
            builder.add_node("agent", RunnableLambda(self._agent, afunc=self._aagent,
                                                     name="agent"))
            builder.add_node("observe", ToolNode(self.observations, handle_tool_errors=True))
            builder.add_edge(START, "agent")
            builder.add_conditional_edges("agent", self._route, ["agent", "observe", END])
            builder.add_edge("observe", "agent")
            self._compiled = builder.compile(checkpointer=False, name="devsched_agentic")
        return self._compiled

    # -- running -------------------------------------------------------------------------------

    def invoke(self, config: RunnableConfig) -> Outcome:
        """Run the sub-agent synchronously and read its answer."""
        try:
            return self.read(self.graph().invoke(self._inputs(), self._limited(config)))
        except Exception as exc:
            return self._failed(exc)

    async def ainvoke(self, config: RunnableConfig) -> Outcome:
        """Run the sub-agent on the event loop (cancel it to stop it) and read its answer."""
        try:
            return self.read(await self.graph().ainvoke(self._inputs(), self._limited(config)))
        except Exception as exc:
            return self._failed(exc)

    def _inputs(self) -> dict[str, Any]:
        return {"messages": self.prompt(), "turns": 0, "forced": 0, "failed": False,
                "empty": False}

    def _limited(self, config: RunnableConfig) -> RunnableConfig:
        return {**config, "recursion_limit": 2 * (self.max_turns + MAX_FORCED) + 4}

    def _failed(self, exc: Exception) -> Outcome:
        if isinstance(exc, DeadlineError):
            return Outcome(failure="timeout", detail=str(exc), tally=self.tally)
        detail = f"{type(exc).__name__}: {exc}"[:300]
        return Outcome(failure="llm_error", detail=detail, tally=self.tally)

    def read(self, state: dict[str, Any]) -> Outcome:
        """The answer in any turn of the final state, else ``no_answer``."""
        messages = list(state["messages"])
        return self.answer_in(messages) or Outcome(
            failure="no_answer", detail=self.no_answer, tally=self.tally, messages=messages)

    no_answer = "the model never called submit_mapping"


def _native_async(model: BaseChatModel) -> bool:
    """Whether ``model`` has its own async path (cancelling it stops the request)."""
    from langchain_core.language_models import BaseChatModel

    return type(model)._agenerate is not BaseChatModel._agenerate


def child_config(config: RunnableConfig | None) -> RunnableConfig:
    """The consultation's run config: a child run of the caller's (callbacks, tags,
    metadata), never a checkpointed subgraph (an empty ``configurable``)."""
    base: dict[str, Any] = {"run_name": "devsched_agentic", "configurable": {},
                            "tags": ["devsched:agentic"]}
    if config is not None:
        base["callbacks"] = config.get("callbacks")
        base["tags"] = [*(config.get("tags") or []), "devsched:agentic"]
        base["metadata"] = dict(config.get("metadata") or {})
    return base  # type: ignore[return-value]


@dataclass
class Runner:
    """Runs a consultation within its deadline: a natively async model on the event loop
    (cancelled at the deadline), any other in one of the bounded consultation `slots` (a
    hung model holds one; all held: ``busy`` at once). Only the ``await`` differs between
    `run` and `arun`."""

    slots: ConsultationSlots
    timeout_s: float
    clock: Callable[[], float] = time.monotonic

    def late(self, tally: Tally, cause: AgenticCause) -> Outcome:
        detail = (
            f"no answer within {self.timeout_s:g} s" if cause == "timeout"
            else f"all {self.slots.size} consultation threads are held by model calls "
            "still running"
        )
        return Outcome(failure=cause, detail=detail, tally=tally)

    def full(self, model: BaseChatModel, *, asynchronous: bool) -> bool:
        """Whether a consultation of ``model`` would find every slot held now (a natively
        async model under `arun` needs none): the step falls back at once, before the
        consultation is even built."""
        if asynchronous and _native_async(model):
            return False
        return self.slots.in_use >= self.slots.size

    def _left(self, consultation: Consultation) -> float:
        return max(0.0, consultation.deadline - self.clock())

    def run(self, consultation: Consultation, config: RunnableConfig | None) -> Outcome:
        cfg = child_config(config)
        future = self.slots.start(lambda: consultation.invoke(cfg))
        if future is None:
            return self.late(consultation.tally, "busy")
        try:
            return future.result(timeout=self._left(consultation))
        except FutureTimeout:
            return self.late(consultation.tally, "timeout")

    async def arun(self, consultation: Consultation, config: RunnableConfig | None) -> Outcome:
        cfg = child_config(config)
        if _native_async(consultation.model):
            work: Any = consultation.ainvoke(cfg)
        else:
            future = self.slots.start(lambda: consultation.invoke(cfg))
            if future is None:
                return self.late(consultation.tally, "busy")
            work = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(work, self._left(consultation))
        except asyncio.TimeoutError:
            return self.late(consultation.tally, "timeout")
