"""The agentic scheduler's configuration from the environment, and what to say when unset.

``$DEVSCHED_LLM_MODEL`` and ``$DEVSCHED_LLM_BASE_URL`` (or ``$OPENAI_API_KEY``) name the chat
model; ``$DEVSCHED_LLM_TIMEOUT``, ``_MAX_TOKENS``, ``_MODE``, ``_ANSWER`` and ``_CANDIDATES``
set scheduler options (what ``devsched bench --llm-*`` sets, `apply_llm_options`).

>>> check_choice("pick", ("agent", "pick"), "mode")
'pick'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal, get_args

AnswerChannel = Literal["auto", "tool_required", "tool_named", "json_schema", "text"]
"""How the forced answer turn asks for the answer (see the module docstring)."""


ANSWER_CHANNELS: tuple[str, ...] = get_args(AnswerChannel)


ConsultMode = Literal["agent", "one_shot", "pick"]
"""``agent``: observation tools over several turns; ``one_shot``: the observations inline
in the prompt and a single, forced turn (for small models); ``pick``: the twin's best
mappings numbered in the prompt, the answer one number (`agentic_pick`, for the smallest
and slowest models)."""


CONSULT_MODES: tuple[str, ...] = get_args(ConsultMode)



ENV_MODEL = "DEVSCHED_LLM_MODEL"


ENV_BASE_URL = "DEVSCHED_LLM_BASE_URL"


ENV_API_KEY = "OPENAI_API_KEY"


ENV_TIMEOUT = "DEVSCHED_LLM_TIMEOUT"


ENV_MAX_TOKENS = "DEVSCHED_LLM_MAX_TOKENS"


ENV_MODE = "DEVSCHED_LLM_MODE"


ENV_ANSWER = "DEVSCHED_LLM_ANSWER"


ENV_CANDIDATES = "DEVSCHED_LLM_CANDIDATES"


def apply_llm_options(
    *,
    timeout_s: float | None = None,
    max_tokens: int | None = None,
    mode: str | None = None,
    answer: str | None = None,
    candidates: int | None = None,
) -> None:
    """Set the agentic scheduler's options for this process (``$DEVSCHED_LLM_TIMEOUT``,
    ``_MAX_TOKENS``, ``_MODE``, ``_ANSWER``, ``_CANDIDATES``), as ``devsched bench --llm-*``
    does; each is checked first (`ValueError` naming the valid values)."""
    if candidates is not None:
        if candidates < 0:
            raise ValueError(f"--llm-candidates must be >= 0, got {candidates}")
        os.environ[ENV_CANDIDATES] = str(candidates)
    if timeout_s is not None:
        if timeout_s <= 0:
            raise ValueError(f"--llm-timeout must be > 0, got {timeout_s}")
        os.environ[ENV_TIMEOUT] = str(timeout_s)
    if max_tokens is not None:
        if max_tokens < 1:
            raise ValueError(f"--llm-max-tokens must be >= 1, got {max_tokens}")
        os.environ[ENV_MAX_TOKENS] = str(max_tokens)
    if mode is not None:
        os.environ[ENV_MODE] = check_choice(mode, CONSULT_MODES, "--llm-mode")
    if answer is not None:
        os.environ[ENV_ANSWER] = check_choice(answer, ANSWER_CHANNELS, "--llm-answer")


def check_choice(value: str, valid: Sequence[str], what: str) -> str:
    """``value`` if it is one of ``valid``, else a ValueError listing them."""
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


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



def env_options() -> dict[str, Any]:
    """Scheduler options set in the environment (``DEVSCHED_LLM_TIMEOUT`` and friends)."""


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


