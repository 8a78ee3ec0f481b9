"""Running one planned call: its placed tool, its traced config, its deadline, its answer.

The backend places the call (VRAM, GPU queue, CPU slot, OOM → CPU) and releases what it
holds; this module runs the tool under that placement:

* the tool's CPU or GPU variant, or a remote stand-in (Ray), under `placed`;
* the run's config: decision metadata and tags when something observes the run, and a
  watcher that notices a CUDA OOM even when ``handle_tool_errors`` swallows it;
* the deadline (``call_timeout_s`` or the tool's ``timeout_s`` hint), the call's whole life
  from the moment it is placed: the backend bounds its GPU queue and CPU slot waits by it, its
  run (model loads included) and an OOM rerun get what is left; an async tool is cancelled, a
  sync tool's thread runs on, and its lease keeps the device until it returns;
* a sync tool under ``ainvoke`` that holds a device runs in a thread of its own, so a
  cancelled ``ainvoke`` cannot give its VRAM back while the thread still uses it.

The answer for a call that can run nowhere, or that ran past its deadline, is an error
`ToolMessage` (a timeout honours ``handle_tool_errors`` as `ToolNode` does).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import get_callback_manager_for_config, patch_config
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from langgraph_devsched._node.planning import PlannedStep
from langgraph_devsched.device import Placement, placed
from langgraph_devsched.executors.base import CallTimeoutError, Deadline, PlacementError
from langgraph_devsched.executors.lease import current_lease
from langgraph_devsched.executors.local import is_gpu_oom
from langgraph_devsched.tracing import (
    ambient_tracing,
    decision_metadata,
    has_observers,
    with_decision,
    with_observed_latency,
)

R = TypeVar("R")
SyncExecute = Callable[[ToolCallRequest, RunnableConfig], Any]
AsyncExecute = Callable[[ToolCallRequest, RunnableConfig], Awaitable[Any]]


class OomWatcher(BaseCallbackHandler):
    """Notices a CUDA OOM raised inside a tool even when `handle_tool_errors` swallows it."""

    def __init__(self) -> None:
        self.oom = False

    def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        if is_gpu_oom(error):
            self.oom = True


def with_handler(config: RunnableConfig, handler: BaseCallbackHandler) -> RunnableConfig:
    """``config`` with one more callback handler (lists and managers both)."""
    callbacks = config.get("callbacks")
    if callbacks is None:
        new: Any = [handler]
    elif isinstance(callbacks, list):
        new = [*callbacks, handler]
    else:
        new = callbacks.copy()
        new.add_handler(handler, inherit=False)
    return patch_config(config, callbacks=new)


def is_sync_only(tool: BaseTool | None) -> bool:
    """True for a tool whose async run is its sync code in a thread (``@tool`` on a def)."""
    if tool is None:
        return False
    if "coroutine" in type(tool).model_fields:
        return getattr(tool, "coroutine", None) is None
    return type(tool)._arun is BaseTool._arun


def spawn(fn: Callable[[], R]) -> Future[R]:
    """Run ``fn`` in a daemon thread of its own (a hung tool never takes a pool's slot)."""
    future: Future[R] = Future()
    ctx = contextvars.copy_context()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(ctx.run(fn))
        except BaseException as exc:  # handed to the waiter
            future.set_exception(exc)

    threading.Thread(target=target, name="devsched-tool", daemon=True).start()
    return future


class CallRunner:
    """Runs the planned calls of a node: one instance per `DeviceToolNode`."""

    def __init__(
        self,
        *,
        impls: Mapping[tuple[str, str], BaseTool],
        timeouts: Mapping[str, float],
        call_timeout_s: float | None,
        handle_tool_errors: Any,
        close_step: Callable[[PlannedStep], object],
    ) -> None:
        self._impls = impls
        self._timeouts = timeouts
        self._call_timeout_s = call_timeout_s
        self._handle_tool_errors = handle_tool_errors
        self._close_step = close_step

    def timeout_for(self, tool: str) -> float | None:
        """The call's deadline in seconds: its ``timeout_s`` hint, else ``call_timeout_s``."""
        return self._timeouts.get(tool, self._call_timeout_s)

    def deadline_for(self, call: ToolCall) -> Deadline | None:
        """The call's deadline, started now (its whole life: queue, load, run, reruns)."""
        timeout = self.timeout_for(call["name"])
        return None if timeout is None else Deadline(call["name"], timeout, call.get("args"))

    # -- the placed run -------------------------------------------------------------------
    def placed_request(
        self, request: ToolCallRequest, placement: Placement, step: PlannedStep | None = None
    ) -> ToolCallRequest:
        name = request.tool_call["name"]
        impl = self._impls.get((name, "gpu" if placement.on_gpu else "cpu"))
        req = request.override(tool=impl) if impl is not None else request
        remote = getattr(step.execution, "remote_tool", None) if step is not None else None
        if remote is not None and req.tool is not None:  # e.g. Ray: the tool runs in a task
            req = req.override(tool=remote(request.tool_call["id"], req.tool, placement))
        return req

    def tool_config(
        self,
        config: RunnableConfig,
        step: PlannedStep,
        call_id: str,
        placement: Placement,
        watcher: OomWatcher | None,
    ) -> RunnableConfig:
        """The tool run's config: decision metadata and tags, plus the OOM watcher.

        ``devsched.observed_ms`` is exact up front on the simulated testbed; elsewhere a
        callback measures the tool run and writes it onto the traced run as it ends.
        """
        if not step_observed(step, config):  # nobody would see it
            return with_handler(config, watcher) if watcher is not None else config
        observed = step.execution.observed_ms(call_id)
        cfg = with_decision(config, *_step_metadata(step, call_id, placement, observed))
        if observed is None:
            cfg = with_observed_latency(cfg)
        return with_handler(cfg, watcher) if watcher is not None else cfg

    def _prepared(
        self, step: PlannedStep, request: ToolCallRequest, config: RunnableConfig, p: Placement
    ) -> tuple[ToolCallRequest, RunnableConfig, OomWatcher | None]:
        req = self.placed_request(request, p, step)
        watcher = OomWatcher() if p.on_gpu else None
        return (
            req,
            self.tool_config(config, step, request.tool_call["id"] or "", p, watcher),
            watcher,
        )

    # -- sync -----------------------------------------------------------------------------
    def run(
        self,
        step: PlannedStep,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: SyncExecute,
    ) -> Any:
        """Run one planned call: place it, call ``execute(request, tool_config)`` under that
        placement (OOM → CPU fallback, deadline, release on every path), answer errors."""
        call = request.tool_call
        deadline = self.deadline_for(call)

        def run(placement: Placement) -> tuple[Any, bool]:
            if deadline is not None:
                deadline.check()  # past it already (a rerun after a long first run): no run
            req, cfg, watcher = self._prepared(step, request, config, placement)
            with placed(placement):
                if deadline is None:
                    result = execute(req, cfg)
                else:
                    result = self._wait_thread(step, deadline, lambda: execute(req, cfg))
            return result, bool(watcher and watcher.oom)

        try:
            return step.execution.run_sync(call["id"] or "", run, deadline)
        except PlacementError as exc:
            return self.refused(step, call, config, exc)
        except CallTimeoutError as exc:
            return self.timeout_answer(call, exc)

    def _wait_thread(self, step: PlannedStep, deadline: Deadline, fn: Callable[[], Any]) -> Any:
        work = spawn(fn)
        try:
            return work.result(deadline.remaining())
        except TimeoutError:
            if work.done():  # the tool itself raised TimeoutError
                return work.result()
            self._outlive(step, work)
            raise deadline.error() from None

    def _outlive(self, step: PlannedStep, work: Future[Any]) -> None:
        lease = current_lease()
        if lease is not None:
            lease.outlive(work, then=lambda: self._close_step(step))

    # -- async ----------------------------------------------------------------------------
    async def arun(
        self,
        step: PlannedStep,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: AsyncExecute,
        sync_execute: SyncExecute | None = None,
    ) -> Any:
        """`run` for async execution (GPU queue waits do not block the loop).

        ``sync_execute``, given for a sync-only tool, runs it in a thread of its own when
        the call holds a device or has a deadline: cancelling the caller then leaves the
        device held until that thread returns.
        """
        call = request.tool_call
        deadline = self.deadline_for(call)

        async def run(placement: Placement) -> tuple[Any, bool]:
            if deadline is not None:
                deadline.check()  # past it already (a rerun after a long first run): no run
            req, cfg, watcher = self._prepared(step, request, config, placement)
            with placed(placement):
                lease = current_lease()
                holds = lease is not None and (lease.holding or placement.on_gpu)
                threaded = sync_execute is not None and (deadline is not None or holds)
                if threaded:
                    assert sync_execute is not None
                    fn = sync_execute
                    result = await self._await_thread(step, deadline, spawn(lambda: fn(req, cfg)))
                elif deadline is not None:
                    result = await _await_task(deadline, execute(req, cfg))
                else:
                    result = await execute(req, cfg)
            return result, bool(watcher and watcher.oom)

        try:
            return await step.execution.run_async(call["id"] or "", run, deadline)
        except PlacementError as exc:
            return self.refused(step, call, config, exc)
        except CallTimeoutError as exc:
            return self.timeout_answer(call, exc)

    async def _await_thread(
        self, step: PlannedStep, deadline: Deadline | None, work: Future[Any]
    ) -> Any:
        waited = asyncio.wrap_future(work)
        left = None if deadline is None else deadline.remaining()
        try:
            done, _ = await asyncio.wait({waited}, timeout=left)
        except asyncio.CancelledError:
            if not work.done():
                self._outlive(step, work)
            raise
        if not done:
            self._outlive(step, work)
            assert deadline is not None
            raise deadline.error()
        return waited.result()

    # -- answers --------------------------------------------------------------------------
    def refused(
        self, step: PlannedStep, call: ToolCall, config: RunnableConfig, exc: PlacementError
    ) -> ToolMessage:
        """The answer for a call that can run nowhere; traced as a failed tool run with the
        same ``devsched.*`` keys (device ``none``, its cause as ``devsched.fallback``)."""
        message = placement_error_message(call, exc)
        if step_observed(step, config):
            call_id = call["id"] or ""
            nowhere = Placement(step.planned[call_id].option, "none", exc.cause)
            meta, tags = _step_metadata(step, call_id, nowhere, 0.0, {"devsched.refused": str(exc)})
            manager = get_callback_manager_for_config(with_decision(config, meta, tags))
            run = manager.on_tool_start(
                {"name": call["name"]},
                str(call.get("args")),
                name=call["name"],
                inputs=call.get("args"),
            )
            run.on_tool_error(exc)
        return message

    def timeout_answer(self, call: ToolCall, exc: CallTimeoutError) -> ToolMessage:
        """The error answer for a call past its deadline, as ``handle_tool_errors`` says
        (``False``, or error types that exclude it: raised)."""
        flag = self._handle_tool_errors
        if not flag:
            raise exc
        if isinstance(flag, tuple) and not isinstance(exc, flag):
            raise exc
        if isinstance(flag, type) and not isinstance(exc, flag):
            raise exc
        if isinstance(flag, str):
            content = flag
        elif callable(flag) and not isinstance(flag, type):
            content = str(flag(exc))
        else:
            content = exc.message
        return ToolMessage(
            content=content, name=call["name"], tool_call_id=call["id"], status="error"
        )


def step_observed(step: PlannedStep, config: RunnableConfig) -> bool:
    """True when a run started with ``config`` would be seen (ambient tracing read once per
    step: env and context do not change within one)."""
    if step.ambient_tracing is None:
        step.ambient_tracing = ambient_tracing()
    return has_observers(config, ambient=step.ambient_tracing)


def _step_metadata(
    step: PlannedStep,
    call_id: str,
    placement: Placement,
    observed_ms: float | None,
    extra: dict[str, object] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The ``devsched.*`` metadata and tags of one call's traced run."""
    decision = step.report.decision
    return decision_metadata(
        placement,
        scheduler=decision.scheduler or step.report.scheduler,
        reason=decision.reason,
        predicted_ms=decision.predicted_ms.get(call_id),
        observed_ms=observed_ms,
        extra={"devsched.probe": decision.probe, **_residency_metadata(placement),
               **step.trace, **(extra or {})},
    )


def _residency_metadata(placement: Placement) -> dict[str, object]:
    """``devsched.model``, ``devsched.model_warm`` and ``devsched.evicted`` of a call on a
    resident model (nothing otherwise)."""
    if placement.model is None:
        return {}
    out: dict[str, object] = {"devsched.model": placement.model}
    if placement.warm is not None:
        out["devsched.model_warm"] = placement.warm
    if placement.evicted:
        out["devsched.evicted"] = list(placement.evicted)
    return out


async def _await_task(deadline: Deadline, coro: Awaitable[Any]) -> Any:
    """Await ``coro`` until ``deadline``; past it, cancel it and raise its
    `CallTimeoutError` (a `TimeoutError` the tool raises itself stays its own)."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline.remaining())
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task})
        raise deadline.error()
    return task.result()


def placement_error_message(call: ToolCall, exc: PlacementError) -> ToolMessage:
    """The answer for a call that can run on no device its hints allow."""
    return ToolMessage(
        content=f"Error: {exc}", name=call["name"], tool_call_id=call["id"], status="error"
    )
