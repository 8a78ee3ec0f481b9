"""When the monitor proposes a probe: exploration hints for the next step of a batch shape.

Hints refer to the latest executed step of the batch's shape (the situation being repeated):

* **unknown**: a tool ran on one device and has never run on the other (which it allows).
* **symmetric**: it has run on the other device, but not under this step's load context (or
  only long ago): measuring it there compares both devices under the same conditions.
* **swap**: a tool on the GPU and one on the CPU in the same step, and the step with the two
  exchanged (the CPU one taking the GPU one's option) was never executed: only that exposes
  interactions single-tool estimates cannot show under contention.
* **shared**: a call waited in the GPU queue, and its tool has never run on the GPU beside
  another call, so how it shares the GPU is unknown (its gain: the time it waited).
* **queued**: a `gpu_now` call was slowed beside other GPU calls, and its tool never ran as
  `gpu_queued` in this batch shape (its gain: the slowdown, run time minus its solo time).
* **sparse**: under noise, the other device was measured here fewer than 3 times, and an
  optimistic reading of it (mean minus two standard errors) would beat this side.
* **noisy** / **stale**: the step's own estimates are too spread or too old to trust.

Each hint carries an optimistic ``expected_gain_ms`` (what the step could save if the unknown
side were as fast as its best evidence allows: a measurement under any context, else the
declared solo profile, else zero) and the ``probes_left`` in the (shape, background load)
budget. Hints only inform: the policy decides whether a probe is worth its cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph_devsched.monitor.context import BackgroundBucket
from langgraph_devsched.monitor.keys import outcome_key, placement_key, shape_key
from langgraph_devsched.monitor.state import LastCall, LastStep
from langgraph_devsched.monitor.tables import Tables
from langgraph_devsched.monitor.unknowns import DeviceClass, ExplorationHint
from langgraph_devsched.options import GPU_OPTIONS, is_gpu


@dataclass(frozen=True)
class HintInputs:
    """What hints are made from: the monitor's tables and its thresholds."""

    tables: Tables
    stale_after_steps: int
    noisy_cv: float
    probe_budget: int
    bg: BackgroundBucket | None = None
    """The background load now (None: that of the step the hints refer to)."""

    def probes_left(self, shape: str, bg: str) -> int:
        return max(0, self.probe_budget - self.tables.probes_used(shape, bg))


def _other(device: str) -> DeviceClass:
    return "cpu" if device == "gpu" else "gpu"


def best_evidence_ms(tables: Tables, tool: str, device: str, context: str) -> float | None:
    """Optimistic run time of ``tool`` on ``device``: this context, else the fastest context,
    else the declared solo profile."""
    options = GPU_OPTIONS if device == "gpu" else ("cpu",)
    here = [
        ks.run.mean for o in options
        if (ks := tables.get_stat(tool, o, context)) is not None and ks.device == device
    ]
    if here:
        return min(here)
    anywhere = [
        ks.run.mean for _, _, ks in tables.stats_of(tool) if ks.device == device and ks.run.known
    ]
    if anywhere:
        return min(anywhere)
    facts = tables.state.tools.get(tool)
    if facts is None:
        return None
    return facts.declared_gpu_ms if device == "gpu" else facts.declared_cpu_ms


SPARSE_BELOW = 3
"""The other side of a comparison measured fewer times than this, under noise, is re-measured."""


def _sparse_hint(
    inputs: HintInputs, call: LastCall, other: DeviceClass, left: int,
    out: dict[tuple[Any, ...], ExplorationHint],
) -> None:
    """The other device was measured here, but too few times to trust a close comparison."""
    tables = inputs.tables
    options = GPU_OPTIONS if other == "gpu" else ("cpu",)
    samples = [
        ks.run for o in options
        if (ks := tables.get_stat(call.tool, o, call.context)) is not None
        and ks.device == other and ks.run.known
    ]
    if not samples:
        return
    best = min(samples, key=lambda r: r.mean)
    cv = tables.noise()
    if best.count >= SPARSE_BELOW or cv <= 0:
        return
    optimistic = best.mean * (1.0 - 2.0 * cv / best.count**0.5)
    gain = call.run_ms - optimistic
    if gain > 0:
        out.setdefault(("sparse", call.tool, other, call.context), ExplorationHint.make(
            "sparse", (call.tool,), devices=(other,), context=call.context,
            expected_gain_ms=gain, probes_left=left,
            detail=f"measured {best.count} time{'s' * (best.count != 1)} there, "
                   f"{best.mean:.0f} ms"))


def _solo_gpu_ms(tables: Tables, tool: str) -> float | None:
    """Fastest GPU run of ``tool`` with no GPU peer, else its declared solo GPU time."""
    solo = [
        ks.run.mean for _, ctx, ks in tables.stats_of(tool)
        if ks.device == "gpu" and ks.run.known and ctx.startswith("gpu0-")
    ]
    if solo:
        return min(solo)
    facts = tables.state.tools.get(tool)
    return facts.declared_gpu_ms if facts else None


def _measured_on(inputs: HintInputs, tool: str, device: str, context: str | None) -> bool:
    step = inputs.tables.state.step
    for _, ctx, ks in inputs.tables.stats_of(tool):
        if ks.device != device or not ks.run.known:
            continue
        if context is None:
            return True
        if ctx == context and step - ks.run.last_step <= inputs.stale_after_steps:
            return True
    return False


def _allows(tables: Tables, tool: str, device: str) -> bool:
    facts = tables.state.tools.get(tool)
    if facts is None:
        return True
    return facts.gpu_allowed if device == "gpu" else facts.cpu_allowed


def propose_hints(inputs: HintInputs, batch: Any | None = None) -> tuple[ExplorationHint, ...]:
    """The hints for the next step of ``batch``'s shape (default: the last recorded shape)."""
    st = inputs.tables.state
    if batch is not None:
        tools = [c.tool for c in batch.calls]
        if not tools:
            return ()
        shape = shape_key(tools)
    elif st.last_shape is None:
        return ()
    else:
        shape = st.last_shape
    base = st.last.get(shape)
    if base is None:
        return ()
    left = inputs.probes_left(shape, inputs.bg or base.bg)
    hints: dict[tuple[Any, ...], ExplorationHint] = {}
    _device_hints(inputs, base, left, hints)
    _swap_hints(inputs, base, left, hints)
    return tuple(sorted(hints.values(), key=lambda h: (-h.expected_gain_ms, h.kind, h.tools)))


def _device_hints(
    inputs: HintInputs, base: LastStep, left: int, out: dict[tuple[Any, ...], ExplorationHint]
) -> None:
    tables = inputs.tables
    st = tables.state
    for call in base.calls:
        other = _other(call.device)
        here = "the GPU" if call.device == "gpu" else "the CPU"
        if _allows(tables, call.tool, other):
            prior = best_evidence_ms(tables, call.tool, other, call.context)
            gain = call.run_ms - prior if prior is not None else call.run_ms
            if not _measured_on(inputs, call.tool, other, None):
                key: tuple[Any, ...] = ("unknown", call.tool, other)
                out.setdefault(key, ExplorationHint.make(
                    "unknown", (call.tool,), devices=(other,), expected_gain_ms=gain,
                    probes_left=left, detail=f"measured on {here} only"))
            elif not _measured_on(inputs, call.tool, other, call.context):
                key = ("symmetric", call.tool, other, call.context)
                out.setdefault(key, ExplorationHint.make(
                    "symmetric", (call.tool,), devices=(other,), context=call.context,
                    expected_gain_ms=gain, probes_left=left,
                    detail=f"measured on {here} there"))
            else:
                _sparse_hint(inputs, call, other, left, out)
        if call.device == "gpu" and call.option == "gpu_queued" and call.wait_ms > 0:
            never_shared = not any(
                ks.device == "gpu" and not ctx.startswith("gpu0-")
                for _, ctx, ks in tables.stats_of(call.tool)
            )
            if never_shared:
                out.setdefault(("shared", call.tool), ExplorationHint.make(
                    "shared", (call.tool,), devices=("gpu",), option="gpu_now",
                    expected_gain_ms=call.wait_ms, probes_left=left,
                    detail=f"it waited {call.wait_ms:.0f} ms for the GPU"))
        if call.device == "gpu" and call.option == "gpu_now" and not call.context.startswith(
            "gpu0-"
        ):
            queued = (call.tool, "gpu_queued")
            tried = any(queued in placement for placement, _ in tables.placements_of(base.shape))
            solo = _solo_gpu_ms(tables, call.tool)
            if not tried and solo is not None and call.run_ms > solo:
                out.setdefault(("queued", call.tool), ExplorationHint.make(
                    "queued", (call.tool,), devices=("gpu",), option="gpu_queued",
                    context=call.context, expected_gain_ms=call.run_ms - solo,
                    probes_left=left,
                    detail=f"it ran {call.run_ms - solo:.0f} ms slower than alone"))
        ks = tables.get_stat(call.tool, call.option, call.context)
        if ks is None:
            continue
        if st.step - ks.run.last_step > inputs.stale_after_steps:
            out.setdefault(("stale", call.tool, call.option, call.context), ExplorationHint.make(
                "stale", (call.tool,), option=call.option, context=call.context,
                expected_gain_ms=ks.run.std, probes_left=left))
        elif ks.run.count >= 2 and ks.run.cv > inputs.noisy_cv:
            out.setdefault(("noisy", call.tool, call.option, call.context), ExplorationHint.make(
                "noisy", (call.tool,), option=call.option, context=call.context,
                expected_gain_ms=ks.run.std, probes_left=left))


def _swap_hints(
    inputs: HintInputs, base: LastStep, left: int, out: dict[tuple[Any, ...], ExplorationHint]
) -> None:
    tables = inputs.tables
    outcomes = tables.state.outcomes
    pairs = [(c.tool, c.option) for c in base.calls]
    for i, a in enumerate(base.calls):
        if not is_gpu(a.option) or a.device != "gpu" or not _allows(tables, a.tool, "cpu"):
            continue
        for j, b in enumerate(base.calls):
            if b.option != "cpu" or b.tool == a.tool or not _allows(tables, b.tool, "gpu"):
                continue
            swapped = list(pairs)
            swapped[i], swapped[j] = (a.tool, "cpu"), (b.tool, a.option)
            if outcome_key(base.shape, placement_key(swapped)) in outcomes:
                continue
            pa = best_evidence_ms(tables, a.tool, "cpu", a.context) or 0.0
            pb = best_evidence_ms(tables, b.tool, "gpu", b.context) or 0.0
            gain = max(a.run_ms, b.run_ms) - max(pa, pb)
            out.setdefault(("swap", a.tool, b.tool), ExplorationHint.make(
                "swap", (a.tool, b.tool), devices=("cpu", "gpu"), option=a.option,
                context=a.context, expected_gain_ms=gain, probes_left=left))
