"""The decision as its own traced run, and as an INFO log line.

When something observes the step (a callback, `collect_runs`, LangSmith), the scheduler's
decision is a chain run named ``devsched.decide`` under the tools step: its inputs are the
batch and what the scheduler saw, its outputs the applied mapping, reason, fallback and veto
(`Decision.veto`: the scheduler's own answer vetoed by its guard, not a failure). A scheduler's
own runs (the agentic sub-agent's LLM calls) nest under it. Nobody observing: no run, no cost.

Every decided step is logged at INFO on the ``langgraph_devsched`` logger.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import (
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    patch_config,
)

from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerView
from langgraph_devsched.tracing import has_observers

logger = logging.getLogger("langgraph_devsched")

DECIDE_RUN = "devsched.decide"
_MAX_OBSERVATIONS_CHARS = 4000


def decide_inputs(batch: Batch, view: SchedulerView) -> dict[str, Any]:
    """What the decision run shows as its inputs (bounded in size)."""
    seen = repr(view.observations) if view.observations is not None else None
    if seen is not None and len(seen) > _MAX_OBSERVATIONS_CHARS:
        seen = seen[: _MAX_OBSERVATIONS_CHARS - 1] + "…"
    return {
        "calls": [
            {"id": c.call_id, "tool": c.tool, "allowed": list(c.spec.allowed_options())}
            for c in batch.calls
        ],
        "device": {
            "gpu_available": view.device.gpu_available,
            "vram_budget_mb": view.device.vram_budget_mb,
            "vram_used_mb": view.device.vram_used_mb,
        },
        "observations": seen,
    }


def decide_outputs(decision: Decision) -> dict[str, Any]:
    return {
        "mapping": dict(decision.mapping),
        "reason": decision.reason,
        "fallback": decision.fallback,
        "veto": decision.veto,
        "reused": decision.reused,
        "predicted_ms": dict(decision.predicted_ms),
    }


def open_decide_run(
    batch: Batch, view: SchedulerView, config: RunnableConfig | None
) -> tuple[RunnableConfig | None, Any]:
    """``(config for the scheduler, run)``; the run is None when nothing observes."""
    if config is None or not has_observers(config):
        return config, None
    manager = get_callback_manager_for_config(config)
    run = manager.on_chain_start({"name": DECIDE_RUN}, decide_inputs(batch, view), name=DECIDE_RUN)
    return patch_config(config, callbacks=run.get_child()), run


async def aopen_decide_run(
    batch: Batch, view: SchedulerView, config: RunnableConfig | None
) -> tuple[RunnableConfig | None, Any]:
    """`open_decide_run` for async callers (async handlers run on the loop)."""
    if config is None or not has_observers(config):
        return config, None
    manager = get_async_callback_manager_for_config(config)
    run = await manager.on_chain_start(
        {"name": DECIDE_RUN}, decide_inputs(batch, view), name=DECIDE_RUN
    )
    return patch_config(config, callbacks=run.get_child()), run


def close_decide_run(run: Any, decision: Decision) -> None:
    if run is not None:
        run.on_chain_end(decide_outputs(decision))


async def aclose_decide_run(run: Any, decision: Decision) -> None:
    if run is not None:
        await run.on_chain_end(decide_outputs(decision))


def log_decision(scheduler: str, decision: Decision) -> None:
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "step decided by %s: %s (%s)%s",
            decision.scheduler or scheduler,
            ", ".join(f"{cid}={opt}" for cid, opt in decision.mapping.items()),
            decision.reason,
            (f" fallback={decision.fallback}" if decision.fallback else "")
            + (f" veto={decision.veto}" if decision.veto else ""),
        )
