"""What runs inside a Ray task: one tool invocation, and where it ran.

The node keeps everything around a tool call in the calling process (interceptors, argument
injection, error handling, `ToolMessage` building); only ``tool.invoke(call, config)`` travels
to the cluster. The payload is the tool itself, its already injected call and a portable slice
of the run config (tags, metadata, plain ``configurable`` values: callbacks and the graph's
runtime objects stay home). The task answers ``(ok, output_or_exception, where)``, so a tool's
own exception comes back as that exception, not wrapped in a Ray error.

>>> portable_config({"tags": ["a"], "callbacks": object(), "configurable": {"thread_id": "t",
...     "__pregel_send": object()}})
{'tags': ['a'], 'configurable': {'thread_id': 't'}}
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langgraph_devsched.device import Placement, placed

_PLAIN = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Where:
    """The cluster node (and GPU) a task ran on, as the task itself saw it."""

    node_id: str = ""
    node_ip: str = ""
    gpu_ids: tuple[str, ...] = ()

    def device(self, on_gpu: bool) -> str:
        """``"<ip>/cuda:<id>"`` for a GPU call, ``"cpu"`` otherwise."""
        if not on_gpu:
            return "cpu"
        gpu = self.gpu_ids[0] if self.gpu_ids else "0"
        return f"{self.node_ip or '?'}/cuda:{gpu}"


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in mapping.items()
        if isinstance(k, str) and not k.startswith("__") and isinstance(v, _PLAIN)
    }


def portable_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of a `RunnableConfig` that can be shipped to another process."""
    if not config:
        return {}
    out: dict[str, Any] = {}
    if config.get("tags"):
        out["tags"] = list(config["tags"])
    if config.get("metadata"):
        out["metadata"] = _plain(config["metadata"])
    if isinstance(config.get("run_name"), str):
        out["run_name"] = config["run_name"]
    if config.get("configurable"):
        out["configurable"] = _plain(config["configurable"])
    return out


def _where() -> Where:
    try:
        import ray

        if not ray.is_initialized():  # outside Ray: asking would start a local instance
            return Where()
        ctx = ray.get_runtime_context()
        gpu_ids = tuple(str(g) for g in ctx.get_accelerator_ids().get("GPU", []))
        return Where(ctx.get_node_id(), ray.util.get_node_ip_address(), gpu_ids)
    except Exception:  # outside Ray (tests call this directly): no location
        return Where()


def _sendable(exc: BaseException) -> BaseException:
    try:
        from ray import cloudpickle

        cloudpickle.loads(cloudpickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


def invoke_tool(
    tool: Any, tool_input: Any, config: dict[str, Any], placement: Placement, use_async: bool
) -> tuple[bool, Any, Where]:
    """Run ``tool.invoke`` (or ``ainvoke``) under ``placement``; the body of the Ray task."""
    where = _where()
    try:
        with placed(placement):
            if use_async:
                return True, asyncio.run(tool.ainvoke(tool_input, config)), where
            return True, tool.invoke(tool_input, config), where
    except Exception as exc:
        return False, _sendable(exc), where


@functools.cache
def as_remote(target: Any) -> Any:
    """``target`` (a function or an actor class) as Ray's remote one, built once, on first
    use (ray is imported only then)."""
    import ray

    return ray.remote(target)


def remote_invoke() -> Any:
    """`invoke_tool` as a Ray remote function."""
    return as_remote(invoke_tool)
