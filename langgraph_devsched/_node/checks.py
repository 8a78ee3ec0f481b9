"""What a `DeviceToolNode` checks when it is built: its ``backend=``/``testbed=`` arguments,
that a simulated testbed knows every tool, and which tools can never fit the GPU.

A wrong argument fails here, naming what is wrong and what is valid, not at the first
``invoke`` with an ``AttributeError`` or ``KeyError``.

>>> node_backend("ray", None)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
TypeError: backend= must be a backend object (LocalBackend(), RayBackend(), ...; got str 'ray'...
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping

from langgraph_devsched.executors.base import Backend
from langgraph_devsched.executors.local import LocalBackend
from langgraph_devsched.executors.simulated import SimulatedBackend
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.base import Scheduler
from langgraph_devsched.schedulers.registry import make_scheduler
from langgraph_devsched.testbed import SimulatedTestbed

_VALID_BACKENDS = (
    "LocalBackend(), RayBackend(), SimulatedBackend(testbed), or any object with "
    "device_state() and start_step(calls)"
)


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def node_backend(backend: object, testbed: object) -> Backend:
    """The backend a node (or the middleware) runs on: ``backend``, a `SimulatedBackend`
    over ``testbed``, or this machine; `TypeError`/`ValueError` for arguments that are not
    one (a string such as ``"ray"`` included)."""
    if backend is not None and testbed is not None:
        raise ValueError("give either backend= or testbed=, not both")
    if testbed is not None:
        if not isinstance(testbed, SimulatedTestbed):
            raise TypeError(
                "testbed= must be a SimulatedTestbed (e.g. SimulatedTestbed(params, "
                f"vram_budget_mb=...) or simulated_gpu(hints, vram_budget_mb=...)); got "
                f"{_shown(testbed)}"
            )
        return SimulatedBackend(testbed)
    if backend is None:
        return LocalBackend()
    missing = [m for m in ("device_state", "start_step") if not callable(getattr(backend, m, None))]
    if missing:
        hint = (
            "; for a simulated GPU give testbed= instead" if isinstance(backend, str) else ""
        )
        raise TypeError(
            f"backend= must be a backend object ({_VALID_BACKENDS}); got {_shown(backend)}, "
            f"which has no {' or '.join(f'{m}()' for m in missing)}{hint}"
        )
    return backend  # type: ignore[return-value]  # checked: it has the protocol's methods


def node_scheduler(scheduler: object, backend: Backend, default: str) -> Scheduler:
    """The scheduler a node (or the middleware) asks: ``scheduler`` itself, or a new one of
    that registered name (``default`` for None). ``"oracle"`` is handed the node's simulated
    testbed (the ground truth it evaluates); without one it is an error that says so."""
    if scheduler is None:
        scheduler = default
    if not isinstance(scheduler, str):
        return scheduler  # type: ignore[return-value]  # any object with decide()
    if scheduler == "oracle" and isinstance(backend, SimulatedBackend):
        return make_scheduler(scheduler, testbed=backend.testbed)
    return make_scheduler(scheduler)


def check_testbed_covers(tools: Collection[str], backend: Backend) -> None:
    """A simulated backend must have parameters for every tool the node may run (each call
    of a step goes to the testbed); `ValueError` names the missing tools and the known ones."""
    if not isinstance(backend, SimulatedBackend):
        return
    known = set(backend.testbed.tool_names)
    missing = [t for t in tools if t not in known]
    if missing:
        raise ValueError(
            f"the testbed has no parameters for tool(s) {', '.join(map(repr, missing))} of "
            f"this node; it simulates: {', '.join(sorted(known)) or '(none)'} (build it with "
            f"parameters or hints for every tool)"
        )


def warn_never_fitting(specs: Mapping[str, ToolDeviceSpec], backend: Backend) -> list[str]:
    """Warn (and return the warnings) for GPU-capable tools whose call can never fit: its
    ``vram_mb`` plus its model's ``weights_mb`` exceed what the backend's GPU can ever give
    it; only where the budget is known without probing."""
    declared = getattr(backend, "declared_capacity_mb", None)  # local, simulated
    capacity: float | None = declared() if callable(declared) else None
    if capacity is None:
        return []
    found = []
    for name, spec in specs.items():
        need = spec.vram_mb + spec.weights_mb
        if not spec.gpu_capable or need <= capacity:
            continue
        then = (
            "its calls will run on the CPU (fallback vram_over_budget)"
            if spec.cpu_allowed
            else "its hints forbid the CPU, so every call will be answered with an error"
        )
        declares = f"vram_mb={spec.vram_mb:.0f}"
        if spec.weights_mb:
            declares += f" and weights_mb={spec.weights_mb:.0f} ({need:.0f} MB in all)"
        found.append(
            f"tool {name!r} declares {declares} but a call can get at most "
            f"{capacity:.0f} MB of this GPU: {then}"
        )
    for text in found:
        warnings.warn(text, UserWarning, stacklevel=3)
    return found
