"""A local stand-in for a tool whose invocation runs elsewhere (a Ray task).

`RemoteTool` looks like the tool it wraps (name, description, schemas, metadata), so the node's
`ToolNode` machinery treats it as that tool; its ``invoke``/``ainvoke`` hand the call to a
`Dispatch` and fire the run's callbacks (tracing, the node's OOM watcher) here, in the
calling process, around the remote run.
"""

from __future__ import annotations

from typing import Any, Protocol

from langchain_core.callbacks import AsyncCallbackManager, CallbackManager
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.tools import BaseTool
from pydantic import ConfigDict


class Dispatch(Protocol):
    """Runs one placed tool call somewhere else and returns what ``tool.invoke`` returned."""

    def run(self, tool: BaseTool, tool_input: Any, config: RunnableConfig) -> Any: ...

    async def arun(self, tool: BaseTool, tool_input: Any, config: RunnableConfig) -> Any: ...


def _input_str(tool_input: Any) -> str:
    if isinstance(tool_input, dict) and tool_input.get("type") == "tool_call":
        return str(tool_input.get("args", {}))
    return tool_input if isinstance(tool_input, str) else str(tool_input)


class RemoteTool(BaseTool):
    """Proxy for ``target``: same face, invocation delegated to ``dispatch``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    target: BaseTool
    dispatch: Any

    @classmethod
    def wrap(cls, target: BaseTool, dispatch: Dispatch) -> RemoteTool:
        return cls(
            name=target.name,
            description=target.description,
            args_schema=target.args_schema,
            return_direct=target.return_direct,
            response_format=target.response_format,
            metadata=target.metadata,
            tags=target.tags,
            target=target,
            dispatch=dispatch,
        )

    @property
    def tool_call_schema(self) -> Any:
        return self.target.tool_call_schema

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - invoke is overridden
        raise NotImplementedError("RemoteTool runs through invoke/ainvoke")

    def _callbacks(self, config: RunnableConfig) -> CallbackManager:
        return CallbackManager.configure(*self._configure_args(config))

    def _configure_args(self, config: RunnableConfig) -> tuple[Any, ...]:
        return (
            config.get("callbacks"),
            None,
            False,
            config.get("tags"),
            self.tags,
            config.get("metadata"),
            self.metadata,
        )

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        manager = self._callbacks(config).on_tool_start(
            {"name": self.name, "description": self.description},
            _input_str(input),
            run_id=config.pop("run_id", None),
            name=config.get("run_name") or self.name,
            inputs=input if isinstance(input, dict) else None,
        )
        try:
            output = self.dispatch.run(self.target, input, config)
        except Exception as exc:
            manager.on_tool_error(exc)
            raise
        manager.on_tool_end(output, name=self.name)
        return output

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        amanager = await AsyncCallbackManager.configure(
            *self._configure_args(config)
        ).on_tool_start(
            {"name": self.name, "description": self.description},
            _input_str(input),
            run_id=config.pop("run_id", None),
            name=config.get("run_name") or self.name,
            inputs=input if isinstance(input, dict) else None,
        )
        try:
            output = await self.dispatch.arun(self.target, input, config)
        except Exception as exc:
            await amanager.on_tool_error(exc)
            raise
        await amanager.on_tool_end(output, name=self.name)
        return output
