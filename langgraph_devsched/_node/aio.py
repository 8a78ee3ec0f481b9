"""Keep the event loop free: run a synchronous tool-call wrapper in a thread under ``ainvoke``.

`ToolNode` calls a sync ``wrap_tool_call`` directly on the event loop when it runs async, so
every wrapped call blocks the loop and the calls of a step run one after another. The
adapter below runs the sync wrapper in a worker thread and hands it an ``execute`` that runs
the async path back on the loop, so the calls of a step still overlap.

>>> import asyncio
>>> def wrapper(request, execute):
...     return execute(request) + "!"
>>> async def execute(request):
...     return request
>>> asyncio.run(threaded_wrapper(wrapper)("hi", execute))
'hi!'
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")
Q = TypeVar("Q")

_WRAPPER_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="devsched-wrap")
"""Own pool: a wrapper thread waits on its tool, so it must not take a slot the tool needs."""


def threaded_wrapper(
    wrapper: Callable[[Q, Callable[[Q], R]], R],
) -> Callable[[Q, Callable[[Q], Awaitable[R]]], Awaitable[R]]:
    """An async ``awrap_tool_call`` that runs the sync ``wrapper`` off the event loop."""

    async def awrap(request: Q, execute: Callable[[Q], Awaitable[R]]) -> R:
        loop = asyncio.get_running_loop()

        def sync_execute(req: Q) -> R:
            return asyncio.run_coroutine_threadsafe(_call(execute, req), loop).result()

        ctx = contextvars.copy_context()
        return await loop.run_in_executor(_WRAPPER_THREADS, ctx.run, wrapper, request, sync_execute)

    return awrap


async def _call(execute: Callable[[Any], Awaitable[R]], req: Any) -> R:
    return await execute(req)
