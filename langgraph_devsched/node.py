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
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as create_tool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest, ToolRuntime
from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel

from langgraph_devsched._node.aio import threaded_wrapper
from langgraph_devsched._node.call_runner import CallRunner, is_sync_only
from langgraph_devsched._node.checks import (
    check_testbed_covers,
    node_backend,
    node_scheduler,
    warn_never_fitting,
)
from langgraph_devsched._node.idle import IdleCalibration
from langgraph_devsched._node.lean_step import CPU, lean_backend, plain_tools
from langgraph_devsched._node.planning import (
    PlannedStep,
    StepKey,
    StepPlanner,
    StepReport,
    shared_step_key,
)
from langgraph_devsched._node.preload import Preloader
from langgraph_devsched._node.stream_events import stream_step
from langgraph_devsched._node.words import RequestReader, reads_words
from langgraph_devsched.device import injected_device_args, placed
from langgraph_devsched.executors.base import Backend
from langgraph_devsched.hedging.race import race
from langgraph_devsched.hints import ToolDeviceSpec, resolve_specs
from langgraph_devsched.langsmith_check import check_langsmith
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Scheduler
from langgraph_devsched.testbed import SimulatedTestbed
from langgraph_devsched.tracing import has_observers

__all__ = ["DeviceToolNode", "StepReport", "pending_step_calls"]

logger = logging.getLogger(__name__)

InputType = Literal["list", "dict", "tool_calls"]
DEFAULT_SCHEDULER = "monitor"
_UNSET: Any = object()

_STEP: contextvars.ContextVar[PlannedStep | None] = contextvars.ContextVar(
    "devsched_step", default=None
)
_LIMIT: contextvars.ContextVar[asyncio.Semaphore | None] = contextvars.ContextVar(
    "devsched_max_concurrency", default=None
)


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

    * ``scheduler``: a `Scheduler` or a registered name (default ``"monitor"``).
    * ``hints``: per-tool `ToolDeviceSpec` fields (a mapping or a YAML/JSON file path); tools
      may also declare hints in code with `device_hints`. Tools without hints run on the CPU
      side as they are.
    * ``backend``: where calls run (default: this machine, GPU detected through torch); or
      ``testbed``: a `SimulatedTestbed` to run on simulated devices with exact virtual times.
    * ``monitor``: an object with ``record_step(batch, decision, record, device_state)`` and
      ``snapshot()``; its snapshot is what schedulers observe.
    * ``on_step``: called with a `StepReport` after every step.
    * ``call_timeout_s``: answer a hinted call with an error `ToolMessage` after this many
      seconds (a tool's ``timeout_s`` hint overrides it). An async tool is cancelled; a sync
      tool's thread runs on, and the device it holds stays reserved until it returns.
    * ``idle_calibration``: between async steps, re-run a recent call of a side-effect-free
      (``idempotent``) tool on a side its scheduler never measured, cancelled as soon as the
      next step arrives (`langgraph_devsched._node.idle`; off by default).
    * ``stream_decisions``: write each step's decision and outcome to LangGraph's custom
      stream (``stream_mode="custom"``; `langgraph_devsched._node.stream_events`). Off by default:
      the custom stream then carries only what the tools write, as with `ToolNode`.
    * ``preload``: between steps, while the agent's LLM thinks, run the model loads the
      scheduler's ``preloads`` asks for (the monitor policy's), and during a step the loads
      its decision starts beside the step's calls (``Decision.background``), in the background
      (`langgraph_devsched._node.preload`; on by default where the scheduler has ``preloads``, the
      backend can load between steps (the local backend) and a tool names a resident model).
      ``preload=False`` turns it off.

    ``config["max_concurrency"]`` bounds how many calls of a step run at once, under
    ``invoke`` and ``ainvoke`` alike.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable[..., Any]],
        *,
        name: str = "tools",
        tags: list[str] | None = None,
        handle_tool_errors: Any = _UNSET,
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
        call_timeout_s: float | None = None,
        idle_calibration: bool = False,
        stream_decisions: bool = False,
        preload: bool = True,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if handle_tool_errors is not _UNSET:  # an explicit None is ToolNode's too
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
        if call_timeout_s is not None and not (0 < call_timeout_s < float("inf")):
            raise ValueError(
                f"call_timeout_s must be a positive number of seconds or None, got "
                f"{call_timeout_s!r}"
            )
        originals = {
            t.name if isinstance(t, BaseTool) else getattr(t, "__name__", ""): t for t in tools
        }
        by_name = {n: originals.get(n, t) for n, t in self.tools_by_name.items()}
        self.device_specs: dict[str, ToolDeviceSpec] = resolve_specs(by_name, hints)
        self.backend: Backend = node_backend(backend, testbed)
        check_testbed_covers(self.device_specs, self.backend)
        self.scheduler: Scheduler = node_scheduler(scheduler, self.backend, DEFAULT_SCHEDULER)
        self.monitor = monitor
        self.call_timeout_s = call_timeout_s
        self.stream_decisions = stream_decisions
        warn_never_fitting(self.device_specs, self.backend)
        check_langsmith()  # tracing on, LangSmith unreachable: one line, tracing off
        self._on_step = on_step
        self.history: deque[StepReport] = deque(maxlen=history)
        self._device_args = {n: injected_device_args(t) for n, t in self.tools_by_name.items()}
        self._impls = self._build_impls()
        # plain tools on the local CPU run lean: nothing to place, reserve or fall back from
        self._plain = plain_tools(self.device_specs, {n for n, _ in self._impls},
                                  self._device_args) if lean_backend(
            self.backend, call_timeout_s) else frozenset()
        self.planner = StepPlanner(
            scheduler=self.scheduler,
            backend=self.backend,
            monitor=monitor,
            on_close=(self._preloaded, self._keep, self._observe, self._record_monitor,
                      self._notify),
        )
        self.runner = CallRunner(
            impls=self._impls,
            timeouts={n: s.timeout_s for n, s in self.device_specs.items() if s.timeout_s},
            call_timeout_s=call_timeout_s,
            handle_tool_errors=self._handle_tool_errors,
            close_step=self.planner.close,
        )
        self.idle: IdleCalibration | None = None
        """Idle-time runs between async steps (``idle_calibration=True``; `idle`)."""
        if idle_calibration:
            self.idle = IdleCalibration(
                scheduler=self.scheduler, backend=self.backend, tools=self.tools_by_name,
                specs=self.device_specs, device_args=self._device_args,
                observe=self._observe_idle, impls=self._impls)
        declare = getattr(self.scheduler, "declare_tools", None)
        if callable(declare):  # declared models may be warmed before their first use
            declare(self.device_specs)
        self.words: RequestReader | None = None
        """Each new request read in the background by a scheduler that reads words
        (`_node.words`; None for one that does not)."""
        if reads_words(self.scheduler):
            self.words = RequestReader(self.scheduler, [
                (n, str(getattr(t, "description", "") or "")) for n, t in
                self.tools_by_name.items()], on_forecast=self._forecast_came)
        self.preload: Preloader | None = None
        """Loads between steps (``preload``; None when off or where it does not apply)."""
        if preload and callable(getattr(self.scheduler, "preloads", None)) and callable(
                getattr(self.backend, "preload_model", None)) and any(
                s.model_name(n) for n, s in self.device_specs.items()):  # some tool has one
            self.preload = Preloader(scheduler=self.scheduler, backend=self.backend)
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

    # -- which calls form the step ------------------------------------------------------------
    def _step_calls(
        self, tool_calls: list[ToolCall], input: Any, config: RunnableConfig | None = None
    ) -> tuple[list[ToolCall], bool]:
        """All calls of the step, and whether other tasks share it: a single Send-dispatched
        call is planned with its AIMessage's other pending calls."""
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
            return tool_calls, False
        messages = (
            state.get(self._messages_key)
            if isinstance(state, dict)
            else getattr(state, self._messages_key, None)
        )
        calls = pending_step_calls(messages or [], tool_calls[0].get("id"))
        return (calls, True) if calls else (tool_calls, False)

    def _batch(self, calls: list[ToolCall]) -> Batch:
        items = []
        for i, call in enumerate(calls):
            spec = self.device_specs.get(call["name"])
            if spec is None:
                continue  # unknown tool: ToolNode answers it with its own error message
            items.append((call.get("id") or f"#{i}", call["name"], spec))
        return Batch.of(items)

    # -- planning -----------------------------------------------------------------------------
    def _own_step(
        self, input: Any, config: RunnableConfig | None
    ) -> tuple[Batch, StepKey | None, list[str]]:
        """This invocation's step (its batch, and the key it shares with the step's other
        `Send` tasks, if any) and the ids of the calls this invocation runs itself."""
        tool_calls, _ = self._parse_input(input)
        calls, shared = self._step_calls(tool_calls, input, config)
        batch = self._batch(calls)
        key = shared_step_key(batch, config) if shared and batch.calls else None
        return batch, key, [c.get("id") or "" for c in tool_calls]

    def _lean_step(
        self, batch: Batch, key: StepKey | None, config: RunnableConfig
    ) -> PlannedStep | None:
        """The step run lean (`lean_step`) when it is its caller's alone and every call is
        plain; else None (planned as usual). Its calls skip the node's per-call work
        (``step.plain``) unless a callback or tracer would see their runs (then they take
        the general path, which gives each run its decision metadata)."""
        if key is not None or not self._plain or not all(
                c.tool in self._plain for c in batch.calls):
            return None
        step = self.planner.plan_lean(batch)
        if step is not None:
            step.plain = not has_observers(config)
        return step

    def plan_calls(
        self, calls: list[ToolCall], config: RunnableConfig | None = None
    ) -> PlannedStep | None:
        """Plan (or fetch the plan of) the step made of ``calls``: one decision for all.

        The tasks of one graph superstep that pass the same calls share one decision (the
        scheduler is asked once); other callers, and other invocations, get their own.
        ``config`` is passed to schedulers whose ``decide`` accepts it, so their own runs
        (e.g. an LLM sub-agent) trace as children of the caller's run.
        """
        batch = self._batch(calls)
        if not batch.calls:
            return None
        return self.planner.plan(batch, config, shared_step_key(batch, config))

    async def aplan_calls(
        self, calls: list[ToolCall], config: RunnableConfig | None = None
    ) -> PlannedStep | None:
        """`plan_calls` without blocking the event loop (``adecide`` or a worker thread)."""
        batch = self._batch(calls)
        if not batch.calls:
            return None
        return await self.planner.aplan(batch, config, shared_step_key(batch, config))

    def close(self) -> None:
        """Free what the backend keeps between steps (resident models: their instances and
        their weights in the VRAM ledger). The node stays usable: models load again."""
        if self.preload is not None:  # a load in flight ends first
            self.preload.close()
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()

    def read_request(self, request: Any) -> bool:
        """Hand the node a user's new request as soon as it arrives (a `StateGraph` calls
        it at the graph's entry, before the agent's model): its text, or messages / a state
        whose newest human message is the request. A scheduler that reads words forecasts
        from it in the background (`_node.words`); the node also reads the newest human
        message when a tool step arrives. True when a reading started."""
        if self.words is None:
            return False
        if isinstance(request, str):
            return self.words.read_text(request)
        return self.words.read(request)

    def _forecast_came(self) -> None:
        if self.preload is not None:  # idle: the loads between steps are asked again
            self.preload.again()

    def _read_words(self, input: Any, step: PlannedStep | None) -> None:
        """Before a step: a new request read; after planning: the forecast in force."""
        if self.words is None:
            return
        if step is None:
            self.words.read(input)
        else:
            step.report.words = self.words.in_force(c.tool for c in step.report.batch.calls)

    def finish_step(self, step: PlannedStep | None) -> None:
        """Close a step once all its calls have answered: record, observe, notify (once)."""
        self.planner.close(step)

    def _preloaded(self, report: StepReport, record: StepRecord) -> None:
        if self.preload is not None:
            self.preload.record(record)

    def _keep(self, report: StepReport, record: StepRecord) -> None:
        self.history.append(report)

    def _observe(self, report: StepReport, record: StepRecord) -> None:
        self.scheduler.observe(report.batch, report.decision, record)

    def _record_monitor(self, report: StepReport, record: StepRecord) -> None:
        if self.monitor is not None:
            self.monitor.record_step(
                report.batch, report.decision, record, self.backend.device_state()
            )

    def _observe_idle(self, batch: Batch, decision: Any, record: StepRecord) -> None:
        self.scheduler.observe(batch, decision, record)
        if self.monitor is not None:
            self.monitor.record_step(batch, decision, record, self.backend.device_state())

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
        if self.preload is not None:
            self.preload.arrive()
        try:
            self._read_words(input, None)
            batch, key, own = self._own_step(input, config)
            step = (self._lean_step(batch, key, config) or self.planner.plan(batch, config, key)
                    if batch.calls else None)
            self._read_words(input, step)
            self._traced_preloads(step)
            stream_step(step, self._writer(runtime))  # stream_mode="custom": the decision
            token = _STEP.set(step)
            try:
                return super()._func(input, config, runtime)
            finally:
                _STEP.reset(token)
                self._close_own(step, own)
                stream_step(step, self._writer(runtime))  # ... and, once closed, the outcome
        finally:
            if self.preload is not None:
                self.preload.leave()

    async def _afunc(
        self,
        input: list[AnyMessage] | dict[str, Any] | BaseModel,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        if self.preload is not None:
            self.preload.arrive()
        try:
            return await self._astep(input, config, runtime)
        finally:
            if self.preload is not None:
                self.preload.leave()

    async def _astep(
        self,
        input: list[AnyMessage] | dict[str, Any] | BaseModel,
        config: RunnableConfig,
        runtime: Runtime,
    ) -> Any:
        if self.idle is not None:  # a step arrived: the idle run stops first
            await self.idle.stop()
        self._read_words(input, None)
        batch, key, own = self._own_step(input, config)
        step = (self._lean_step(batch, key, config)
                or await self.planner.aplan(batch, config, key) if batch.calls else None)
        self._read_words(input, step)
        self._traced_preloads(step)
        stream_step(step, self._writer(runtime))  # stream_mode="custom": the decision
        token = _STEP.set(step)
        limit = config.get("max_concurrency")
        limit_token = _LIMIT.set(asyncio.Semaphore(limit) if limit else None)
        try:
            return await super()._afunc(input, config, runtime)
        finally:
            _LIMIT.reset(limit_token)
            _STEP.reset(token)
            self._close_own(step, own)
            stream_step(step, self._writer(runtime))  # ... and, once closed, the outcome
            if self.idle is not None and batch.calls:
                self.idle.remember(self._parse_input(input)[0])
                self.idle.start()

    def _writer(self, runtime: Runtime) -> Any:
        """The custom stream's writer when decisions go there (``stream_decisions``)."""
        return getattr(runtime, "stream_writer", None) if self.stream_decisions else None

    def _traced_preloads(self, step: PlannedStep | None) -> None:
        """The loads run since the previous step, on the step's traced runs; then the loads
        its decision starts beside it (``Decision.background``)."""
        if self.preload is None or step is None:
            return
        if not step.plain:
            step.trace = self.preload.trace()
        if step.report.decision.background:
            self.preload.beside(step.report.decision.background)

    def _close_own(self, step: PlannedStep | None, own: list[str]) -> None:
        """After this invocation: its calls that never started (cancelled first) are
        recorded as such, and the step closes if nothing else of it still runs."""
        if step is None:
            return
        if step.seconds:
            own = own + [step.seconds[c] for c in own if c in step.seconds]  # unraced
        try:
            step.execution.close_unstarted(
                own, "not run: its invocation ended (cancelled or answered) before it started"
            )
        finally:
            self.planner.close(step)

    async def _arun_one(
        self, call: ToolCall, input_type: InputType, tool_runtime: ToolRuntime
    ) -> ToolMessage | Command | list[Command | ToolMessage]:
        limit = _LIMIT.get()
        if limit is None:
            return await super()._arun_one(call, input_type, tool_runtime)
        async with limit:
            return await super()._arun_one(call, input_type, tool_runtime)

    # -- per-call execution -----------------------------------------------------------------
    def run_planned(
        self,
        step: PlannedStep,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: Callable[[ToolCallRequest, RunnableConfig], Any],
    ) -> Any:
        """Run one planned call: place it, call ``execute(request, tool_config)`` under that
        placement (OOM → CPU fallback, deadline, release on every path), answer placement
        errors and timeouts."""
        try:
            return self.runner.run(step, request, config, execute)
        finally:
            self.planner.close(step)

    async def arun_planned(
        self,
        step: PlannedStep,
        request: ToolCallRequest,
        config: RunnableConfig,
        execute: Callable[[ToolCallRequest, RunnableConfig], Awaitable[Any]],
        sync_execute: Callable[[ToolCallRequest, RunnableConfig], Any] | None = None,
    ) -> Any:
        """`run_planned` for async execution (GPU queue waits do not block the loop);
        ``sync_execute`` (a sync-only tool) lets a held device outlive a cancelled caller."""
        try:
            return await self.runner.arun(step, request, config, execute, sync_execute)
        finally:
            self.planner.close(step)

    def _execute_tool_sync(
        self, request: ToolCallRequest, input_type: InputType, config: RunnableConfig
    ) -> ToolMessage | Command | list[Command | ToolMessage]:
        step = _STEP.get()
        call_id = request.tool_call.get("id")
        if step is None or call_id not in step.planned or request.tool is None:
            return super()._execute_tool_sync(request, input_type, config)
        if step.plain:  # a lean step nobody observes: run as ToolNode runs it, booked;
            # the step is this invocation's alone: `_close_own` closes it
            return step.execution.run_plain(  # type: ignore[attr-defined]
                call_id, lambda: ToolNode._execute_tool_sync(self, request, input_type, config))
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
        if step.plain:  # a lean step nobody observes: run as ToolNode runs it, booked
            async def arun(_: Any) -> tuple[Any, bool]:
                with placed(CPU):
                    answer = await ToolNode._execute_tool_async(self, request, input_type,
                                                                config)
                return answer, False

            try:
                return await step.execution.run_async(call_id or "", arun)
            finally:
                self.planner.close(step)

        def sync_execute(req: ToolCallRequest, cfg: RunnableConfig) -> Any:
            if not is_sync_only(req.tool):
                return asyncio.run(ToolNode._execute_tool_async(self, req, input_type, cfg))
            return ToolNode._execute_tool_sync(self, req, input_type, cfg)

        def planned(req: ToolCallRequest) -> Awaitable[Any]:
            return self.arun_planned(
                step,
                req,
                config,
                lambda req, cfg: ToolNode._execute_tool_async(self, req, input_type, cfg),
                sync_execute if is_sync_only(request.tool) else None,
            )

        if call_id in step.seconds:  # side-effect free: run on both sides
            return await self._arun_hedged(step, request, planned)
        return await planned(request)

    async def _arun_hedged(
        self, step: PlannedStep, request: ToolCallRequest,
        planned: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        """A hedged call: its two runs raced (`hedging.race.race`), one answer under the
        call's own id, the loser cancelled at the decision's bound."""
        call_id = request.tool_call.get("id") or ""
        second_id = step.seconds[call_id]
        second = request.override(tool_call={**request.tool_call, "id": second_id})
        observed = (step.execution.observed_ms(call_id), step.execution.observed_ms(second_id))
        answer, second_won = await race(
            lambda: planned(request), lambda: planned(second),
            bound=step.report.decision.hedge_bound, observed=observed,
            answers=lambda r: isinstance(r, ToolMessage) and r.status != "error")
        if second_won:
            answer = answer.model_copy(update={"tool_call_id": call_id})
        return answer

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
        name = tool_call["name"]
        names = self._device_args.get(name, ())
        if tool is not None and tool is not self.tools_by_name.get(name):
            names = self.device_args(name, tool)  # swapped in at run time: inspected
        if not names:
            return injected
        from langgraph_devsched.device import current_device

        device = current_device()
        return {**injected, "args": {**injected["args"], **dict.fromkeys(names, device)}}
