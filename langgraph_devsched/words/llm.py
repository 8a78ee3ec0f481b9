"""`LLMForecaster`: one chat call forecasts which tools a request needs.

The system prompt lists the node's tools (``name: first sentence of the description``); the
user turn is the user's message (bounded, `base.bound_text`). The answer is constrained by a
JSON schema through ``response_format`` (llama.cpp, vLLM and OpenAI honour it), built the way
the agentic scheduler binds its forced turn (`agentic.model.bind_turn`); with
``channel="auto"`` a server that rejects the schema moves this forecaster to ``text`` (the
prompt asks for the JSON object, and the first JSON object in the reply is read).

Two answer forms (``form``):

- ``list`` (default): ``{"tools": [NAME, ...]}``, each name enum-constrained to the node's
  tools; a named tool gets ``named_p`` (0.9), any other ``unnamed_p`` (0.05). Short: about
  4 tokens a named tool, so a 1.5B model on two CPU cores answers in seconds.
- ``probabilities``: ``{NAME: number, ...}`` with exactly the node's tools as keys; one
  value per tool, so the answer grows with the tool count (about 8 tokens a tool).

Measured (Qwen2.5-Coder-1.5B Q4_K_M, llama.cpp on 2 CPU cores shared with other jobs, the
first 60 usable requests of TaskBench's Hugging Face dev split): the list form scores mean
node F1 0.495 (P 0.485, R 0.566) at 19 s p50; the probability form needs about 190 answer
tokens for 23 tools against about 20, at the 0.7-3 s a token measured there minutes a
request, so it was not run at scale. ``list`` is the default.

Either form may carry ``classes`` (``{NAME: "gpu"|"cpu"|"neutral"}``) for the tools the
caller passes as ``undeclared``: a device-class prior for tools whose hints declare none.

The answer is untrusted: names not of the node are dropped, values clipped to [0, 1],
non-numbers ignored. No parsable answer, an answer naming no tool of the node, an error or
no reply within ``timeout_s`` give a `WordsForecast` with ``error`` set and no probabilities
(the caller uses its classical forecast). A synchronous model that hangs runs in one of a
few daemon threads (`agentic.slots.ConsultationSlots`) and is abandoned at the timeout;
a natively async model (``ChatOpenAI``) is cancelled. `forecast` and `aforecast` share one
path and differ only by the ``await``.

``model`` is a LangChain chat model, or None / a model name: then `agentic.model.openai_model`
builds a ``ChatOpenAI`` from the arguments or ``$DEVSCHED_LLM_MODEL``,
``$DEVSCHED_LLM_BASE_URL`` and ``$OPENAI_API_KEY``, as the agentic scheduler does.

>>> parse_answer('{"tools": ["b", "zz", 3]}', ["a", "b"], "list").probabilities
{'a': 0.05, 'b': 0.9}
>>> parse_answer('{"a": 1.7, "b": "x", "q": 0.5}', ["a", "b"], "probabilities").probabilities
{'a': 1.0, 'b': 0.0}
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Collection, Generator, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, ValidationError

from langgraph_devsched.schedulers.agentic.model import bind_turn, openai_model
from langgraph_devsched.schedulers.agentic.slots import ConsultationSlots
from langgraph_devsched.words.base import (
    DevicePrior,
    ToolCard,
    WordsForecast,
    bound_text,
    bound_tools,
    first_sentence,
)

AnswerForm = Literal["list", "probabilities"]
Channel = Literal["auto", "json_schema", "text"]
CLASSES: tuple[str, ...] = get_args(DevicePrior)
NAMED_P = 0.9
UNNAMED_P = 0.05
MAX_NAMED = 4
"""The list form names at most this many tools."""
SCHEMA_NAME = "tool_forecast"

_PROMPT = """You decide which tools a user's request needs. The tools:
{tools}

{answer}"""
_LIST_ANSWER = (
    'Answer with a JSON object {{"tools": [...]}} listing, in the order they would run, '
    "the tools whose task the request asks for, and no other: the fewest that complete it "
    "(1 to {limit}). Use the exact tool names above."
)
_PROBABILITY_ANSWER = (
    "Answer with a JSON object that gives, for every tool above (its exact name as the key), "
    "the probability from 0 to 1 that completing the request needs it."
)
_CLASS_ANSWER = (
    ' Also give "classes": for each of these tools, "gpu" if it runs a large neural model, '
    '"cpu" if it is light, "neutral" if unsure: {names}.'
)


class ListAnswer(BaseModel):
    """The list form's answer (extra fields ignored; entries checked one by one)."""

    model_config = ConfigDict(extra="ignore")
    tools: list[Any] = []
    classes: dict[str, Any] = {}


class ProbabilityAnswer(BaseModel):
    """The probability form's answer: any keys; only the node's tools are read."""

    model_config = ConfigDict(extra="allow")
    classes: dict[str, Any] = {}


@dataclass
class Parsed:
    probabilities: dict[str, float] = field(default_factory=dict)
    classes: dict[str, DevicePrior] = field(default_factory=dict)
    error: str | None = None


def answer_schema(
    names: Sequence[str], form: AnswerForm, undeclared: Sequence[str] = (),
    max_named: int = MAX_NAMED,
) -> dict[str, Any]:
    """The answer's JSON schema: keys exactly the node's tool names (``probabilities``), or
    a list of at most ``max_named`` enum-constrained names (``list``); ``classes`` for the
    ``undeclared`` tools when there are any."""
    properties: dict[str, Any]
    if form == "list":
        properties = {"tools": {"type": "array", "items": {"type": "string", "enum": list(names)},
                                "maxItems": max_named}}
    else:
        properties = {n: {"type": "number", "minimum": 0, "maximum": 1} for n in names}
    required = list(properties)
    if undeclared:
        properties["classes"] = {
            "type": "object",
            "properties": {n: {"type": "string", "enum": list(CLASSES)} for n in undeclared},
            "required": list(undeclared),
            "additionalProperties": False,
        }
        required.append("classes")
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def _json_object(text: str) -> Any:
    """The reply's JSON: the whole text, else its first ``{...}`` span, else None."""
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match is None:
        return None
    try:
        return json.loads(match.group(0))
    except ValueError:
        return None


def _probability(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) else min(1.0, max(0.0, value))


def _classes(raw: dict[str, Any], undeclared: Collection[str]) -> dict[str, DevicePrior]:
    return {n: c for n, c in raw.items() if n in undeclared and c in CLASSES}


def parse_answer(
    content: Any, names: Sequence[str], form: AnswerForm, *, undeclared: Collection[str] = (),
    named_p: float = NAMED_P, unnamed_p: float = UNNAMED_P,
) -> Parsed:
    """The reply's content read as an untrusted answer (see the module's docstring)."""
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    data = _json_object(text[:100_000])
    if form == "list" and isinstance(data, list):
        data = {"tools": data}
    if not isinstance(data, dict):
        return Parsed(error=f"no JSON object in the answer: {text[:120]!r}")
    known = set(names)
    try:
        if form == "list":
            answer = ListAnswer.model_validate(data)
            named = {t.strip() for t in answer.tools if isinstance(t, str)} & known
            if answer.tools and not named:
                return Parsed(error="the answer names no tool of the node")
            probabilities = {n: named_p if n in named else unnamed_p for n in names}
            classes = answer.classes
        else:
            panswer = ProbabilityAnswer.model_validate(data)
            given = {n: p for n in names
                     if n in data and (p := _probability(data[n])) is not None}
            if not given:
                return Parsed(error="the answer gives no number for any tool of the node")
            probabilities = {n: given.get(n, 0.0) for n in names}
            classes = panswer.classes
    except ValidationError as exc:
        return Parsed(error=f"malformed answer: {str(exc)[:200]}")
    return Parsed(probabilities, _classes(classes if isinstance(classes, dict) else {},
                                          undeclared))


@dataclass(frozen=True)
class _Call:
    """One model call of a forecast: the bound model, its messages, the time left."""

    bound: Any
    messages: list[BaseMessage]
    left_s: float


_TIMEOUT = object()
"""The call did not answer in time."""
_BUSY = object()
"""Every forecast thread is held by a call still running."""
_Reply = Any
"""A reply, the exception a call raised, `_TIMEOUT` or `_BUSY`."""


class LLMForecaster:
    """One chat call a forecast; see the module's docstring."""

    source = "llm"

    def __init__(
        self,
        model: BaseChatModel | str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        form: AnswerForm = "list",
        channel: Channel = "auto",
        named_p: float = NAMED_P,
        unnamed_p: float = UNNAMED_P,
        max_named: int = MAX_NAMED,
        threads: int = 2,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if form not in get_args(AnswerForm):
            raise ValueError(f"unknown form {form!r}; valid: {', '.join(get_args(AnswerForm))}")
        if channel not in get_args(Channel):
            raise ValueError(f"unknown channel {channel!r}; valid: {', '.join(get_args(Channel))}")
        if model is None or isinstance(model, str):
            model = openai_model(model, base_url=base_url, api_key=api_key, timeout_s=timeout_s)
        self.model = model
        self.timeout_s = timeout_s
        self.form: AnswerForm = form
        self.channel: Channel = channel
        self.named_p, self.unnamed_p, self.max_named = named_p, unnamed_p, max_named
        self.slots = ConsultationSlots(threads)
        self._native_async = type(model)._agenerate is not BaseChatModel._agenerate

    # -- the request -----------------------------------------------------------------------

    def messages(
        self, text: str, tools: Sequence[ToolCard], undeclared: Sequence[str] = ()
    ) -> list[BaseMessage]:
        listing = "\n".join(f"- {t.name}: {first_sentence(t.description)}".rstrip(": ")
                            for t in tools)
        answer = (_LIST_ANSWER.format(limit=self.max_named) if self.form == "list"
                  else _PROBABILITY_ANSWER)
        if undeclared:
            answer += _CLASS_ANSWER.format(names=", ".join(undeclared))
        return [SystemMessage(_PROMPT.format(tools=listing, answer=answer)),
                HumanMessage(bound_text(text) or "(empty message)")]

    def max_tokens(self, tools: int, undeclared: int) -> int:
        per = 12 * (self.max_named if self.form == "list" else tools)
        return 24 + per + 10 * undeclared

    def _bound(self, names: Sequence[str], undeclared: Sequence[str], channel: str,
               left_s: float) -> Any:
        return bind_turn(
            self.model, [], channel="json_schema" if channel == "json_schema" else "text",
            max_tokens=self.max_tokens(len(names), len(undeclared)), timeout_s=left_s,
            schema=answer_schema(names, self.form, undeclared, self.max_named),
            schema_name=SCHEMA_NAME,
        )

    def _prepare(self, text: str, tools: Sequence[ToolCard], undeclared: Collection[str]
                 ) -> tuple[list[str], list[str], list[BaseMessage]]:
        cards = bound_tools(tools)
        names = [t.name for t in cards]
        asked = [n for n in names if n in set(undeclared)]
        return names, asked, self.messages(text, cards, asked)

    def _channels(self) -> list[str]:
        return ["json_schema", "text"] if self.channel == "auto" else [self.channel]

    def _read(self, reply: Any, names: list[str], asked: list[str], start: float,
              channel: str) -> WordsForecast:
        parsed = parse_answer(getattr(reply, "content", reply), names, self.form,
                              undeclared=asked, named_p=self.named_p, unnamed_p=self.unnamed_p)
        latency = (time.perf_counter() - start) * 1000
        source = self.source if channel == "json_schema" else f"{self.source}:text"
        if parsed.error is not None:
            return WordsForecast(source=source, latency_ms=latency, error=parsed.error)
        return WordsForecast(parsed.probabilities, parsed.classes, source, latency)

    def _failed(self, error: str, start: float) -> WordsForecast:
        return WordsForecast(source=self.source, error=error[:300],
                             latency_ms=(time.perf_counter() - start) * 1000)

    def _rejected(self, channel: str, exc: BaseException) -> bool:
        """Whether to move ``auto`` on to ``text`` after ``exc``: the server refused the
        request (HTTP 400, 422 or 501, or an error naming ``response_format``), not a
        timeout or a connection error."""
        if self.channel != "auto" or channel != "json_schema":
            return False
        status = getattr(exc, "status_code", None)
        if status not in (400, 422, 501) and "response_format" not in str(exc):
            return False
        self.channel = "text"
        return True

    # -- sync and async: the same path ----------------------------------------------------

    def _path(self, text: str, tools: Sequence[ToolCard], undeclared: Collection[str]
              ) -> Generator[_Call, _Reply, WordsForecast]:
        """The forecast without its I/O: yields each model call to make and is sent back
        what came of it (a reply, the exception it raised, `_TIMEOUT` or `_BUSY`); returns
        the forecast. `forecast` and `aforecast` drive it, differing only by the await."""
        start = time.perf_counter()
        names, asked, messages = self._prepare(text, tools, undeclared)
        if not names:
            return WordsForecast(source=self.source)
        for channel in self._channels():
            left = self.timeout_s - (time.perf_counter() - start)
            if left <= 0:
                break
            outcome = yield _Call(self._bound(names, asked, channel, left), messages, left)
            if outcome is _TIMEOUT:
                break
            if outcome is _BUSY:
                return self._failed(f"all {self.slots.size} forecast threads are held by "
                                    "model calls still running", start)
            if isinstance(outcome, Exception):
                if self._rejected(channel, outcome):
                    continue
                return self._failed(f"{type(outcome).__name__}: {outcome}", start)
            return self._read(outcome, names, asked, start, channel)
        return self._failed(f"no answer within {self.timeout_s:g} s", start)

    def forecast(self, text: str, tools: Sequence[ToolCard], *,
                 undeclared: Collection[str] = ()) -> WordsForecast:
        """The forecast for ``text``; ``undeclared``: tools to give a device class. A model
        call runs in one of the forecast threads and is abandoned at the timeout."""
        path = self._path(text, tools, undeclared)
        try:
            call = next(path)
            while True:
                call = path.send(self._call(call))
        except StopIteration as done:
            return done.value

    async def aforecast(self, text: str, tools: Sequence[ToolCard], *,
                        undeclared: Collection[str] = ()) -> WordsForecast:
        """As `forecast`, on the event loop (a natively async model is cancelled at the
        timeout; any other runs in a forecast thread)."""
        path = self._path(text, tools, undeclared)
        try:
            call = next(path)
            while True:
                call = path.send(await self._acall(call))
        except StopIteration as done:
            return done.value

    def _call(self, call: _Call) -> _Reply:
        future = self.slots.start(partial(call.bound.invoke, call.messages),
                                  name="devsched-words")
        if future is None:
            return _BUSY
        try:
            return future.result(timeout=call.left_s)
        except FutureTimeout:
            return _TIMEOUT
        except Exception as exc:
            return exc

    async def _acall(self, call: _Call) -> _Reply:
        work: Any
        if self._native_async:
            work = call.bound.ainvoke(call.messages)
        else:
            future = self.slots.start(partial(call.bound.invoke, call.messages),
                                      name="devsched-words")
            if future is None:
                return _BUSY
            work = asyncio.wrap_future(future)
        try:
            return await asyncio.wait_for(work, call.left_s)
        except asyncio.TimeoutError:
            return _TIMEOUT
        except Exception as exc:
            return exc
