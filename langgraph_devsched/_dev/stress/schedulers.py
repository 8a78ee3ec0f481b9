"""Schedulers for the stress harness: random valid mappings, and a wrapper that injects faults.

`FaultyScheduler` answers with `RandomScheduler` unless a step fault is armed: it then raises
(``scheduler_error``), answers options the hints forbid (``invalid_decision``), returns
something that is not a valid `Decision` at all (``scheduler_returns``, see
`malformed_returns`), or consults an `AgenticScheduler` whose chat model (`StressChatModel`)
answers garbage, raises or hangs.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict, Field

from langgraph_devsched._dev.stress.faults import StepFault, Tally
from langgraph_devsched.options import DEVICE_OPTIONS, DeviceOption
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView

LLM_FAULTS: tuple[StepFault, ...] = ("llm_garbage", "llm_error", "llm_hang")
MALFORMED_RETURNS: tuple[str, ...] = (
    "none", "dict", "mapping_none", "mapping_list", "predicted_none",
)
"""What a ``scheduler_returns`` fault answers (see `malformed_returns`)."""
HANG_LIMIT_S = 5.0
"""A hanging chat model gives up after this long if the harness never releases it."""


def malformed_returns(batch: Batch, variant: str) -> Any:
    """What a buggy custom scheduler may return instead of a `Decision`.

    ``Decision`` is a frozen dataclass: nothing stops ``mapping=None`` or a list there, so
    the node must check what it gets. ``predicted_ms=None`` carries a valid mapping; it only
    matters where decision metadata is built (a callback handler on the run).

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> b = Batch.of([("c1", "ocr", ToolDeviceSpec())])
    >>> malformed_returns(b, "dict"), malformed_returns(b, "mapping_none").mapping
    ({'c1': 'cpu'}, None)
    """
    ids = batch.call_ids
    if variant == "none":
        return None
    if variant == "dict":
        return dict.fromkeys(ids, "cpu")  # the mapping itself, not a Decision
    if variant == "mapping_none":
        return Decision(mapping=None, reason="mapping=None")  # type: ignore[arg-type]
    if variant == "mapping_list":
        return Decision(mapping=[(i, "cpu") for i in ids], reason="a list")  # type: ignore[arg-type]
    if variant == "predicted_none":
        mapping = {c.call_id: c.spec.allowed_options()[0] for c in batch.calls}
        return Decision(mapping=mapping, reason="predicted_ms=None", predicted_ms=None)  # type: ignore[arg-type]
    raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(MALFORMED_RETURNS)}")


class RandomScheduler(SchedulerBase):
    """A uniformly random allowed option per call (seeded): every placement path gets used."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        return self._decision(
            {c.call_id: self._rng.choice(c.spec.allowed_options()) for c in batch.calls},
            "random allowed options",
        )


def _answer(mapping: dict[str, str], reason: str = "stress") -> AIMessage:
    assignments = [{"call_id": c, "option": o} for c, o in mapping.items()]
    return AIMessage(
        "",
        tool_calls=[
            {
                "name": "submit_mapping",
                "args": {"assignments": assignments, "reason": reason},
                "id": "answer",
                "type": "tool_call",
            }
        ],
    )


def garbage_answers(call_ids: Sequence[str]) -> list[AIMessage]:
    """Malformed answers a chat model may give; each must end in a fallback, never a crash."""
    first = call_ids[0] if call_ids else "c0"
    return [
        AIMessage("I would put everything on the GPU!!! 🚀"),
        AIMessage('{"assignments": [{"call_id": "' + first + '", "option": '),
        _answer(dict.fromkeys(call_ids, "tpu"), "made-up option"),
        _answer({"not-a-call": "gpu_now"}, "unknown call id"),
        AIMessage(
            "",
            tool_calls=[
                {"name": "submit_mapping", "args": {"assignments": 42, "reason": None},
                 "id": "bad", "type": "tool_call"}
            ],
        ),
        AIMessage("", tool_calls=[{"name": "rm_rf", "args": {}, "id": "x", "type": "tool_call"}]),
        AIMessage("\x00\udcff" * 50),
    ]


class StressChatModel(BaseChatModel):
    """A scripted chat model: answers ``reply``, raises, or hangs, as armed by the harness."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mode: str = "ok"
    reply: AIMessage = Field(default_factory=lambda: AIMessage("nothing armed"))
    release: threading.Event = Field(default_factory=threading.Event)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "devsched-stress"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> StressChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        if self.mode == "error":
            raise RuntimeError("injected LLM error (devsched stress)")
        if self.mode == "hang":
            self.release.wait(HANG_LIMIT_S)
            raise RuntimeError("hanging LLM released by the harness")
        return ChatResult(generations=[ChatGeneration(message=self.reply)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.mode == "hang":
            self.calls += 1
            await asyncio.sleep(HANG_LIMIT_S)  # cancelled by the scheduler's timeout
            raise RuntimeError("hanging LLM was not cancelled")
        return self._generate(messages, stop, run_manager, **kw)


class FaultyScheduler(SchedulerBase):
    """`RandomScheduler` with step faults armed by the harness (`arm`) before each step."""

    name = "stress"

    def __init__(
        self,
        *,
        seed: int = 0,
        tally: Tally | None = None,
        llm_timeout_s: float = 0.1,
        llm_share: float = 0.05,
    ) -> None:
        self.base = RandomScheduler(seed)
        self.tally = tally or Tally()
        self.model = StressChatModel()
        # unscreened: every step it gets is a consultation, where the faults are injected
        # (screened, a step with one admitted mapping would not ask the model at all)
        self.agentic = AgenticScheduler(
            self.model, fallback="static", timeout_s=llm_timeout_s, max_turns=2, screen=False
        )
        self.llm_share = llm_share
        self._rng = random.Random(seed + 1)
        self.armed: StepFault | None = None
        self.fired: StepFault | None = None
        """The fault that fired in the last decision (None: the scheduler was not asked)."""
        self.returned: str | None = None
        """The `MALFORMED_RETURNS` variant the last ``scheduler_returns`` fault answered."""

    def arm(self, fault: StepFault | None) -> None:
        self.armed, self.fired, self.returned = fault, None, None
        if self.model.mode == "hang":
            self.model.release.set()  # let a sync hang's worker thread end
        self.model.mode, self.model.release = "ok", threading.Event()

    def release(self) -> None:
        """End the worker thread of a sync hang (after the step)."""
        self.model.release.set()

    # -- deciding ------------------------------------------------------------------------------
    def _plain(self, batch: Batch, view: SchedulerView) -> Decision | None:
        """The answer without the agentic scheduler (None: consult it). A
        ``scheduler_returns`` fault answers whatever `malformed_returns` gives."""
        fault = self.armed
        self.fired = fault
        if fault == "scheduler_returns":
            self.tally.add("scheduler_returns")
            self.returned = self._rng.choice(MALFORMED_RETURNS)
            return malformed_returns(batch, self.returned)
        if fault == "scheduler_error":
            self.tally.add("scheduler_error")
            raise RuntimeError("injected scheduler error (devsched stress)")
        if fault == "invalid_decision":
            self.tally.add("invalid_decision")
            return self._invalid(batch)
        if fault in LLM_FAULTS:
            self.tally.add(fault)
            self._arm_model(fault, batch)
            return None
        if self._rng.random() < self.llm_share:
            self.tally.add("llm_ok")
            self._arm_model(None, batch)
            return None
        return self.base.decide(batch, view)

    def _invalid(self, batch: Batch) -> Decision:
        mapping: dict[str, Any] = {}
        for i, call in enumerate(batch.calls):
            forbidden = [o for o in DEVICE_OPTIONS if o not in call.spec.allowed_options()]
            choices: list[Any] = ["tpu", None, *forbidden]
            if i == 0 or self._rng.random() < 0.5:
                choice = self._rng.choice(choices)
                if choice is not None:
                    mapping[call.call_id] = choice
            else:
                mapping[call.call_id] = self._rng.choice(call.spec.allowed_options())
        return Decision(mapping=mapping, reason="injected invalid decision", scheduler=self.name)

    def _arm_model(self, fault: StepFault | None, batch: Batch) -> None:
        self.agentic.clear_cache()  # consult the model now, not a cached answer
        ids = list(batch.call_ids)
        if fault == "llm_error":
            self.model.mode = "error"
        elif fault == "llm_hang":
            self.model.mode = "hang"
        elif fault == "llm_garbage":
            self.model.mode, self.model.reply = "ok", self._rng.choice(garbage_answers(ids))
        else:
            options: dict[str, str] = {
                c.call_id: self._rng.choice(c.spec.allowed_options()) for c in batch.calls
            }
            self.model.mode, self.model.reply = "ok", _answer(options, "scripted good answer")

    def decide(
        self, batch: Batch, view: SchedulerView, *, config: RunnableConfig | None = None
    ) -> Decision:
        plain = self._plain(batch, view)
        if plain is not None or self.returned is not None:
            return plain  # type: ignore[return-value]  # a malformed return is the point
        return self.agentic.decide(batch, view, config=config)

    async def adecide(
        self, batch: Batch, view: SchedulerView, *, config: RunnableConfig | None = None
    ) -> Decision:
        plain = self._plain(batch, view)
        if plain is not None or self.returned is not None:
            return plain  # type: ignore[return-value]
        return await self.agentic.adecide(batch, view, config=config)

    def observe(self, batch: Batch, decision: Decision, record: Any) -> None:
        self.agentic.observe(batch, decision, record)


def invalid_applied(batch: Batch, decision: Decision) -> list[tuple[str, DeviceOption | None]]:
    """Calls whose applied option is not among their hints' allowed options (should be none)."""
    return [
        (c.call_id, decision.mapping.get(c.call_id))
        for c in batch.calls
        if decision.mapping.get(c.call_id) not in c.spec.allowed_options()
    ]
