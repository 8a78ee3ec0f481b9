"""The agentic scheduler's chat model: building one for an endpoint, and binding one turn.

`openai_model` builds a `ChatOpenAI` for OpenAI or any OpenAI-compatible server (no retry:
an abandoned request must not run on). `bind_turn` binds one model turn: always the same
tool list (so a server's prompt cache survives the forced turn), a token cap, and, on the
forced answer turn, the answer channel:

- ``tool_required``: ``tool_choice="required"`` (sent as a string, which llama.cpp honours);
- ``tool_named``: ``tool_choice`` naming ``submit_mapping`` (an object on the wire; llama.cpp
  ignores it, OpenAI and vLLM honour it);
- ``json_schema``: ``response_format`` with the answer's JSON schema (llama.cpp, vLLM and
  OpenAI constrain the output to it), tools still listed, ``tool_choice="none"``;
- ``text``: no constraint, the prompt asks for the JSON object.

``auto`` starts with ``json_schema`` (the one channel that constrains every token to one
allowed option per call id) and moves along `CHANNEL_CHAIN` when a channel gives no answer
or is refused, per scheduler (that is, per endpoint).

>>> CHANNEL_CHAIN
('json_schema', 'tool_required', 'text')
>>> answer_budget(3)
52
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import SecretStr

from langgraph_devsched.options import DEVICE_OPTIONS
from langgraph_devsched.schedulers.agentic.answers import ANSWER_TOOL
from langgraph_devsched.schedulers.agentic.config import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    AnswerChannel,
    not_configured,
)

if TYPE_CHECKING:
    from langchain_core.messages import AIMessage


CHANNEL_CHAIN: tuple[AnswerChannel, ...] = ("json_schema", "tool_required", "text")


TOKENS_BASE = 16
TOKENS_PER_CALL = 12
GPU_TOKENS_PER_CALL = 3
"""More per call where the values name a GPU (``@1`` is about two tokens)."""


def answer_budget(calls: int, *, several_gpus: bool = False) -> int:
    """Completion tokens for one turn of a step with ``calls`` calls: the json_schema
    answer's ``{"<call id>": "<option>", ...}`` (about 8 tokens a call), with room to spare;
    `GPU_TOKENS_PER_CALL` more a call on a machine with several GPUs (``gpu_now@1``).
    The other channels' answers are longer: a consultation that reaches them gets
    `LONG_BUDGET_FACTOR` times this."""
    per_call = TOKENS_PER_CALL + (GPU_TOKENS_PER_CALL if several_gpus else 0)
    return TOKENS_BASE + per_call * max(1, calls)


LONG_BUDGET_FACTOR = 4


def openai_model(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
    timeout_s: float | None = 60.0,
    max_retries: int = 0,
    **kwargs: Any,
) -> BaseChatModel:
    """A `ChatOpenAI` for OpenAI or any OpenAI-compatible server; arguments override env.

    ``model`` defaults to ``$DEVSCHED_LLM_MODEL``, ``base_url`` to ``$DEVSCHED_LLM_BASE_URL``,
    ``api_key`` to ``$OPENAI_API_KEY`` (a placeholder for a local server that needs none).
    No retries by default: the scheduler bounds each request by what is left of its timeout.

    >>> chat = openai_model("qwen2.5-7b-instruct", base_url="http://localhost:8080/v1")
    >>> chat.model_name, str(chat.openai_api_base), chat.max_retries
    ('qwen2.5-7b-instruct', 'http://localhost:8080/v1', 0)
    """
    name = model or os.environ.get(ENV_MODEL)
    if not name:
        raise not_configured(f"no model name (argument or ${ENV_MODEL})")
    base_url = base_url or os.environ.get(ENV_BASE_URL) or None
    api_key = api_key or os.environ.get(ENV_API_KEY) or ("not-needed" if base_url else None)
    if api_key is None:
        raise not_configured(f"model {name!r} but neither ${ENV_API_KEY} nor ${ENV_BASE_URL}")
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        raise ImportError(
            "openai_model needs the langchain-openai package: pip install langchain-openai "
            "(from a clone: pip install -e '.[llm]')"
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


def answer_schema(
    call_ids: Sequence[str], allowed: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Any]:
    """The answer's JSON schema for ``response_format``: a flat object with exactly one
    required property per call id whose value is one of that call's ``allowed`` options
    (default: all). A server that constrains decoding to it cannot repeat entries, invent
    ids or run on until the token cap, and no token is spent on a wrapper or a reason (a
    1.5B model on two shared CPU cores writes about 4 tokens a second).

    >>> answer_schema(["a"], {"a": ["cpu"]})["properties"]
    {'a': {'type': 'string', 'enum': ['cpu']}}
    """
    allowed = allowed or {}
    return {
        "type": "object",
        "properties": {
            c: {"type": "string", "enum": list(allowed.get(c) or DEVICE_OPTIONS)}
            for c in call_ids
        },
        "required": list(call_ids),
        "additionalProperties": False,
    }


def bind_turn(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    channel: AnswerChannel | None,
    max_tokens: int | None,
    timeout_s: float | None,
    call_ids: Sequence[str] = (),
    allowed: Mapping[str, Sequence[str]] | None = None,
    schema: dict[str, Any] | None = None,
    schema_name: str = ANSWER_TOOL,
) -> Runnable[Any, AIMessage]:
    """``model`` bound for one turn: ``channel`` None for a free turn, else a forced one.
    ``schema``: the json_schema channel's schema (default: `answer_schema` of ``call_ids``).

    The caller passes the same tool list whatever the turn (the forced turn changes only
    ``tool_choice``), so the system prompt a server renders from it stays the same; an
    empty list binds no tools (servers such as llama.cpp decode much slower with tools).
    """
    choice: str | None = None
    extra: dict[str, Any] = {}
    openai_wire = type(model).__module__.startswith("langchain_openai")  # timeout, extra_body
    if channel == "tool_required":
        choice = "any"  # langchain-openai sends "required"
    elif channel == "tool_named":
        choice = ANSWER_TOOL
    elif channel == "json_schema":
        choice = "none"
        response_format = {
            "type": "json_schema",
            "json_schema": {
                "name": schema_name,
                "schema": schema if schema is not None else answer_schema(call_ids, allowed),
            },
        }
        # through extra_body: langchain-openai would switch to its parse() path, which
        # rejects non-strict tools
        extra["extra_body" if openai_wire else "response_format"] = (
            {"response_format": response_format} if openai_wire else response_format
        )
    elif channel == "text":
        choice = "none"
    bound: Runnable[Any, AIMessage]
    if tools:
        bound = model.bind_tools(
            list(tools), **({"tool_choice": choice} if choice is not None else {})
        )
    else:  # no tools at all (a one-shot turn answering in JSON or text)
        bound = model
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    if openai_wire and timeout_s is not None:
        extra["timeout"] = max(0.001, timeout_s)
    return bound.bind(**extra) if extra else bound


class ChannelState:
    """The answer channel of one endpoint: fixed, or ``auto`` walking ``chain``
    (`CHANNEL_CHAIN`; a pick consultation walks its own)."""

    def __init__(
        self, channel: AnswerChannel, chain: tuple[AnswerChannel, ...] = CHANNEL_CHAIN
    ) -> None:
        self.configured = channel
        self.chain = chain
        self._pos = 0

    @property
    def current(self) -> AnswerChannel:
        return self.chain[self._pos] if self.configured == "auto" else self.configured

    def advance(self) -> bool:
        """Move ``auto`` to the next channel; False when there is none (or it is fixed)."""
        if self.configured != "auto" or self._pos + 1 >= len(self.chain):
            return False
        self._pos += 1
        return True


