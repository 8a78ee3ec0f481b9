"""What a scheduler may declare beyond `Scheduler.decide`/`observe`, and one place that asks.

The node and the benchmark never probe a scheduler by attribute name: they read its
`Capabilities`. Every member is optional; a scheduler declares one by defining it.

* `AsyncScheduler.adecide`: decide without blocking the event loop (an LLM call). Used by the
  node's async path before anything else.
* `SchedulerOptions.blocking`: ``decide`` blocks (I/O), so the async path runs it on a thread.
* ``decide(batch, view, config=...)`` (or ``**kwargs``): the scheduler's own runs nest under the
  step's LangChain run (`Capabilities.takes_config`).
* `SchedulerOptions.calibration`: an idle-time run to measure (the node's idle runs, the bench).
* `SchedulerOptions.preloads`: the model loads worth running before the next step.
* `SchedulerOptions.declare_tools`: the app's tools and hints, known before any step.
* `SchedulerOptions.reload_ms`: what evicting resident models costs later steps.
* `SchedulerOptions.state_sizes`: how many entries each bounded table holds.
* `SchedulerOptions.forecast_words`: a forecast from words (a request's text, the tools'
  names and descriptions) of which tools the coming work calls; it changes nothing.
* `SchedulerOptions.expect`: such a forecast, handed over once it is in force.

>>> from langgraph_devsched.schedulers import make_scheduler
>>> caps = capabilities(make_scheduler("all_gpu"))
>>> caps.adecide is None, caps.blocking, caps.takes_config, caps.calibration is None
(True, False, False, True)
>>> sorted(capabilities(make_scheduler("monitor")).hooks())
['calibration', 'declare_tools', 'expect', 'forecast_words', 'preloads', 'reload_ms', 'state_sizes']
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerView
from langgraph_devsched.tracing import takes_config

if TYPE_CHECKING:
    from langgraph_devsched.hints import ToolDeviceSpec
    from langgraph_devsched.telemetry import DeviceState


@runtime_checkable
class AsyncScheduler(Scheduler, Protocol):
    """A scheduler whose decision awaits (e.g. a model call): the async path awaits it."""

    async def adecide(self, batch: Batch, view: SchedulerView) -> Decision: ...


class SchedulerOptions(Protocol):
    """The optional members a scheduler may define; each is read through `capabilities`."""

    blocking: bool

    def calibration(self) -> tuple[Batch, Decision] | None: ...

    def preloads(self, device: DeviceState, idle_ms: float) -> Sequence[Any]: ...

    def declare_tools(self, specs: Mapping[str, ToolDeviceSpec]) -> None: ...

    def reload_ms(self, evicted: Sequence[str]) -> float: ...

    def state_sizes(self) -> dict[str, int]: ...

    def forecast_words(self, text: str, tools: Sequence[tuple[str, str]]) -> Any: ...

    def expect(self, forecast: Any) -> None: ...


HOOKS = ("calibration", "preloads", "declare_tools", "reload_ms", "state_sizes",
         "forecast_words", "expect")


@dataclass(frozen=True)
class Capabilities:
    """What one scheduler declares: its bound optional methods (None where it has none)."""

    adecide: Callable[..., Awaitable[Any]] | None
    blocking: bool
    takes_config: bool
    calibration: Callable[[], tuple[Batch, Decision] | None] | None
    preloads: Callable[[DeviceState, float], Sequence[Any]] | None
    declare_tools: Callable[[Mapping[str, ToolDeviceSpec]], None] | None
    reload_ms: Callable[[Sequence[str]], float] | None
    state_sizes: Callable[[], dict[str, int]] | None
    forecast_words: Callable[[str, Sequence[tuple[str, str]]], Any] | None = None
    expect: Callable[[Any], None] | None = None

    def hooks(self) -> tuple[str, ...]:
        """The names of the optional hooks this scheduler defines."""
        return tuple(h for h in HOOKS if getattr(self, h) is not None)


def _member(scheduler: object, name: str) -> Any:
    # The one attribute probe: a member set to None counts as not declared.
    return getattr(scheduler, name, None)


def async_decide(scheduler: object) -> Callable[..., Awaitable[Any]] | None:
    """The scheduler's ``adecide``, or None (cheap: read on every async step)."""
    return _member(scheduler, "adecide")


def is_blocking(scheduler: object) -> bool:
    """True when the scheduler declares that its ``decide`` blocks."""
    return bool(_member(scheduler, "blocking"))


def capabilities(scheduler: object) -> Capabilities:
    """Everything ``scheduler`` declares beyond ``decide``/``observe``."""
    decide = _member(scheduler, "decide")
    return Capabilities(
        adecide=async_decide(scheduler),
        blocking=is_blocking(scheduler),
        takes_config=decide is not None and takes_config(decide),
        calibration=_member(scheduler, "calibration"),
        preloads=_member(scheduler, "preloads"),
        declare_tools=_member(scheduler, "declare_tools"),
        reload_ms=_member(scheduler, "reload_ms"),
        state_sizes=_member(scheduler, "state_sizes"),
        forecast_words=_member(scheduler, "forecast_words"),
        expect=_member(scheduler, "expect"),
    )
