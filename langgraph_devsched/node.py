"""`DeviceToolNode`: a drop-in `ToolNode` that schedules each step's tool calls on devices.

>>> from langchain_core.messages import AIMessage
>>> from langchain_core.tools import tool
>>> @tool
... def shout(text: str) -> str:
...     '''Upper-case a text.'''
...     return text.upper()
>>> from langgraph.graph import START, MessagesState, StateGraph
>>> graph = (StateGraph(MessagesState).add_node("tools", DeviceToolNode([shout]))
...          .add_edge(START, "tools").compile())
>>> msg = AIMessage("", tool_calls=[{"name": "shout", "args": {"text": "hi"}, "id": "1"}])
>>> graph.invoke({"messages": [msg]})["messages"][-1].content
'HI'
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as create_tool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel

from langgraph_devsched.aio import threaded_wrapper
from langgraph_devsched.device import Placement, injected_device_args, placed
from langgraph_devsched.executors.base import Backend, PlacementError, PlannedCall, StepExecution
from langgraph_devsched.executors.local import LocalBackend, is_gpu_oom
from langgraph_devsched.executors.simulated import SimulatedBackend
from langgraph_devsched.hints import ToolDeviceSpec, resolve_specs
from langgraph_devsched.options import DeviceOption, FallbackCause
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerView
from langgraph_devsched.schedulers.registry import make_scheduler
from langgraph_devsched.schedulers.static import StaticHintScheduler, constrained
from langgraph_devsched.testbed import SimulatedTestbed
from langgraph_devsched.tracing import (
    ambient_tracing,
    decision_metadata,
    has_observers,
    takes_config,
    with_decision,
    with_observed_latency,
)

logger = logging.getLogger(__name__)

InputType = Literal["list", "dict", "tool_calls"]
L = TypeVar("L", threading.Lock, asyncio.Lock)
DEFAULT_SCHEDULER = "monitor"


@dataclass
class StepReport:
    """One scheduled step: the batch, the decision actually applied, and what happened."""

    batch: Batch
    decision: Decision
    scheduler: str
    fallbacks: dict[str, FallbackCause] = field(default_factory=dict)
    """Per call id, why the applied option differs from the scheduler's answer."""
    record: StepRecord | None = None


@dataclass(eq=False)
class _Step:
    report: StepReport
    execution: StepExecution
    planned: dict[str, PlannedCall]
    finished: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    ambient_tracing: bool | None = None
    key: tuple[str, ...] = ()


_STEP: contextvars.ContextVar[_Step | None] = contextvars.ContextVar("devsched_step", default=None)


class _OomWatcher(BaseCallbackHandler):
    """Notices a CUDA OOM raised inside a tool even when `handle_tool_errors` swallows it."""

    def __init__(self) -> None:
        self.oom = False

    def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        if is_gpu_oom(error):
            self.oom = True


def _with_handler(config: RunnableConfig, handler: BaseCallbackHandler) -> RunnableConfig:
    callbacks = config.get("callbacks")
    if callbacks is None:
        new: Any = [handler]
    elif isinstance(callbacks, list):
        new = [*callbacks, handler]
    else:
        new = callbacks.copy()
        new.add_handler(handler, inherit=False)
    return patch_config(config, callbacks=new)


def pending_step_calls(messages: Sequence[Any], call_id: str | None) -> list[ToolCall] | None:
    """The calls of the AIMessage that made ``call_id``, less those already answered.

    >>> ai = AIMessage("", tool_calls=[{"name": "a", "args": {}, "id": "1"},
    ...                                {"name": "b", "args": {}, "id": "2"}])
    >>> [c["id"] for c in pending_step_calls([ai], "2")]
    ['1', '2']
    """
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AIMessage) and any(
            c.get("id") == call_id for c in message.tool_calls
        ):
            return [
                c
                for c in message.tool_calls
                if c.get("id") == call_id or c.get("id") not in answered
            ]
    return None


class DeviceToolNode(ToolNode):
    """`ToolNode` plus a joint device decision per step.

    Same constructor and behaviour as `langgraph.prebuilt.ToolNode`; the keyword-only
    scheduling options are:

    * ``scheduler``: a `Scheduler` or a registered name (default ``"static"``).
    * ``hints``: per-tool `ToolDeviceSpec` fields (a mapping or a YAML/JSON file path); tools
      may also declare hints in code with `device_hints`. Tools without hints run on the CPU
      side as they are.
    * ``backend``: where calls run (default: this machine, GPU detected through torch); or
      ``testbed``: a `SimulatedTestbed` to run on simulated devices with exact virtual times.
    * ``monitor``: an object with ``record_step(batch, decision, record, device_state)`` and
      ``snapshot()``; its snapshot is what schedulers observe.
    * ``on_step``: called with a `StepReport` after every step.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: Any = None,
        messages_key: str = "messages",
        wrap_tool_call: Any = None,
        awrap_tool_call: Any = None,
        scheduler: Scheduler | str | None = None,
        hints: Mapping[str, Mapping[str, Any] | ToolDeviceSpec] | str | Path | None = None,
        backend: Backend | None = None,
        testbed: SimulatedTestbed | None = None,
        monitor: Any = None,
        on_step: Callable[[StepReport], None] | None = None,
        history: int = 100,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if handle_tool_errors is not None:
            kwargs["handle_tool_errors"] = handle_tool_errors
        super().__init__(
            tools,
            name=name,
            tags=tags,
            messages_key=messages_key,
            wrap_tool_call=wrap_tool_call,
            awrap_tool_call=awrap_tool_call,
            **kwargs,
        )
        originals = {
            t.name if isinstance(t, BaseTool) else getattr(t, "__name__", ""): t for t in tools
        }
        by_name = {n: originals.get(n, t) for n, t in self.tools_by_name.items()}
        self.device_specs: dict[str, ToolDeviceSpec] = resolve_specs(by_name, hints)
        if backend is not None and testbed is not None:
            raise ValueError("give either backend= or testbed=, not both")
        if scheduler is None:
            scheduler = DEFAULT_SCHEDULER
        self.scheduler: Scheduler = (
            make_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
        )
        self._fallback_scheduler = StaticHintScheduler()
        self.backend: Backend = backend or (
            SimulatedBackend(testbed) if testbed is not None else LocalBackend()
        )
        self.monitor = monitor
        self._on_step = on_step
        self.history: deque[StepReport] = deque(maxlen=history)
        self._device_args = {n: injected_device_args(t) for n, t in self.tools_by_name.items()}
        self._impls = self._build_impls()
        self._steps: OrderedDict[tuple[str, ...], _Step] = OrderedDict()
        self._steps_lock = threading.Lock()
        self._plan_locks: OrderedDict[tuple[str, ...], threading.Lock] = OrderedDict()
        self._aplan_locks: OrderedDict[tuple[str, ...], asyncio.Lock] = OrderedDict()
        self._scheduler_takes_config = takes_config(self.scheduler.decide)
        if wrap_tool_call is not None and awrap_tool_call is None:
            # upstream runs a sync wrapper on the event loop under ainvoke, one call at a time
            self._awrap_tool_call = threaded_wrapper(wrap_tool_call)

    # -- construction helpers --------------------------------------------------------------
    def _build_impls(self) -> dict[tuple[str, str], BaseTool]:
        impls: dict[tuple[str, str], BaseTool] = {}
        for name, spec in self.device_specs.items():
            for side, impl in (("cpu", spec.cpu_impl), ("gpu", spec.gpu_impl)):
                if impl is None:
                    continue
                t = impl if isinstance(impl, BaseTool) else create_tool(name, impl)  # type: ignore[call-overload]
                impls[(name, side)] = t
                self._device_args.setdefault(name, ())
                self._device_args[name] = tuple(
                    dict.fromkeys(self._device_args[name] + injected_device_args(t))
                )
        return impls

    # -- planning ---------------------------------------------------------------------------
    def _step_calls(
        self, tool_calls: list[ToolCall], input: Any, config: RunnableConfig | None = None
    ) -> list[ToolCall]:
        """All calls of the step: for a single Send-dispatched call, its AIMessage's calls."""
        if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
            state = input.get("state")
        elif (
            len(tool_calls) == 1
            and config is not None
            and isinstance(input, list)
            and isinstance(input[-1], dict)
            and input[-1].get("type") == "tool_call"
        ):
            state = self._extract_state(input, config)  # Send("tools", [call]) reads the state
        else:
            return tool_calls
        messages = (
            state.get(self._messages_key)
            if isinstance(state, dict)
            else getattr(state, self._messages_key, None)
        )
        return pending_step_calls(messages or [], tool_calls[0].get("id")) or tool_calls

    def _batch(self, calls: list[ToolCall]) -> Batch:
        items = []
        for i, call in enumerate(calls):
            spec = self.device_specs.get(call["name"])
            if spec is None:
                continue  # unknown tool: ToolNode answers it with its own error message
            items.append((call.get("id") or f"#{i}", call["name"], spec))
        return Batch.of(items)

    def _validated(
        self, batch: Batch, decision: Decision, gpu: bool
    ) -> tuple[Decision, dict[str, FallbackCause]]:
        mapping: dict[str, DeviceOption] = {}
        fallbacks: dict[str, FallbackCause] = {}
        for call in batch.calls:
            option = decision.mapping.get(call.call_id)
            if option not in call.spec.allowed_options():
                fallbacks[call.call_id] = "invalid_decision"
                logger.warning(
                    "scheduler %s gave %r for call %s (%s); allowed: %s; using the hints",
                    self.scheduler.name,
                    option,
                    call.call_id,
                    call.tool,
                    ", ".join(call.spec.allowed_options()),
                )
                option = constrained(call.spec, call.spec.preferred or "gpu_queued", gpu)
            mapping[call.call_id] = option
        if not fallbacks and len(mapping) == len(decision.mapping):
            return decision, fallbacks
        return Decision(
            mapping=mapping,
            reason=decision.reason,
            predicted_ms=decision.predicted_ms,
            probe=decision.probe,
            fallback=decision.fallback or ("invalid_decision" if fallbacks else None),
            llm_calls=decision.llm_calls,
            scheduler=decision.scheduler,
        ), fallbacks

    def _view(self) -> SchedulerView:
        observations = self.monitor.snapshot() if self.monitor is not None else None
        return SchedulerView(device=self.backend.device_state(), observations=observations)

    def _fallback_decision(self, batch: Batch, view: SchedulerView, exc: BaseException) -> Decision:
        logger.warning("scheduler %s failed (%s); using static hints", self.scheduler.name, exc)
        base = self._fallback_scheduler.decide(batch, view)
        return Decision(
            mapping=base.mapping,
            reason=f"scheduler error: {type(exc).__name__}: {exc}",
            fallback="scheduler_error",
            scheduler=self.scheduler.name,
        )

    def _begin(self, batch: Batch, view: SchedulerView | None, decision: Decision) -> _Step:
        gpu = view.device.gpu_available if view is not None else True
        decision, fallbacks = self._validated(batch, decision, gpu)
        if decision.fallback == "scheduler_error":
            fallbacks = dict.fromkeys(batch.call_ids, "scheduler_error")
        planned = {
            c.call_id: PlannedCall(c.call_id, c.tool, decision.mapping[c.call_id], c.spec)
            for c in batch.calls
        }
        execution = self.backend.start_step(list(planned.values()))
        report = StepReport(batch, decision, self.scheduler.name, fallbacks)
        return _Step(report, execution, planned)

    def _cached(self, key: tuple[str, ...]) -> _Step | None:
        with self._steps_lock:
            return self._steps.get(key)

    @staticmethod
    def _step_key(batch: Batch, config: RunnableConfig | None) -> tuple[str, ...]:
        """A step is its calls within one conversation: two threads reusing call ids (a
        scripted model, say) at the same time never share a plan."""
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        return ("" if thread is None else str(thread), *batch.call_ids)

    def _remember(self, key: tuple[str, ...], step: _Step) -> _Step:
        with self._steps_lock:
            existing = self._steps.get(key)
            if existing is not None:
                return existing
            step.key = key
            self._steps[key] = step
            while len(self._steps) > 64:
                self._steps.popitem(last=False)
            return step

    def _decide(self, batch: Batch, view: SchedulerView, config: RunnableConfig | None) -> Decision:
        if config is not None and self._scheduler_takes_config:
            return self.scheduler.decide(batch, view, config=config)  # type: ignore[call-arg]
        return self.scheduler.decide(batch, view)

    def _plan(self, input: Any, config: RunnableConfig | None = None) -> _Step | None:
        tool_calls, _ = self._parse_input(input)
        return self.plan_calls(self._step_calls(tool_calls, input, config), config)

    async def _aplan(self, input: Any, config: RunnableConfig | None = None) -> _Step | None:
        tool_calls, _ = self._parse_input(input)
        return await self.aplan_calls(self._step_calls(tool_calls, input, config), config)

    def plan_calls(
        self, calls: list[ToolCall], config: RunnableConfig | None = None
    ) -> _Step | None:
        """Plan (or fetch the plan of) the step made of ``calls``: one decision for all of them.

        Concurrent callers for the same calls share one decision (the scheduler is asked
        once). ``config`` is passed to schedulers whose ``decide`` accepts it, so their own
        runs (e.g. an LLM sub-agent) trace as children of the caller's run.
        """
        batch = self._batch(calls)
        if not batch.calls:
            return None
        key = self._step_key(batch, config)
        if (step := self._cached(key)) is not None:
            return step
        with self._plan_lock(key):
            if (step := self._cached(key)) is not None:
                return step
            decision = self._forced(batch, None)  # hints alone may leave no choice
            if decision is not None:  # then no telemetry either (no torch import)
                return self._remember(key, self._begin(batch, None, decision))
            view = self._view()
            decision = self._forced(batch, view)
            if decision is None:
                try:
                    decision = self._decide(batch, view, config)
                except Exception as exc:
                    decision = self._fallback_decision(batch, view, exc)
            return self._remember(key, self._begin(batch, view, decision))

    async def aplan_calls(
        self, calls: list[ToolCall], config: RunnableConfig | None = None
    ) -> _Step | None:
        """`plan_calls` without blocking the event loop (``adecide`` or a worker thread)."""
        batch = self._batch(calls)
        if not batch.calls:
            return None
        key = self._step_key(batch, config)
        if (step := self._cached(key)) is not None:
            return step
        async with self._aplan_lock(key):
            if (step := self._cached(key)) is not None:
                return step
            forced = self._forced(batch, None)
            if forced is not None:
                return self._remember(key, self._begin(batch, None, forced))
            view = self._view()
            forced = self._forced(batch, view)
            if forced is not None:
                return self._remember(key, self._begin(batch, view, forced))
            try:
                adecide = getattr(self.scheduler, "adecide", None)
                if adecide is not None:
                    if config is not None and self._scheduler_takes_config:
                        decision = await adecide(batch, view, config=config)
                    else:
                        decision = await adecide(batch, view)
                elif getattr(self.scheduler, "blocking", False):
                    loop = asyncio.get_running_loop()
                    ctx = contextvars.copy_context()
                    decision = await loop.run_in_executor(
                        None, ctx.run, self._decide, batch, view, config
                    )
                else:
                    decision = self._decide(batch, view, config)
            except Exception as exc:
                decision = self._fallback_decision(batch, view, exc)
            return self._remember(key, self._begin(batch, view, decision))

    def _forced(self, batch: Batch, view: SchedulerView | None) -> Decision | None:
        """The decision when there is none to make: one allowed option per call (hints, or,
        given a ``view``, no GPU and the CPU allowed). The scheduler is not consulted; it
        still observes."""
        gpu = True if view is None else view.device.gpu_available
        mapping: dict[str, DeviceOption] = {}
        for call in batch.calls:
            allowed = call.spec.allowed_options()
            if len(allowed) == 1:
                mapping[call.call_id] = allowed[0]
            elif not gpu and "cpu" in allowed:
                mapping[call.call_id] = "cpu"
            else:
                return None
        reason = "forced: one allowed option per call" + ("" if gpu else " (no GPU)")
        return Decision(mapping=mapping, reason=reason, scheduler=self.scheduler.name)

    def _plan_lock(self, key: tuple[str, ...]) -> threading.Lock:
        return self._lock_for(self._plan_locks, key, threading.Lock)

    def _aplan_lock(self, key: tuple[str, ...]) -> asyncio.Lock:
        return self._lock_for(self._aplan_locks, key, asyncio.Lock)

    def _lock_for(
        self, table: OrderedDict[tuple[str, ...], L], key: tuple[str, ...], new: Callable[[], L]
    ) -> L:
        """The planning lock of one step (most recent 256 kept), so it is decided once."""
        with self._steps_lock:
            lock = table.pop(key, None) or new()
            table[key] = lock
            while len(table) > 256:
                table.popitem(last=False)
            return lock

    def finish_step(self, step: _Step | None) -> None:
        """Close a step once all its calls have answered: record, observe, notify (once)."""
        self._finish(step)

    def _finish(self, step: _Step | None) -> None:
        if step is None or not step.execution.done:
            return
        with step.lock:
            if step.finished:
                return
            step.finished = True
        with self._steps_lock:
            key = step.key
            self._steps.pop(key, None)
            self._plan_locks.pop(key, None)
            self._aplan_locks.pop(key, None)  # an asyncio.Lock may be bound to this loop only
        record = step.execution.record()
        step.report.record = record
        self.history.append(step.report)
        for hook in (self._observe, self._record_monitor, self._notify):
            try:
                hook(step.report, record)
            except Exception:
                logger.exception(
                    "post-step hook %s failed; the step's answers stand", hook.__name__
                )

    def _observe(self, report: StepReport, record: StepRecord) -> None:
        self.scheduler.observe(report.batch, report.decision, record)

    def _record_monitor(self, report: StepReport, record: StepRecord) -> None:
        if self.monitor is not None:
            self.monitor.record_step(
                report.batch, report.decision, record, self.backend.device_state()
            )

    def _notify(self, report: StepReport, record: StepRecord) -> None:
        if self._on_step is not None:
            self._on_step(report)

    # -- ToolNode entry points ----------------------------------------------------------------
    def _func(
        self,
        input: list[AnyMessage] | dict[str, Any] | BaseModel,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        step = self._plan(input, config)
        token = _STEP.set(step)
        try:
            return super()._func(input, config, runtime)
        finally:
            _STEP.reset(token)
            self._finish(step)

    async def _afunc(
        self,
        input: list[AnyMessage] | dict[str, Any] | BaseModel,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        step = await self._aplan(input, config)
        token = _STEP.set(step)
        try:
            return await super()._afunc(input, config, runtime)
        finally:
            _STEP.reset(token)
            self._finish(step)

    # -- per-call execution -----------------------------------------------------------------
    def _placed_request(
        self, request: ToolCallRequest, placement: Placement, step: _Step | None = None
    ) -> ToolCallRequest:
        name = request.tool_call["name"]
        impl = self._impls.get((name, "gpu" if placement.on_gpu else "cpu"))
        req = request.override(tool=impl) if impl is not None else request
        remote = getattr(step.execution, "remote_tool", None) if step is not None else None
        if remote is not None and req.tool is not None:  # e.g. Ray: the tool runs in a task
            req = req.override(tool=remote(request.tool_call["id"], req.tool, placement))
        return req

    def _tool_config(
        self,
        config: RunnableConfig,
        step: _Step,
        call_id: str,
        placement: Placement,
        watcher: _OomWatcher | None,
    ) -> RunnableConfig:
        """The tool run's config: decision metadata and tags, plus the OOM watcher.

        ``devsched.observed_ms`` is exact up front on the simulated testbed; elsewhere a
        callback measures the tool run and writes it onto the traced run as it ends.
        """
        if step.ambient_tracing is None:  # env and context do not change within a step
            step.ambient_tracing = ambient_tracing()
        if not has_observers(config, ambient=step.ambient_tracing):  # nobody would see it
            return _with_handler(config, watcher) if watcher is not None else config
        decision = step.report.decision
        observed = step.execution.observed_ms(call_id)
        meta, tags = decision_metadata(
            placement,
            scheduler=decision.scheduler or step.report.scheduler,
            reason=decision.reason,
            predicted_ms=decision.predicted_ms.get(call_id),
            observed_ms=observed,
            extra={"devsched.probe": decision.probe},
        )
        cfg = with_decision(config, meta, tags)
        if observed is None:
            cfg = with_observed_latency(cfg)
        return _with_handler(cfg, watcher) if watcher is not None else cfg

    def _error_message(self, call: ToolCall, exc: PlacementError) -> ToolMessage:
        return ToolMessage(
            content=f"Error: {exc}", name=call["name"], tool_call_id=call["id"], status="error"
        )

    def run_planned(
        self,
        step: _Step,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: Callable[[ToolCallRequest, RunnableConfig], Any],
    ) -> Any:
        """Run one planned call: place it, call ``execute(request, tool_config)`` under that
        placement (OOM → CPU fallback, release on every path), answer placement errors."""
        call_id = request.tool_call["id"] or ""

        def run(placement: Placement) -> tuple[Any, bool]:
            req = self._placed_request(request, placement, step)
            watcher = _OomWatcher() if placement.on_gpu else None
            cfg = self._tool_config(config, step, call_id, placement, watcher)
            with placed(placement):
                result = execute(req, cfg)
            return result, bool(watcher and watcher.oom)

        try:
            return step.execution.run_sync(call_id, run)
        except PlacementError as exc:
            return self._error_message(request.tool_call, exc)

    async def arun_planned(
        self,
        step: _Step,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: Callable[[ToolCallRequest, RunnableConfig], Awaitable[Any]],
    ) -> Any:
        """`run_planned` for async execution (GPU queue waits do not block the loop)."""
        call_id = request.tool_call["id"] or ""

        async def run(placement: Placement) -> tuple[Any, bool]:
            req = self._placed_request(request, placement, step)
            watcher = _OomWatcher() if placement.on_gpu else None
            cfg = self._tool_config(config, step, call_id, placement, watcher)
            with placed(placement):
                result = await execute(req, cfg)
            return result, bool(watcher and watcher.oom)

        try:
            return await step.execution.run_async(call_id, run)
        except PlacementError as exc:
            return self._error_message(request.tool_call, exc)

    def _execute_tool_sync(
        self, request: ToolCallRequest, input_type: InputType, config: RunnableConfig
    ) -> ToolMessage | Command | list[Command | ToolMessage]:
        step = _STEP.get()
        call_id = request.tool_call.get("id")
        if step is None or call_id not in step.planned or request.tool is None:
            return super()._execute_tool_sync(request, input_type, config)
        return self.run_planned(
            step,
            request,
            config,
            lambda req, cfg: ToolNode._execute_tool_sync(self, req, input_type, cfg),
        )

    async def _execute_tool_async(
        self, request: ToolCallRequest, input_type: InputType, config: RunnableConfig
    ) -> ToolMessage | Command | list[Command | ToolMessage]:
        step = _STEP.get()
        call_id = request.tool_call.get("id")
        if step is None or call_id not in step.planned or request.tool is None:
            return await super()._execute_tool_async(request, input_type, config)
        return await self.arun_planned(
            step,
            request,
            config,
            lambda req, cfg: ToolNode._execute_tool_async(self, req, input_type, cfg),
        )

    def device_args(self, tool_name: str, tool: BaseTool | None = None) -> tuple[str, ...]:
        """Names of the tool's `InjectedDevice` arguments (its CPU/GPU variants included).

        Known tools answer from the table built at construction; a tool swapped in at run
        time (by a wrapper or middleware) is inspected.
        """
        known = self._device_args.get(tool_name, ())
        if tool is None or tool is self.tools_by_name.get(tool_name):
            return known
        if any(tool is self._impls.get((tool_name, side)) for side in ("cpu", "gpu")):
            return known
        return injected_device_args(tool)

    def _inject_tool_args(
        self, tool_call: ToolCall, tool_runtime: ToolRuntime, tool: BaseTool | None = None
    ) -> ToolCall:
        injected = super()._inject_tool_args(tool_call, tool_runtime, tool)
        names = self.device_args(tool_call["name"], tool)
        if not names:
            return injected
        from langgraph_devsched.device import current_device

        device = current_device()
        return {**injected, "args": {**injected["args"], **dict.fromkeys(names, device)}}
