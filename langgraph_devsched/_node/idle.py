"""Idle-time calibration on a node: between two steps, re-run a recent side-effect-free call.

A real agent's tool steps alternate with LLM turns of seconds, and the devices are idle in
between. With ``DeviceToolNode(idle_calibration=True)`` (off by default), after an async step
(``ainvoke``) the node asks its scheduler's ``calibration()`` (the monitor policy's: a recent
call of an ``idempotent`` tool on a side never measured) for one run, re-runs that tool with
the arguments of its last call on that side through the backend (placed, VRAM reserved and
released like any call), drops the result, and feeds what it measured back as a hedge with
no winner (`hedging.HedgeOutcome`). The run is cancelled as soon as the next step arrives
(then it is censored: its side takes at least what it ran). One run at a time, at most
`MAX_RUNS` between two steps; the arguments of the last call of at most `MAX_TOOLS` tools
are kept. A sync step (``invoke``) starts nothing: a thread could not be cancelled.

Each run is the implementation of the side it measures (a tool's ``cpu_impl`` on the CPU,
its ``gpu_impl`` on a GPU, else the tool). A sync tool runs in a thread of its own: when its
run is cut, the thread runs on, and what it holds (its VRAM, its CPU slot) stays held until
it returns, as for a cut call (`executors.lease`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from langchain_core.tools import BaseTool

from langgraph_devsched._node.call_runner import is_sync_only, spawn
from langgraph_devsched.device import placed
from langgraph_devsched.executors.base import Backend, PlannedCall
from langgraph_devsched.executors.lease import current_lease
from langgraph_devsched.hedging import HEDGES_KEY, HedgeOutcome
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.protocols import capabilities

logger = logging.getLogger(__name__)

MAX_RUNS = 4
"""At most this many idle runs between two steps."""
MAX_TOOLS = 256
"""The last call's arguments are kept for at most this many tools."""

Observe = Callable[[Any, Any, StepRecord], None]


class IdleCalibration:
    """The node's idle-time runs: remember arguments, start after a step, stop before one."""

    def __init__(
        self, *, scheduler: Any, backend: Backend, tools: Mapping[str, BaseTool],
        specs: Mapping[str, ToolDeviceSpec], device_args: Mapping[str, tuple[str, ...]],
        observe: Observe, max_runs: int = MAX_RUNS,
        impls: Mapping[tuple[str, str], BaseTool] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._backend = backend
        self._tools = tools
        self._impls = impls or {}
        """A tool's own implementation per side (``(name, "cpu"|"gpu")``), where it has one."""
        self._specs = specs
        self._device_args = device_args
        self._observe = observe
        self.max_runs = max_runs
        self._args: LruTable[str, dict[str, Any]] = LruTable(MAX_TOOLS)
        self._task: asyncio.Task[None] | None = None
        self.runs = 0
        """Idle runs started so far (each one fed back, complete or cut)."""

    def remember(self, calls: list[Any]) -> None:
        """Keep the arguments of these calls of side-effect-free tools."""
        for call in calls:
            name = call.get("name")
            spec = self._specs.get(name)
            if spec is not None and spec.idempotent and isinstance(call.get("args"), dict):
                self._args[name] = dict(call["args"])

    def start(self) -> None:
        """Begin the idle runs on the running loop (nothing when the scheduler has no
        ``calibration`` or a run is already under way)."""
        if capabilities(self._scheduler).calibration is None:
            return
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the idle run under way (a step arrived); its release paths run first."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    @property
    def running(self) -> bool:
        """Whether an idle run is under way."""
        return self._task is not None and not self._task.done()

    async def join(self) -> None:
        """Wait until the idle runs end by themselves (nothing left to measure)."""
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._task)

    async def _run(self) -> None:
        for _ in range(self.max_runs):
            asked = self._scheduler.calibration()
            if asked is None:
                return
            batch, decision = asked
            (call,) = batch.calls
            args = self._args.get(call.tool)
            tool = self._tools.get(call.tool)
            if args is None or tool is None:
                return
            await self._once(batch, decision, call, tool, args)

    async def _once(self, batch: Any, decision: Any, call: Any, tool: BaseTool,
                    args: dict[str, Any]) -> None:
        option = decision.mapping[call.call_id]
        execution = self._backend.start_step(
            [PlannedCall(call.call_id, call.tool, option, call.spec)])
        names = self._device_args.get(call.tool, ())

        async def run(placement: Any) -> tuple[Any, bool]:
            with placed(placement):
                side = "gpu" if placement.on_gpu else "cpu"
                impl = self._impls.get((call.tool, side), tool)  # the side it measures
                given = {**args, **dict.fromkeys(names, placement.device)}
                if is_sync_only(impl):
                    return await held_thread(spawn(lambda: impl.invoke(given))), False
                return await impl.ainvoke(given), False

        self.runs += 1
        try:
            await execution.run_async(call.call_id, run)
        except Exception as exc:  # the tool's own error: recorded, nothing answers
            logger.debug("idle run of %s failed: %s", call.tool, exc)
        finally:
            records = execution.record().calls
            if records:
                rec = records[0]
                outcome = HedgeOutcome(call.call_id, call.tool, None, rec, rec.error is None,
                                       rec.run_ms)
                with contextlib.suppress(Exception):  # learning must not break the node
                    self._observe(batch, decision,
                                  StepRecord((), 0.0, extra={HEDGES_KEY: (outcome,)}))


async def held_thread(work: Future[Any]) -> Any:
    """The result of ``work`` (a thread running a sync tool). Cut while it runs, the
    thread's call keeps what it holds until it returns (`Lease.outlive`)."""
    waited = asyncio.wrap_future(work)
    try:
        await asyncio.wait({waited})
    except asyncio.CancelledError:
        lease = current_lease()
        if lease is not None and not work.done():
            lease.outlive(work)
        raise
    return waited.result()
