"""The sub-agent's own job: reading the user's request for what no measurement foresees.

`MessageReader.read` answers, for a request's text and the node's tools (name and
description; never arguments or outputs), which tools the coming work calls, in two stages:

1. words without a model (`words.lexical`, BM25 over the descriptions), in force at once;
2. the model's answer (`words.llm.LLMForecaster`, one call, its answer constrained to the
   tools' names) combined with the first (the larger probability per tool; where the model
   fails or times out, the first stands alone), in force once it answered.

Asked (``undeclared``: the scheduler's ``device_classes=True``, off by default), the model
also gives the node's tools that declare no profile and no device prior a device class
(``gpu``, ``cpu`` or ``neutral``) from the description: the policy's prior for where such a
tool starts, until measured (`policy.priors`).

Answers are kept by (model, text, tool set, tools asked a class) in a bounded table shared
by every reader of the process (`MAX_KEPT`): a request read once is not sent to that model
again, and its second reading carries the latency first measured (the bench says so:
docs/words.md).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.words.base import ToolCard, WordsForecast, bound_text
from langgraph_devsched.words.option import words_forecast

_Key = tuple[str, str, tuple[str, ...], tuple[str, ...]]
MAX_KEPT = 4096
"""Answers kept, over every reader of the process (least recently used dropped)."""
_KEPT: LruTable[_Key, WordsForecast] = LruTable(MAX_KEPT)
_KEPT_LOCK = threading.Lock()


MAX_UNDECLARED = 32
"""At most this many tools are asked a device class (each costs about 10 answer tokens)."""


def undeclared(spec: ToolDeviceSpec) -> bool:
    """Whether the sub-agent gives ``spec``'s tool a device class: it may run on either
    side (GPU-capable, CPU allowed, not pinned) and declares no solo time and no device
    prior.

    >>> undeclared(ToolDeviceSpec()), undeclared(ToolDeviceSpec(device_prior="gpu"))
    (True, False)
    """
    return (spec.gpu_capable and spec.cpu_allowed and spec.pinned is None
            and not spec.declares_time and spec.device_prior is None)


class MessageReader:
    """Reads a request into a forecast from words (see the module)."""

    def __init__(self, model: Any, *, timeout_s: float) -> None:
        self.model = model
        self.timeout_s = timeout_s
        self.asked = 0
        """Model calls made (a kept answer is not asked again)."""
        self._llm: Any = None
        named = [str(getattr(model, a, "") or "") for a in ("model_name", "openai_api_base")]
        self._model_key = ("|".join(named) if any(named)
                           else f"unnamed:{uuid.uuid4().hex}")  # this reader's own

    def read(self, text: str, tools: Sequence[tuple[str, str]],
             undeclared: Collection[str] = ()) -> list[WordsForecast]:
        """The two stages for ``text`` (see the module); blocking (the model's call).
        ``undeclared``: tools whose hints declare no profile and no device prior; the model
        also gives each a device class (`WordsForecast.classes`: a prior until measured)."""
        quick = words_forecast("lexical", text, tools)
        assert quick is not None
        names = tuple(str(name) for name, _ in tools)
        asked = tuple(n for n in names if n in undeclared)
        key = (self._model_key, bound_text(text), names, asked)
        with _KEPT_LOCK:
            said = _KEPT.get(key)
        if said is None:
            said = self._ask(text, [ToolCard(str(n), str(d)) for n, d in tools], quick, asked)
            if said.error is None and "failed" not in said.source:  # a failure is asked again
                with _KEPT_LOCK:
                    _KEPT[key] = said
        return [quick, said]

    def _ask(self, text: str, cards: list[ToolCard], quick: WordsForecast,
             undeclared: Sequence[str]) -> WordsForecast:
        from langgraph_devsched.words.llm import LLMForecaster

        if self._llm is None:
            self._llm = LLMForecaster(self.model, timeout_s=self.timeout_s)
        self.asked += 1
        said: WordsForecast = self._llm.forecast(text, cards, undeclared=undeclared)
        if said.error is not None:
            return WordsForecast(quick.probabilities, quick.classes,
                                 f"lexical (the model failed: {said.error})"[:200],
                                 said.latency_ms)
        merged = {name: max(p, said.probabilities.get(name, 0.0))
                  for name, p in quick.probabilities.items()}
        return WordsForecast(merged, said.classes, "lexical+llm", said.latency_ms)
