"""How the profiler calls a tool: a sync tool directly, an async-only tool (``async def``
under ``@tool``) awaited on an event loop.

One `ToolCaller` serves one tool's measurement on one device, warm-up and repeats alike, so
an async tool keeps one event loop for all its calls (a client it opens stays usable). The
loop runs in this thread, or, when this thread already runs one (a notebook, an async app),
in a thread of its own. The device placement (`current_placement`, `InjectedDevice`
arguments) is set inside the call either way.

>>> import asyncio
>>> from langchain_core.tools import tool
>>> @tool
... async def echo(text: str) -> str:
...     '''Echo a text.'''
...     await asyncio.sleep(0)
...     return text
>>> is_async_only(echo)
True
>>> with ToolCaller(echo) as call:
...     call({"text": "hi"}, "cpu", ())
'hi'
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.tools import BaseTool

from langgraph_devsched.device import Placement, placed
from langgraph_devsched.options import DeviceOption


def is_async_only(tool: BaseTool) -> bool:
    """True for a tool with a coroutine and no sync function (``tool.invoke`` would raise)."""
    fields = type(tool).model_fields
    if "coroutine" in fields and "func" in fields:
        return getattr(tool, "func", None) is None and getattr(tool, "coroutine", None) is not None
    return type(tool)._run is BaseTool._run and type(tool)._arun is not BaseTool._arun


def _payload(args: Mapping[str, Any], device: str, injected: Sequence[str]) -> dict[str, Any]:
    payload = dict(args)
    for name in injected:
        payload[name] = device
    return payload


def _placement(device: str) -> Placement:
    option: DeviceOption = "cpu" if device == "cpu" else "gpu_now"
    return Placement(option=option, device=device)


class ToolCaller:
    """Call ``tool`` as placed on a device; a context manager (it owns an async tool's loop)."""

    def __init__(self, tool: BaseTool) -> None:
        self.tool = tool
        self.is_async = is_async_only(tool)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ToolCaller:
        if not self.is_async:
            return self
        self._loop = asyncio.new_event_loop()
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop here: run ours in this thread
            return self
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="devsched-profile-loop", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        if self._thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join()
            self._thread = None
        loop.close()

    def __call__(self, args: Mapping[str, Any], device: str, injected: Sequence[str]) -> Any:
        payload = _payload(args, device, injected)
        if not self.is_async:
            with placed(_placement(device)):
                return self.tool.invoke(payload)
        if self._loop is None:
            raise RuntimeError("ToolCaller of an async tool used outside its `with` block")

        async def call() -> Any:
            with placed(_placement(device)):
                return await self.tool.ainvoke(payload)

        if self._thread is None:
            return self._loop.run_until_complete(call())
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()
