"""`DeviceSchedulingMiddleware`: device scheduling for agents built with ``create_agent``.

``create_agent`` sends each tool call of a step to the tool node as its own task. The
middleware plans the whole step once, when the first of those calls starts: it reads the
model's message from the state (all its pending calls), asks the scheduler once, and every
call of the step then runs under its share of that plan, through the same executors as
`DeviceToolNode` (placement, VRAM ledger, OOM fallback, ``current_placement()``,
``InjectedDevice``, decision metadata on the traced tool run).

Add it to an agent (``examples/create_agent_middleware.py`` runs one end to end):

    agent = create_agent(model, tools, middleware=[DeviceSchedulingMiddleware(hints=...)])

>>> middleware = DeviceSchedulingMiddleware(scheduler="heft", hints={"ocr": {"vram_mb": 900}})
>>> middleware.scheduler.name
'heft'
>>> DeviceSchedulingMiddleware(scheduler="best")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: unknown scheduler 'best'; valid schedulers: all_gpu, static, heft, ...
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from langgraph_devsched._node.checks import node_backend, node_scheduler
from langgraph_devsched._node.stream_events import stream_step
from langgraph_devsched._node.words import RequestReader, reads_words
from langgraph_devsched.device import current_device
from langgraph_devsched.executors.base import Backend
from langgraph_devsched.hints import ToolDeviceSpec, hints_mapping, resolve_specs, validate_spec
from langgraph_devsched.langsmith_check import check_langsmith
from langgraph_devsched.node import (
    DEFAULT_SCHEDULER,
    DeviceToolNode,
    StepReport,
    pending_step_calls,
)
from langgraph_devsched.schedulers.base import Scheduler
from langgraph_devsched.testbed import SimulatedTestbed

ToolResult = ToolMessage | Command[Any]
_MAX_CHECKED = 64
"""Tool sets whose hints were checked (bounded: forgotten beyond, then checked again)."""


class DeviceSchedulingMiddleware(AgentMiddleware):
    """Schedule every tool call of a ``create_agent`` agent on ``gpu_now``, ``gpu_queued`` or
    ``cpu``, one joint decision per model step.

    Keyword-only options, as for `DeviceToolNode`: ``scheduler`` (a `Scheduler` or a
    registered name, default ``"monitor"`` as for the node), ``hints`` (a mapping or a
    YAML/JSON file; tools may also carry `device_hints`), ``backend`` or ``testbed``,
    ``monitor``, ``on_step``, ``stream_decisions`` (each step's decision and outcome on the
    agent's custom stream, ``stream_mode="custom"``).
    Hints are validated when the middleware is built; the tool names they use are checked
    against the agent's tools at its first model request, before the model is called (list
    this middleware before any middleware that selects tools for the model).
    """

    def __init__(
        self,
        *,
        scheduler: Scheduler | str | None = None,
        hints: Mapping[str, Mapping[str, Any] | ToolDeviceSpec] | str | Path | None = None,
        backend: Backend | None = None,
        testbed: SimulatedTestbed | None = None,
        monitor: Any = None,
        on_step: Callable[[StepReport], None] | None = None,
        history: int = 100,
        stream_decisions: bool = False,
    ) -> None:
        super().__init__()
        self.stream_decisions = stream_decisions
        self.backend: Backend = node_backend(backend, testbed)
        self.scheduler: Scheduler = node_scheduler(scheduler, self.backend, DEFAULT_SCHEDULER)
        hints = hints_mapping(hints)  # a file is read now
        for tool_name, fields in hints.items():
            validate_spec(tool_name, fields)  # field errors now; tool names at the first model call
        self._hints = hints
        self._checked: set[tuple[str, ...]] = set()
        check_langsmith()  # tracing on, LangSmith unreachable: one line, tracing off
        self.monitor = monitor
        self._on_step = on_step
        self.history: deque[StepReport] = deque(maxlen=history)
        self._engines: dict[tuple[str, ...], DeviceToolNode] = {}
        self._lock = threading.Lock()
        self._reader: RequestReader | None = None
        """Reads each new request before the agent's model is called (a scheduler that reads
        words: `_node.words`)."""

    # -- the engine: a DeviceToolNode over the agent's tools, used for planning and placement --
    def _record(self, report: StepReport) -> None:
        self.history.append(report)
        if self._on_step is not None:
            self._on_step(report)

    def _engine(self, request: ToolCallRequest) -> DeviceToolNode:
        runtime_tools = getattr(request.runtime, "tools", None) or []
        tools: list[BaseTool] = list(runtime_tools)
        if request.tool is not None and all(t.name != request.tool.name for t in tools):
            tools.append(request.tool)
        key = tuple(sorted(t.name for t in tools))
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = DeviceToolNode(
                    tools,
                    scheduler=self.scheduler,
                    hints=self._hints,
                    backend=self.backend,
                    monitor=self.monitor,
                    on_step=self._record,
                )
                engine.words = None  # the requests are read before the model call (here)
                self._engines[key] = engine
            return engine

    def _step_calls(self, request: ToolCallRequest) -> list[Any]:
        state = request.state
        messages = (
            state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
        )
        found = pending_step_calls(messages or [], request.tool_call.get("id"))
        return found or [request.tool_call]

    def _scheduled(self, engine: DeviceToolNode, request: ToolCallRequest) -> bool:
        return request.tool is not None and request.tool_call["name"] in engine.device_specs

    @staticmethod
    def _with_device(engine: DeviceToolNode, request: ToolCallRequest) -> ToolCallRequest:
        names = engine.device_args(request.tool_call["name"], request.tool)
        if not names or request.tool is None:
            return request
        return request.override(tool=_OnDevice.wrap(request.tool, names))

    @staticmethod
    def _swap_config(config: RunnableConfig, new: Mapping[str, Any]) -> None:
        # ToolNode runs the tool with the very dict it put in `request.runtime.config`
        config.clear()  # type: ignore[attr-defined]
        config.update(new)  # type: ignore[typeddict-item]

    def _check_tools(self, request: ModelRequest) -> None:
        """Hints naming a tool the agent does not have fail before its model is called (the
        first model request is where the middleware first sees the agent's tools)."""
        tools = {t.name: t for t in request.tools if isinstance(t, BaseTool)}
        key = tuple(sorted(tools))
        if key in self._checked:
            return
        resolve_specs(tools, self._hints)  # HintsError: the unknown tools and the known ones
        if len(self._checked) >= _MAX_CHECKED:
            self._checked.clear()
        self._checked.add(key)

    def _read_request(self, request: ModelRequest) -> None:
        """The newest human message, read before the agent's model thinks (in the
        background: the model call does not wait)."""
        if not reads_words(self.scheduler):
            return
        tools = [(t.name, str(t.description or "")) for t in request.tools
                 if isinstance(t, BaseTool)]
        with self._lock:
            if self._reader is None or [n for n, _ in self._reader.tools] != [
                    n for n, _ in tools]:
                self._reader = RequestReader(self.scheduler, tools,
                                             on_forecast=self._forecast_came)
            reader = self._reader
        reader.read(request.messages)

    def _forecast_came(self) -> None:
        with self._lock:
            engines = list(self._engines.values())
        for engine in engines:
            if engine.preload is not None:
                engine.preload.again()

    # -- hooks ---------------------------------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        self._check_tools(request)
        self._read_request(request)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        self._check_tools(request)
        self._read_request(request)
        return await handler(request)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolResult],
    ) -> ToolResult:
        engine = self._engine(request)
        if not self._scheduled(engine, request):
            return handler(request)
        config: RunnableConfig = request.runtime.config
        step = engine.plan_calls(self._step_calls(request), config)
        if step is None or request.tool_call.get("id") not in step.planned:
            return handler(request)
        writer = getattr(request.runtime, "stream_writer", None) if self.stream_decisions else None
        stream_step(step, writer)  # stream_mode="custom": the decision, once a step
        original = dict(config)

        def execute(req: ToolCallRequest, cfg: RunnableConfig) -> ToolResult:
            self._swap_config(config, cfg)
            try:
                return handler(self._with_device(engine, req))
            finally:
                self._swap_config(config, original)

        try:
            return engine.run_planned(step, request, config, execute)
        finally:
            engine.finish_step(step)
            stream_step(step, writer)  # the outcome, by the call that closed the step

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolResult]],
    ) -> ToolResult:
        engine = self._engine(request)
        if not self._scheduled(engine, request):
            return await handler(request)
        config: RunnableConfig = request.runtime.config
        step = await engine.aplan_calls(self._step_calls(request), config)
        if step is None or request.tool_call.get("id") not in step.planned:
            return await handler(request)
        writer = getattr(request.runtime, "stream_writer", None) if self.stream_decisions else None
        stream_step(step, writer)  # stream_mode="custom": the decision, once a step
        original = dict(config)

        async def execute(req: ToolCallRequest, cfg: RunnableConfig) -> ToolResult:
            self._swap_config(config, cfg)
            try:
                return await handler(self._with_device(engine, req))
            finally:
                self._swap_config(config, original)

        try:
            return await engine.arun_planned(step, request, config, execute)
        finally:
            engine.finish_step(step)
            stream_step(step, writer)  # the outcome, by the call that closed the step


class _OnDevice(BaseTool):
    """The tool, with its `InjectedDevice` arguments filled from the current placement.

    `ToolNode` strips every injected argument from a call's arguments (the model may not
    forge them) and fills only those it knows, so the device is added at invocation.
    """

    inner: BaseTool
    device_arg_names: tuple[str, ...]

    @classmethod
    def wrap(cls, tool: BaseTool, names: tuple[str, ...]) -> _OnDevice:
        return cls(
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            inner=tool,
            device_arg_names=names,
        )

    def _with_device(self, input: Any) -> Any:
        device = current_device()
        if isinstance(input, dict) and input.get("type") == "tool_call":
            args = {**input["args"], **dict.fromkeys(self.device_arg_names, device)}
            return {**input, "args": args}
        if isinstance(input, dict):
            return {**input, **dict.fromkeys(self.device_arg_names, device)}
        return input

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return self.inner.invoke(self._with_device(input), config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        return await self.inner.ainvoke(self._with_device(input), config, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke delegates
        raise NotImplementedError
