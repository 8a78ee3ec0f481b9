"""Scenario probes on the agentic scheduler under a flood of bad model behaviour.

* `llm_hang_flood`: a chat model that hangs (sync only, so LangChain runs it in the event
  loop's default executor) for many consecutive steps, more than that executor has threads;
  every step is answered within the scheduler's timeout plus slack, the event loop stays
  responsive, and afterwards the loop can still run a sync tool (``ainvoke``) and a job in
  its default executor: it is never starved.
* `llm_garbage_flood`: a model answering 300,000 characters of garbage (brace soup, JSON
  nested past the recursion limit, unclosed nested objects, prose, control characters):
  every step answered within the bound, the loop responsive.

Each hanging or garbage consultation counts as one injection.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field

from langgraph_devsched._dev.stress.kit import (
    ProbeContext,
    ProbeResult,
    call_within,
    check_answered,
    graph_of,
    make_tool,
    node_for,
    step_input,
    within,
)
from langgraph_devsched._dev.stress.stall import MachineStall
from langgraph_devsched.schedulers.agentic import AgenticScheduler

TIMEOUT_S = 0.05
"""The agentic scheduler's timeout in the floods."""
SLACK_S = 1.5
"""What a step may take beyond that timeout, plus the machine's own stall measured meanwhile
(`stall.MachineStall`: a loaded machine's stall is allowed, not guessed)."""
HANG_LIMIT_S = 20.0
"""A hanging model call ends by itself after this long if the probe never releases it."""
GARBAGE_CHARS = 300_000
STOP_AFTER = 3
"""A hang flood stops after this many steps in a row over their bound (it has shown it)."""
LOOP_BLOCK_S = 1.5
"""The longest the event loop may go without running its other tasks beyond what the machine
stalled a separate sleeper process meanwhile (`stall.MachineStall`; a loaded 2-core machine
stalls a healthy loop for up to about 1.4 s; a blocking parse of one 300,000-character answer
took 3-4 s)."""


def default_executor_threads() -> int:
    """What ``loop.run_in_executor(None, ...)`` gets: ThreadPoolExecutor's default size."""
    return min(32, (os.cpu_count() or 1) + 4)


class HangingChatModel(BaseChatModel):
    """Hangs in ``_generate`` until released; no ``_agenerate`` of its own (so ``ainvoke``
    runs it in the event loop's default executor)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    release: threading.Event = Field(default_factory=threading.Event)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "devsched-stress-hanging"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> HangingChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.calls += 1
        self.release.wait(HANG_LIMIT_S)
        raise RuntimeError("hanging model released by the stress harness")


def garbage_texts(seed: int = 0, size: int = GARBAGE_CHARS) -> list[str]:
    """Garbage answers of ``size`` characters each.

    >>> [len(t) for t in garbage_texts(size=1000)]
    [1000, 1000, 1000, 1000, 1000]
    """
    rng = random.Random(seed)
    alphabet = '{}[]":, assignments call_id option gpu_now c0\n'
    soup = "".join(rng.choice(alphabet) for _ in range(size))
    nested = ('{"assignments": ' + "[" * size)[:size]
    unclosed = ('{"a": [' * (size // 7 + 1))[:size]
    prose = ("I think the GPU is best because " * (size // 32 + 1))[:size]
    control = ("\x00\x01\ufffd\u202e{" * (size // 5 + 1))[:size]
    return [soup, nested, unclosed, prose, control]


class GarbageChatModel(BaseChatModel):
    """Answers the next garbage text, in turn."""

    texts: list[str] = Field(default_factory=list)
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "devsched-stress-garbage"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> GarbageChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        text = self.texts[self.calls % len(self.texts)]
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text))])


def _tools() -> tuple[list[Any], dict[str, dict[str, Any]]]:
    def run(payload: str) -> str:
        return f"fa:{payload}"

    async def arun(payload: str) -> str:
        return f"fa:{payload}"

    def srun(payload: str) -> str:  # sync only: ainvoke needs the default executor
        return f"fs:{payload}"

    hints: dict[str, dict[str, Any]] = {
        "fa": {"vram_mb": 500, "gpu_share": 0.5}, "fs": {"vram_mb": 300},
    }
    return [make_tool("fa", run, arun), make_tool("fs", srun)], hints


class _Ticker:
    """Measures the longest gap between 10 ms ticks of the event loop (a blocked loop)."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            self.max_gap = max(self.max_gap, now - last - 0.01)
            last = now

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def _flood_step(
    ctx: ProbeContext, graph: Any, sched: AgenticScheduler, result: ProbeResult, i: int,
    tool: str, run_async: bool, timeout_s: float, stall: MachineStall,
) -> bool:
    sched.clear_cache()  # consult the model every step
    ids = [f"f{ctx.index}s{i}c{j}" for j in range(2)]
    inputs = step_input([(ids[0], tool), (ids[1], "fa")])
    bound = timeout_s + SLACK_S
    wait = bound + max(SLACK_S, stall.stall_s)  # the check below allows the stall seen
    t0 = time.perf_counter()
    if run_async:
        out, why = await within(graph.ainvoke(inputs), wait)
    else:
        out, why = await asyncio.to_thread(call_within, lambda: graph.invoke(inputs), wait)
    took = time.perf_counter() - t0
    bound += stall.stall_s
    mode = "async" if run_async else "sync"
    ok = result.check(why is None, f"{mode} step {i} ({tool}): {why}")
    if why is None:
        ok &= check_answered(result, out, ids, f"{mode} step {i}")
        ok &= result.check(
            took <= bound, f"{mode} step {i} took {took:.2f} s (bound {bound:.2f} s)"
        )
    result.case(ok)
    return ok


def llm_hang_flood(ctx: ProbeContext) -> ProbeResult:
    result = ProbeResult()
    model = HangingChatModel()
    sched = AgenticScheduler(model, fallback="static", timeout_s=TIMEOUT_S, max_turns=1,
                             screen=False)  # every step a consultation: the model hangs in it
    tools, hints = _tools()
    node, _ = node_for(ctx, tools, hints, scheduler=sched)
    graph = graph_of(node)
    n = max(default_executor_threads() + 4, 10)
    run_async = ctx.rng.random() < 0.75  # the async path shares the loop's executor
    result.count("async" if run_async else "sync")

    async def flood() -> None:
        ticker = _Ticker()
        ticker.start()
        try:
            failed = 0
            for i in range(n):
                ok = await _flood_step(ctx, graph, sched, result, i, "fa", run_async, TIMEOUT_S,
                                      stall)
                failed = 0 if ok else failed + 1
                if failed == STOP_AFTER:
                    result.check(False, f"flood stopped after {STOP_AFTER} steps in a row over "
                                 f"the bound (step {i + 1} of {n})")
                    return
            if run_async:  # starved? a sync tool under ainvoke needs the default executor
                await _flood_step(ctx, graph, sched, result, n, "fs", True, TIMEOUT_S, stall)
                loop = asyncio.get_running_loop()
                _, why = await within(loop.run_in_executor(None, lambda: 1), SLACK_S)
                result.check(
                    why is None,
                    f"after {n} hanging consultations the loop's default executor is starved "
                    f"(a job {why}; it has {default_executor_threads()} threads)",
                )
        finally:
            ticker.stop()
            model.release.set()  # let the hanging threads end before the loop closes
        result.check(
            ticker.max_gap <= LOOP_BLOCK_S + stall.stall_s,
            f"the event loop was blocked {ticker.max_gap:.2f} s (the machine stalled "
            f"{stall.stall_s:.2f} s meanwhile)",
        )

    with MachineStall() as stall:
        asyncio.run(flood())
    result.counts["model_calls"] = model.calls
    return result


def llm_garbage_flood(ctx: ProbeContext, *, steps: int = 4) -> ProbeResult:
    result = ProbeResult()
    texts = garbage_texts(ctx.seed)
    start = ctx.rng.randrange(len(texts))
    model = GarbageChatModel(texts=texts[start:] + texts[:start])
    timeout_s = 0.2
    sched = AgenticScheduler(model, fallback="static", timeout_s=timeout_s, max_turns=1,
                             screen=False)  # every step a consultation: garbage answers it
    tools, hints = _tools()
    node, _ = node_for(ctx, tools, hints, scheduler=sched)
    graph = graph_of(node)

    async def flood() -> None:
        ticker = _Ticker()
        ticker.start()
        try:
            for i in range(steps):
                run_async = ctx.rng.random() < 0.5
                await _flood_step(ctx, graph, sched, result, i, "fa", run_async, timeout_s, stall)
        finally:
            ticker.stop()
        result.check(
            ticker.max_gap <= LOOP_BLOCK_S + stall.stall_s,
            f"the event loop was blocked {ticker.max_gap:.2f} s (the machine stalled "
            f"{stall.stall_s:.2f} s meanwhile)",
        )

    with MachineStall() as stall:
        asyncio.run(flood())
    return result
