"""Build a scheduler by name; unknown names get an error listing the valid ones.

Schedulers are registered as ``"module:Class"`` paths, imported only when built. A new
scheduler is one module plus one `register` call (or one line in ``_FACTORIES``).

>>> make_scheduler("all_gpu").name
'all_gpu'
>>> "static" in scheduler_names()
True
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langgraph_devsched.schedulers.base import Scheduler

_PKG = "langgraph_devsched.schedulers"
_FACTORIES: dict[str, str] = {
    "all_gpu": f"{_PKG}.classic.static:AllGpuScheduler",
    "static": f"{_PKG}.classic.static:StaticHintScheduler",
    "heft": f"{_PKG}.classic.heft:HeftScheduler",
    "dmda": f"{_PKG}.classic.dmda:DmdaScheduler",
    "ucb": f"{_PKG}.classic.ucb:UcbScheduler",
    "oracle": f"{_PKG}.classic.oracle:OracleScheduler",
    "monitor": f"{_PKG}.policy.scheduler:DefaultPolicy",
    "agentic": f"{_PKG}.agentic:make_agentic",  # needs a model: AgenticNotConfiguredError
}


def scheduler_names() -> tuple[str, ...]:
    """Every name `make_scheduler` accepts."""
    return tuple(_FACTORIES)


def make_scheduler(name: str, **kwargs: Any) -> Scheduler:
    """A new scheduler called ``name``; ``kwargs`` go to its constructor."""
    try:
        target = _FACTORIES[name]
    except KeyError:
        valid = ", ".join(_FACTORIES)
        raise ValueError(f"unknown scheduler {name!r}; valid schedulers: {valid}") from None
    module_name, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(**kwargs)


def scheduler_factory(name: str) -> Any:
    """The class (or callable) `make_scheduler` would call for ``name``, imported now."""
    if name not in _FACTORIES:
        valid = ", ".join(_FACTORIES)
        raise ValueError(f"unknown scheduler {name!r}; valid schedulers: {valid}")
    module_name, _, attr = _FACTORIES[name].partition(":")
    return getattr(importlib.import_module(module_name), attr)


def register(name: str, target: str) -> None:
    """Make ``make_scheduler(name)`` build ``target``, a ``"module:attr"`` factory path.

    The module is imported when the scheduler is first built; a name already taken or a
    target without ``":"`` is refused.

    >>> register("my_gpu", f"{_PKG}.classic.static:AllGpuScheduler")
    >>> make_scheduler("my_gpu").name
    'all_gpu'
    >>> unregister("my_gpu")
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a scheduler name must be a non-empty string, got {name!r}")
    if name in _FACTORIES:
        raise ValueError(f"scheduler {name!r} is already registered; registered: "
                         f"{', '.join(_FACTORIES)}")
    module_name, colon, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not (module_name and colon and attr):
        raise ValueError(f"scheduler target {target!r} must be a 'package.module:Factory' path")
    _FACTORIES[name] = target


def unregister(name: str) -> None:
    """Forget ``name`` (a scheduler `register` added); unknown names are ignored."""
    _FACTORIES.pop(name, None)


@contextmanager
def registered(name: str, target: str) -> Iterator[None]:
    """Register ``name`` (a ``"module:attr"`` factory) for the duration of a ``with`` block.

    >>> with registered("gpu_again", f"{_PKG}.classic.static:AllGpuScheduler"):
    ...     make_scheduler("gpu_again").name
    'all_gpu'
    >>> "gpu_again" in scheduler_names()
    False
    """
    register(name, target)
    try:
        yield
    finally:
        unregister(name)
