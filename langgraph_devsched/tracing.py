"""Decision tracing: every tool run the node starts carries its device decision as metadata.

Keys (LangSmith shows them on the tool run; filter on the ``devsched:<option>`` tags):
``devsched.option``, ``devsched.device``, ``devsched.scheduler``, ``devsched.reason``,
``devsched.fallback``, ``devsched.vram_reserved_mb``, ``devsched.predicted_ms``,
``devsched.observed_ms`` (exact up front on the simulated testbed; on real devices the
`ObservedLatency` callback measures the tool run and writes it onto the traced run just before
the tracer sends the run's end, so LangSmith shows it too).

>>> from langgraph_devsched.device import Placement
>>> meta, tags = decision_metadata(Placement("gpu_now", "cpu", "oom"), scheduler="static",
...     reason="hints", predicted_ms=None, observed_ms=None)
>>> meta["devsched.fallback"], tags
('oom', ['devsched:gpu_now'])
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import patch_config
from langchain_core.tracers import context as _tracer_context
from langsmith import utils as _ls_utils

from langgraph_devsched.device import Placement

METADATA_KEYS = (
    "devsched.option",
    "devsched.device",
    "devsched.scheduler",
    "devsched.reason",
    "devsched.fallback",
    "devsched.vram_reserved_mb",
    "devsched.predicted_ms",
    "devsched.observed_ms",
)


def decision_metadata(
    placement: Placement,
    *,
    scheduler: str,
    reason: str,
    predicted_ms: float | None,
    observed_ms: float | None,
    extra: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The metadata and tags a traced tool run gets for its placement."""
    meta: dict[str, Any] = {
        "devsched.option": placement.option,
        "devsched.device": placement.device,
        "devsched.scheduler": scheduler,
        "devsched.reason": reason,
        "devsched.fallback": placement.fallback,
        "devsched.vram_reserved_mb": placement.vram_reserved_mb,
        "devsched.predicted_ms": predicted_ms,
        "devsched.observed_ms": observed_ms,
    }
    if extra:
        meta.update(extra)
    return meta, [f"devsched:{placement.option}"]


def with_decision(
    config: RunnableConfig, metadata: dict[str, Any], tags: list[str]
) -> RunnableConfig:
    """A copy of ``config`` whose next run carries ``metadata`` and ``tags``."""
    merged_meta = {**(config.get("metadata") or {}), **metadata}
    merged_tags = [*(config.get("tags") or []), *tags]
    return cast(RunnableConfig, {**config, "metadata": merged_meta, "tags": merged_tags})


class ObservedLatency(BaseCallbackHandler):
    """Measures one tool run and writes ``devsched.observed_ms`` onto the traced run.

    It must run before the tracers' ``on_tool_end`` (they send the run's end, metadata
    included): `with_observed_latency` puts it first, and it runs inline. It updates the run
    records of the tracers it was given (LangSmith's `LangChainTracer`, `collect_runs`, ...).
    """

    run_inline = True

    def __init__(self, tracers: Sequence[Any] = (), clock: Callable[[], float] = time.perf_counter):
        unique = {id(t): t for t in tracers if isinstance(getattr(t, "run_map", None), dict)}
        self._tracers = list(unique.values())
        self._clock = clock
        self._started: dict[UUID, float] = {}
        self.observed_ms: float | None = None

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kw: Any) -> None:
        self._started[run_id] = self._clock()

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._stamp(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._stamp(run_id)

    def _stamp(self, run_id: UUID) -> None:
        start = self._started.pop(run_id, None)
        if start is None:
            return
        self.observed_ms = (self._clock() - start) * 1000.0
        for tracer in self._tracers:
            run = tracer.run_map.get(str(run_id))
            if run is None or not isinstance(getattr(run, "extra", None), dict):
                continue
            # a new dict: the old one may be shared with other runs' configs
            run.extra["metadata"] = {
                **(run.extra.get("metadata") or {}),
                "devsched.observed_ms": self.observed_ms,
            }


def _tracers_of(callbacks: Any) -> list[Any]:
    """Tracers that will record a run started with ``callbacks`` (and the context's own)."""
    from langchain_core.tracers.context import run_collector_var, tracing_v2_callback_var

    if callbacks is None:
        found: list[Any] = []
    elif isinstance(callbacks, list):
        found = list(callbacks)
    else:
        found = [*callbacks.handlers, *callbacks.inheritable_handlers]
    found += [run_collector_var.get(), tracing_v2_callback_var.get()]
    return [t for t in found if t is not None]


def has_observers(config: RunnableConfig, *, ambient: bool | None = None) -> bool:
    """True when a run started with ``config`` would be seen by any callback or tracer.

    Without one (no handlers, no `collect_runs`, no LangSmith tracing) the node skips the
    decision metadata, which would cost every tool run for nobody. ``ambient`` is a
    precomputed `ambient_tracing()` (the node computes it once per step).
    """
    callbacks = config.get("callbacks")
    if isinstance(callbacks, list):
        if callbacks:
            return True
    elif callbacks is not None and (callbacks.handlers or callbacks.inheritable_handlers):
        return True
    return ambient_tracing() if ambient is None else ambient


def ambient_tracing() -> bool:
    """True when tracing is on for this context: `collect_runs`, `tracing_v2_enabled`, a
    configure hook, or LangSmith's environment (``LANGSMITH_TRACING``)."""
    if _tracer_context.run_collector_var.get() is not None:
        return True
    if _tracer_context.tracing_v2_callback_var.get() is not None:
        return True
    for hook in getattr(_tracer_context, "_configure_hooks", ()):
        if hook[0].get() is not None:
            return True
    return langsmith_tracing()


def _langsmith_context() -> Any:
    """LangSmith's context module when it has the variables `langsmith_tracing` reads."""
    try:
        from langsmith._internal import _context
    except ImportError:
        return None
    names = ("_TRACING_ENABLED", "_PARENT_RUN_TREE_REF", "_GLOBAL_TRACING_ENABLED")
    return _context if all(hasattr(_context, n) for n in names) else None


_LS_CONTEXT = _langsmith_context()


def langsmith_tracing() -> bool:
    """`langsmith.utils.tracing_is_enabled`, read in its own order (the context's switch,
    a parent run, the global switch, the environment) without building its tracing-context
    dict: the node asks once per step. Another LangSmith layout: its own function."""
    ctx = _LS_CONTEXT
    if ctx is None:
        return bool(_ls_utils.tracing_is_enabled())
    enabled = ctx._TRACING_ENABLED.get()
    if enabled is not None:
        return bool(enabled)
    parent = ctx._PARENT_RUN_TREE_REF.get()
    if parent is not None and parent() is not None:
        return True
    if ctx._GLOBAL_TRACING_ENABLED is not None:
        return bool(ctx._GLOBAL_TRACING_ENABLED)
    env = _ls_utils.get_env_var("TRACING_V2", default=_ls_utils.get_env_var("TRACING", default=""))
    return env == "true"


def with_observed_latency(config: RunnableConfig) -> RunnableConfig:
    """A copy of ``config`` whose next tool run gets ``devsched.observed_ms`` when it ends.

    The measuring callback goes first among the run's handlers, so the tracers (LangSmith's
    among them, which send the run's end with its metadata) see the figure.
    """
    callbacks = config.get("callbacks")
    handler = ObservedLatency(_tracers_of(callbacks))
    new: Any
    if callbacks is None:
        new = [handler]
    elif isinstance(callbacks, list):
        new = [handler, *callbacks]
    else:
        new = callbacks.copy()
        new.handlers.insert(0, handler)
    return patch_config(config, callbacks=new)


def takes_config(decide: Callable[..., Any]) -> bool:
    """True when a scheduler's ``decide`` accepts ``config=`` (so its runs nest under the step)."""
    try:
        params = inspect.signature(decide).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "config" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def iter_runs(runs: Sequence[Any]) -> Iterator[Any]:
    """Every run in ``runs`` and their descendants, depth first (e.g. ``collect_runs`` output)."""
    for run in runs:
        yield run
        yield from iter_runs(getattr(run, "child_runs", None) or [])


def decision_runs(runs: Sequence[Any]) -> list[Any]:
    """The traced tool runs that carry a device decision, in start order.

    >>> decision_runs([])
    []
    """
    found = [
        r for r in iter_runs(runs) if "devsched.option" in ((r.extra or {}).get("metadata") or {})
    ]
    return sorted(found, key=lambda r: r.start_time)
