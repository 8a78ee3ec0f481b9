"""The node's side of a hedged call: both runs at once, one answer, the loser cancelled.

`race` starts the call's two runs (the planned one and its second run on the other side,
`hedging`) as tasks. The first to end with a usable answer answers the call; the other may
run on until ``bound`` times the winner's time from the start, then it is cancelled (its
device released on that path, as for any cancelled call). A failure never answers while the
other run may still succeed; when both fail, the planned run's outcome answers. Where the
step's times are known up front (``observed``: the simulated testbed), both runs end and the
one with the shorter simulated time answers, as the step's record says.

>>> import asyncio
>>> async def fast(): return "cpu answer"
>>> async def slow():
...     await asyncio.sleep(10)
...     return "gpu answer"
>>> asyncio.run(race(slow, fast, bound=1.5))
('cpu answer', True)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

Run = Callable[[], Awaitable[Any]]


def usable(result: object) -> bool:
    """Whether a run's result may answer the call: no error message (``status="error"``)."""
    return getattr(result, "status", None) != "error"


async def race(
    primary: Run, second: Run, *, bound: float,
    observed: tuple[float | None, float | None] = (None, None),
    clock: Callable[[], float] = time.monotonic,
    answers: Callable[[object], bool] = usable,
) -> tuple[Any, bool]:
    """Run both; the answer and whether the second run gave it (see the module)."""
    if observed[0] is not None and observed[1] is not None:
        first, other = await asyncio.gather(primary(), second(), return_exceptions=True)
        second_wins = _ok(other, answers) and (
            not _ok(first, answers) or observed[1] < observed[0])
        return _value(other if second_wins else first), second_wins
    started = clock()
    tasks = (asyncio.ensure_future(primary()), asyncio.ensure_future(second()))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        winner = tasks[0] if tasks[0] in done else tasks[1]
        loser = tasks[1] if winner is tasks[0] else tasks[0]
        if not _ok(_outcome(winner), answers):  # a failure waits for the other run
            await asyncio.wait({loser})
            if _ok(_outcome(loser), answers):
                return _value(_outcome(loser)), loser is tasks[1]
            return _value(_outcome(tasks[0])), False
        took = clock() - started
        if not loser.done():
            await asyncio.wait({loser}, timeout=max(0.0, (bound - 1.0) * took))
        return _value(_outcome(winner)), winner is tasks[1]
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        for task in tasks:  # the loser's cancellation runs its release paths before we answer
            with contextlib.suppress(BaseException):
                await task


def _outcome(task: asyncio.Future[Any]) -> Any:
    if task.cancelled():
        return asyncio.CancelledError()
    exc = task.exception()
    return exc if exc is not None else task.result()


def _ok(outcome: object, answers: Callable[[object], bool]) -> bool:
    return not isinstance(outcome, BaseException) and answers(outcome)


def _value(outcome: object) -> Any:
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
