"""How the agentic scheduler consults its model: one small strategy per mode.

A `Mode` says what part of the cache key is its own (when to ask again), builds the
consultation for a step from a `Step` (None: nothing to ask, the scheduler falls back to
the default consultation), and owns the answer channel its consultations walk. `MODES`
maps each name of `ConsultMode` to its strategy; a new mode is one module and one entry.

- ``agent`` (default): the monitor's observation tools called for the model, their outputs
  as tool messages, one forced turn (more with ``max_turns``); the model decides.
- ``one_shot``: the same consultation with the outputs inline in the task message.
- ``pick``: the model ratifies one of the classical policy's candidate mappings by number.

>>> from langgraph_devsched.schedulers.agentic.config import CONSULT_MODES
>>> sorted(MODES) == sorted(CONSULT_MODES)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from langgraph_devsched.schedulers.agentic.config import AnswerChannel
from langgraph_devsched.schedulers.agentic.model import ChannelState
from langgraph_devsched.schedulers.agentic.modes.agent import AgentMode, Step
from langgraph_devsched.schedulers.agentic.modes.pick import PickMode

__all__ = ["MODES", "AgentMode", "Mode", "PickMode", "Step", "make_mode"]


class Mode(Protocol):
    """One consultation mode (see the module docstring)."""

    name: str
    channel: ChannelState

    def key(self, step: Step) -> Any: ...

    def trial(self, step: Step) -> str | None: ...

    def consultation(self, step: Step) -> Any: ...


MODES: dict[str, Callable[[AnswerChannel], Mode]] = {
    "agent": lambda answer: AgentMode(answer),
    "one_shot": lambda answer: AgentMode(answer, inline=True),
    "pick": lambda answer: PickMode(answer),
}


def make_mode(name: str, answer: AnswerChannel) -> Mode:
    """The strategy for mode ``name`` (checked against `CONSULT_MODES` by the caller)."""
    return MODES[name](answer)
