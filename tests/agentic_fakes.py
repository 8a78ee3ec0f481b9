"""Scripted chat models for the agentic scheduler's tests (no network, no real time)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

WORDS_PROMPT = "You decide which tools a user's request needs."
"""How the sub-agent's reading of a request starts (`words.llm`): the scripted models here
answer it apart, naming no tool, so the node's reading in the background never takes a step
consultation's scripted answer (its own tests: tests/test_words_*.py)."""


def words_reply(messages: Sequence[BaseMessage]) -> ChatResult | None:
    """The answer to a reading of a request (no tool named), or None for any other call."""
    first = messages[0] if messages else None
    if first is not None and str(first.content).startswith(WORDS_PROMPT):
        return ChatResult(generations=[ChatGeneration(message=AIMessage('{"tools": []}'))])
    return None


class ToolScriptModel(BaseChatModel):
    """Answers the scripted AIMessages in order (the last one repeats) and records, per
    call, the messages it received and the binding it was called through (a reading of a
    request is answered apart: `words_reply`)."""

    script: list[AIMessage]
    received: list[list[BaseMessage]] = Field(default_factory=list)
    bindings: list[tuple[tuple[str, ...], Any]] = Field(default_factory=list)
    call_kwargs: list[dict[str, Any]] = Field(default_factory=list)
    bound_names: tuple[str, ...] = ()
    tool_choice: Any = None
    error: str | None = None

    @property
    def _llm_type(self) -> str:
        return "tool-script"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> ToolScriptModel:
        names = tuple(getattr(t, "name", getattr(t, "__name__", str(t))) for t in tools)
        # a shallow copy: the script, received and bindings lists stay shared
        return self.model_copy(update={"bound_names": names, "tool_choice": tool_choice})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        words = words_reply(messages)
        if words is not None:
            return words
        self.received.append(list(messages))
        self.bindings.append((self.bound_names, self.tool_choice))
        self.call_kwargs.append(dict(kw))
        if self.error is not None:
            raise RuntimeError(self.error)
        reply = self.script[min(len(self.received) - 1, len(self.script) - 1)]
        return ChatResult(generations=[ChatGeneration(message=reply)])


class EveryCallAnswers(ToolScriptModel):
    """Answers every call of every step with ``value`` (the flat json_schema form), read
    from the ``step_calls`` observation."""

    value: str = "cpu"
    script: list[AIMessage] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        words = words_reply(messages)
        if words is not None:
            return words
        calls = next(json.loads(str(m.content)) for m in messages
                     if getattr(m, "name", None) == "step_calls")
        self.script[:] = [AIMessage(json.dumps(dict.fromkeys(calls, self.value)))]
        return super()._generate(messages, stop, run_manager, **kw)


class HangingModel(BaseChatModel):
    """Never answers: a sync call waits on ``release``; an async call on an event that never
    fires. Tests set ``release`` when done so no thread is left behind."""

    release: Any = Field(default_factory=threading.Event)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "hanging"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> HangingModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        self.release.wait()
        raise RuntimeError("released")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def tool_call(name: str, args: dict[str, Any] | None = None, id: str = "t1") -> dict[str, Any]:
    return {"name": name, "args": args or {}, "id": id, "type": "tool_call"}


def submit(mapping: dict[str, str], reason: str = "r", id: str = "ans") -> AIMessage:
    """An AIMessage calling submit_mapping with ``mapping``."""
    assignments = [{"call_id": c, "option": o} for c, o in mapping.items()]
    return AIMessage(
        "",
        id=f"answer-{id}",
        tool_calls=[
            tool_call("submit_mapping", {"assignments": assignments, "reason": reason}, id)
        ],
    )


class SyncHangingModel(BaseChatModel):
    """A chat model with no async path of its own that hangs until ``release`` is set: under
    ``ainvoke`` LangChain would run it in the event loop's default executor."""

    release: Any = Field(default_factory=threading.Event)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "sync-hanging"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> SyncHangingModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        self.release.wait(30)
        raise RuntimeError("released")


class TextModel(BaseChatModel):
    """Answers ``text`` (as plain content) to every call; records the kwargs of each call."""

    text: str
    kwargs: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "text"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> TextModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.kwargs.append(dict(kw))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self.text))])
