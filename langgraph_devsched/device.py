"""How a tool learns where it runs: an injected argument or a context accessor.

A tool that declares ``device: Annotated[str, InjectedDevice]`` receives ``"cpu"`` or
``"cuda:0"`` (hidden from the model's tool schema, like `InjectedToolArg`); any tool can call
`current_placement()` while it runs. A tool with neither runs as it is.

>>> from typing import Annotated
>>> from langchain_core.tools import tool
>>> @tool
... def embed(text: str, device: Annotated[str, InjectedDevice]) -> str:
...     '''Embed a text.'''
...     return device
>>> "device" in embed.tool_call_schema.model_json_schema()["properties"]
False
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from langchain_core.tools import BaseTool, InjectedToolArg

from langgraph_devsched.options import DeviceOption, FallbackCause


class InjectedDevice(InjectedToolArg):
    """Annotation for a tool argument that receives the device string (``cpu``, ``cuda:0``)."""


def is_gpu_device(device: str) -> bool:
    """Whether a device string names a GPU (not ``cpu``, not ``none``: placed nowhere)."""
    return device not in ("cpu", "none")


@dataclass(frozen=True)
class Placement:
    """Where one tool call actually runs.

    ``option`` is what the scheduler chose; ``device`` is where it ran (``cpu`` after a
    fallback); ``fallback`` says why they differ, or is None.
    """

    option: DeviceOption
    device: str
    fallback: FallbackCause | None = None
    vram_reserved_mb: float = 0.0
    model: str | None = None
    """The resident model the call runs on (its ``model`` hint), or None."""
    warm: bool | None = None
    """Whether that model was resident where the call runs when it was placed: its GPU
    weights at admission, or its host copy for a call placed on the CPU (None: no model,
    or not known, e.g. after a fallback)."""
    evicted: tuple[str, ...] = ()
    """Idle models evicted at admission to make room for this call."""

    @property
    def on_gpu(self) -> bool:
        """True when it ran on a GPU (``none``: it could run nowhere)."""
        return is_gpu_device(self.device)


_CURRENT: contextvars.ContextVar[Placement | None] = contextvars.ContextVar(
    "devsched_placement", default=None
)


def current_placement() -> Placement | None:
    """The placement of the tool call running in this context, or None outside the node."""
    return _CURRENT.get()


def current_device(default: str = "cpu") -> str:
    """The device string for the running tool call (``default`` outside the node)."""
    placement = _CURRENT.get()
    return placement.device if placement is not None else default


def set_placement(placement: Placement) -> contextvars.Token[Placement | None]:
    """Make ``placement`` the current one until `reset_placement` (what `placed` does, for
    a scope that sets more than the placement)."""
    return _CURRENT.set(placement)


def reset_placement(token: contextvars.Token[Placement | None]) -> None:
    _CURRENT.reset(token)


class placed:
    """Make ``placement`` the current one for the duration of the block (a class, not a
    generator: it runs on every tool call)."""

    __slots__ = ("_placement", "_token")

    def __init__(self, placement: Placement) -> None:
        self._placement = placement

    def __enter__(self) -> Placement:
        self._token = _CURRENT.set(self._placement)
        return self._placement

    def __exit__(self, *exc: object) -> None:
        _CURRENT.reset(self._token)


def injected_device_args(tool: BaseTool) -> tuple[str, ...]:
    """Names of the tool's arguments annotated with `InjectedDevice`."""
    func = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    hints: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        hints.update(get_type_hints(func, include_extras=True) if func else {})
    schema = getattr(tool, "args_schema", None)
    if isinstance(schema, type) and hasattr(schema, "model_fields"):
        with contextlib.suppress(Exception):
            for name, field in schema.model_fields.items():
                hints.setdefault(name, field.annotation)
                for meta in field.metadata:
                    if _is_device_marker(meta):
                        hints[name] = InjectedDevice
    return tuple(name for name, hint in hints.items() if _mentions_device(hint))


def _is_device_marker(obj: object) -> bool:
    return obj is InjectedDevice or isinstance(obj, InjectedDevice)


def _mentions_device(hint: object) -> bool:
    if _is_device_marker(hint):
        return True
    if get_origin(hint) is not None:
        return any(_mentions_device(a) for a in get_args(hint))
    return False
