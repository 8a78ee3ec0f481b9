"""Pure classification of a tool from its CPU and GPU latency statistics.

In order (thresholds in `Thresholds`, documented in docs/profiling.md):

1. ``unknown``: measured on one device only.
2. ``device_neutral``: the medians differ by at most ``max(neutral_rel * larger median,
   neutral_abs_ms)``.
3. ``ambiguous``: the two interquartile ranges overlap (touching counts), so the difference
   is inside the measured spread.
4. ``gpu_preferred`` when the GPU median is lower, else ``cpu_preferred`` (its reason says
   whether host<->device transfer is at least ``transfer_dominated`` of the GPU time).

>>> from langgraph_devsched.profiling.model import summarize
>>> classify(summarize([100, 101, 102]), summarize([10, 11, 12])).tool_class
'gpu_preferred'
>>> classify(summarize([5, 5, 5]), summarize([20, 21, 22]), transfer_ms=15).reason
'GPU slower: transfer-dominated (15.00 of 21.00 ms is host<->device copy)'
"""

from __future__ import annotations

from dataclasses import dataclass

from langgraph_devsched.profiling.model import LatencyStats, Thresholds, ToolClass


@dataclass(frozen=True)
class Classification:
    tool_class: ToolClass
    reason: str
    gpu_speedup: float | None = None


def classify(
    cpu: LatencyStats | None,
    gpu: LatencyStats | None,
    *,
    transfer_ms: float = 0.0,
    thresholds: Thresholds | None = None,
    missing_reason: str = "",
) -> Classification:
    """Class of a tool from its per-device latency (GPU latency includes transfers)."""
    th = thresholds or Thresholds()
    if cpu is None or gpu is None:
        why = f" ({missing_reason})" if missing_reason else ""
        if cpu is None and gpu is None:
            return Classification("unknown", f"not measured{why}")
        measured = "cpu" if cpu is not None else "cuda"
        return Classification("unknown", f"measured on {measured} only{why}")
    c, g = cpu.median_ms, gpu.median_ms
    speedup = c / g if g > 0 else None
    diff = abs(c - g)
    band = max(th.neutral_rel * max(c, g), th.neutral_abs_ms)
    if diff <= band:
        return Classification(
            "device_neutral", f"medians {c:.2f} vs {g:.2f} ms, within {band:.2f} ms", speedup
        )
    if cpu.q25_ms <= gpu.q75_ms and gpu.q25_ms <= cpu.q75_ms:
        return Classification(
            "ambiguous",
            f"IQRs overlap: cpu [{cpu.q25_ms:.2f}, {cpu.q75_ms:.2f}] vs "
            f"gpu [{gpu.q25_ms:.2f}, {gpu.q75_ms:.2f}] ms",
            speedup,
        )
    if g < c:
        return Classification("gpu_preferred", f"GPU {c / g:.1f}x faster", speedup)
    if transfer_ms >= th.transfer_dominated * g:
        why = f"transfer-dominated ({transfer_ms:.2f} of {g:.2f} ms is host<->device copy)"
    else:
        why = f"launch/compute-bound ({g:.2f} vs {c:.2f} ms; transfer {transfer_ms:.2f} ms)"
    return Classification("cpu_preferred", f"GPU slower: {why}", speedup)
