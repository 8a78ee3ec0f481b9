"""Decision tracing: every tool run the node starts carries its device decision as metadata.

Keys (LangSmith shows them on the tool run; filter on the ``devsched:<option>`` tags):
``devsched.option``, ``devsched.device``, ``devsched.scheduler``, ``devsched.reason``,
``devsched.fallback``, ``devsched.vram_reserved_mb``, ``devsched.predicted_ms``,
``devsched.observed_ms`` (known up front on the simulated testbed, else None at start).

>>> from langgraph_devsched.device import Placement
>>> meta, tags = decision_metadata(Placement("gpu_now", "cpu", "oom"), scheduler="static",
...     reason="hints", predicted_ms=None, observed_ms=None)
>>> meta["devsched.fallback"], tags
('oom', ['devsched:gpu_now'])
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.runnables import RunnableConfig

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
