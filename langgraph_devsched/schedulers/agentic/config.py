"""The agentic scheduler's configuration from the environment, and what to say when unset.

``$DEVSCHED_LLM_MODEL`` and ``$DEVSCHED_LLM_BASE_URL`` (or ``$OPENAI_API_KEY``) name the chat
model; ``$DEVSCHED_LLM_TIMEOUT``, ``_MAX_TOKENS``, ``_MODE``, ``_ANSWER`` and ``_CANDIDATES``
set scheduler options (what ``devsched bench --llm-*`` sets, `apply_llm_options`). Each is
checked where it is set and where it is read (`ValueError` naming the valid values).

>>> check_choice("pick", ("agent", "pick"), "mode")
'pick'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

AnswerChannel = Literal["auto", "tool_required", "tool_named", "json_schema", "text"]
"""How the forced answer turn asks for the answer (`model`)."""
ANSWER_CHANNELS: tuple[str, ...] = get_args(AnswerChannel)

ConsultMode = Literal["agent", "one_shot", "pick"]
"""``agent``: the observations as tool outputs (`modes.agent`); ``one_shot``: the same, the
outputs inline in the task; ``pick``: the model ratifies one of the classical policy's
numbered candidate mappings (`modes.pick`)."""
CONSULT_MODES: tuple[str, ...] = get_args(ConsultMode)

ENV_MODEL = "DEVSCHED_LLM_MODEL"
ENV_BASE_URL = "DEVSCHED_LLM_BASE_URL"
ENV_API_KEY = "OPENAI_API_KEY"
ENV_TIMEOUT = "DEVSCHED_LLM_TIMEOUT"
ENV_MAX_TOKENS = "DEVSCHED_LLM_MAX_TOKENS"
ENV_MODE = "DEVSCHED_LLM_MODE"
ENV_ANSWER = "DEVSCHED_LLM_ANSWER"
ENV_CANDIDATES = "DEVSCHED_LLM_CANDIDATES"


def check_choice(value: str, valid: Sequence[str], what: str) -> str:
    """``value`` if it is one of ``valid``, else a ValueError listing them."""
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


def _at_least(low: float, strict: bool = False) -> Callable[[Any, str], Any]:
    def check(value: Any, what: str) -> Any:
        if value < low or (strict and value == low):
            raise ValueError(f"{what} must be {'>' if strict else '>='} {low:g}, got {value}")
        return value

    return check


_OPTIONS: dict[str, tuple[str, str, Callable[[str], Any], Callable[[Any, str], Any]]] = {
    # option: (environment variable, bench flag, parse, check)
    "timeout_s": (ENV_TIMEOUT, "--llm-timeout", float, _at_least(0, strict=True)),
    "max_tokens": (ENV_MAX_TOKENS, "--llm-max-tokens", int, _at_least(1)),
    "mode": (ENV_MODE, "--llm-mode", str, lambda v, w: check_choice(v, CONSULT_MODES, w)),
    "answer": (ENV_ANSWER, "--llm-answer", str, lambda v, w: check_choice(v, ANSWER_CHANNELS, w)),
    "candidates": (ENV_CANDIDATES, "--llm-candidates", int, _at_least(0)),
}


def apply_llm_options(**options: float | str | None) -> None:
    """Set the agentic scheduler's options for this process (``timeout_s``, ``max_tokens``,
    ``mode``, ``answer``, ``candidates``; None: left as it is) in ``$DEVSCHED_LLM_TIMEOUT``
    and friends, as ``devsched bench --llm-*`` does; each is checked first."""
    for name, value in options.items():
        check_choice(name, list(_OPTIONS), "agentic option")
        env, flag, _, check = _OPTIONS[name]
        if value is not None:
            os.environ[env] = str(check(value, flag))


def env_options() -> dict[str, Any]:
    """Scheduler options set in the environment (``$DEVSCHED_LLM_TIMEOUT`` and friends)."""
    out: dict[str, Any] = {}
    for name, (env, _, parse, check) in _OPTIONS.items():
        if os.environ.get(env):
            out[name] = check(parse(os.environ[env]), f"${env}")
    return out


class AgenticNotConfiguredError(RuntimeError):
    """No chat model to consult: the message says what to set."""


def not_configured(missing: str) -> AgenticNotConfiguredError:
    return AgenticNotConfiguredError(
        f"the agentic scheduler is not configured: {missing}. Set {ENV_MODEL} (the model name, "
        f"e.g. gpt-4o-mini or the name your local server serves) and either {ENV_API_KEY} "
        f"(OpenAI) or {ENV_BASE_URL} (an OpenAI-compatible server such as llama.cpp server, "
        "vLLM, Ollama or LM Studio, e.g. http://localhost:8080/v1); or build "
        "AgenticScheduler(model=<any LangChain chat model>)"
    )
