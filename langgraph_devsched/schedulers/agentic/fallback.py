"""The classical policy beside the model: its decision for the step, and agreement with it.

The agentic scheduler asks its fallback policy (``monitor``) for every step first
(`fallback_lead`): its probes run as they are, its mapping is the fallback and the
reference the model's answer is compared with (`agreement`), never shown to the model in
the default mode (pick mode's candidate 1). The policy's mapping is held to the operator's
hard constraints but not VRAM-fitted again (`held_to_rules`: its twin weighed the VRAM; the
ledger queues what does not fit), unless the operator keeps VRAM free (`constraints.repair`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic.constraints import (
    AgenticCause,
    HardConstraints,
    ParsedAnswer,
    repair,
)
from langgraph_devsched.schedulers.agentic.gpu_choice import kept, several, slot_mapping
from langgraph_devsched.schedulers.agentic.guard import shape_noise_ms
from langgraph_devsched.schedulers.agentic.observations import outcomes_of, shape_outcomes
from langgraph_devsched.schedulers.agentic.record import Deviation

if TYPE_CHECKING:
    from langgraph_devsched.schedulers.agentic.guard import TwinView
    from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerView

logger = logging.getLogger(__name__)


def fallback_lead(fallback: Scheduler, batch: Batch, view: SchedulerView) -> Decision | None:
    """The fallback's decision for the step; None when it fails or leaves a call out."""
    try:
        lead = fallback.decide(batch, view)
    except Exception as exc:
        logger.info("agentic: fallback %s failed (%s)", fallback.name, exc)
        return None
    return lead if set(lead.mapping) == set(batch.call_ids) else None


def held_to_rules(
    batch: Batch, view: SchedulerView, rules: HardConstraints, lead: Decision,
    seen: Mapping[str, float],
) -> tuple[dict[str, DeviceOption], dict[str, AgenticCause]]:
    """The lead's mapping (a probe, or candidate 1) held to the hard constraints, and what
    that repaired."""
    return repair(ParsedAnswer(dict(lead.mapping)), batch, view.device, rules, fallback={},
                  vram_seen_mb=seen, fit_vram=False)


def placement(batch: Batch, mapping: Mapping[str, str]) -> list[tuple[str, str]]:
    """``mapping`` as the monitor keys an executed mapping: its (tool, option) pairs, sorted.
    Two mappings whose calls of one tool exchange options have the same placement: the
    monitor measures them as one mapping.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> from langgraph_devsched.schedulers.base import Batch
    >>> b = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "ocr", ToolDeviceSpec())])
    >>> placement(b, {"a": "cpu", "b": "gpu_now"}) == placement(b, {"a": "gpu_now", "b": "cpu"})
    True
    """
    return sorted((c.tool, mapping[c.call_id]) for c in batch.calls)


def measured_outcome(
    obs: Mapping[str, Any], batch: Batch, mapping: Mapping[str, str]
) -> Mapping[str, Any] | None:
    """The monitor's executed-mapping row for ``mapping`` of this batch, if it ran."""
    key = placement(batch, mapping)
    for o in outcomes_of(obs, batch):
        if sorted((str(p[0]), str(p[1])) for p in o.get("placement", ())) == key:
            return o
    return None


def policy_measured(obs: Mapping[str, Any], batch: Batch,
                    policy: Mapping[str, str]) -> dict[str, Any]:
    """A `Deviation`'s measured fields for the policy's mapping: its mean makespan and run
    count where it ran, and the shape's noise per run (`guard.shape_noise_ms`)."""
    row = measured_outcome(obs, batch, policy)
    return {"policy_measured_ms": None if row is None else float(row.get("makespan_ms") or 0.0),
            "policy_runs": 0 if row is None else int(row.get("count") or 1),
            "noise_ms": shape_noise_ms(shape_outcomes(obs, batch))}


SAME_GPU_SIDE = frozenset({"gpu_now", "gpu_queued"})
TIE_MS = 0.5
"""A twin difference within this is no difference (the twin rounds nothing, so a true tie
predicts 0.0)."""


def same_in_effect(policy: Mapping[str, str], mapping: Mapping[str, str],
                   twin_ms: float | None) -> bool:
    """Whether ``mapping`` is the policy's in effect: they differ only by ``gpu_now`` against
    ``gpu_queued`` on the step's one GPU call (with no other call on the GPU nothing queues
    it), and the twin (weighing VRAM and loads) predicts no difference (``twin_ms``).

    Traced with Qwen2.5-Coder-1.5B (17 built-ins, 8 rounds): 13 of 39 vetoes were answers
    such as ``gpu_now`` for a lone call the policy spelled ``gpu_queued``, priced -0.0 ms
    and vetoed as unfunded explorations.

    >>> same_in_effect({"a": "gpu_queued", "b": "cpu"}, {"a": "gpu_now", "b": "cpu"}, 0.0)
    True
    >>> same_in_effect({"a": "gpu_queued", "b": "gpu_now"}, {"a": "gpu_now", "b": "gpu_now"}, 0.0)
    False
    """
    if twin_ms is None or abs(twin_ms) > TIE_MS or set(mapping) != set(policy):
        return False
    differ = [c for c in policy if mapping[c] != policy[c]]
    on_gpu = [c for c in policy if mapping[c] in SAME_GPU_SIDE]
    return (len(on_gpu) == 1 and differ == on_gpu
            and policy[on_gpu[0]] in SAME_GPU_SIDE)


def agreement(
    batch: Batch, view: SchedulerView, rules: HardConstraints,
    mapping: Mapping[str, DeviceOption], lead: Decision | None, obs: Mapping[str, Any],
    twin_view: TwinView | None, gpus: Mapping[str, int] | None = None,
    scored: Callable[[Mapping[str, DeviceOption]], float | None] | None = None,
) -> dict[str, Any]:
    """How the model's (repaired) ``mapping`` compares with the policy's, as record fields:
    ``agrees``, and for a deviation its `Deviation` (the policy's measured makespan if its
    mapping ran, the predicted difference). Empty without a lead. The difference is
    predicted where the twin predicts at all (``twin_view``: every tool declared or
    measured), by the policy's own scores where it has them (``scored``,
    `DefaultPolicy.scored`: the reckoning that chose its mapping, measurements included),
    else by the twin: the plain twin once priced a deviation at 47 ms won that the policy's
    scores, and the run, put at 13 ms lost a step. On a machine with several GPUs both
    mappings are compared with their GPUs (``gpus``: those the answer named; the lead's
    own; the default rule for the others), spelled ``gpu_now@1``."""
    if lead is None or lead.probe:
        return {}
    seen = obs.get("vram_seen_mb") or {}
    policy, _ = held_to_rules(batch, view, rules, lead, seen)
    if several(view.device):
        policy_at = slot_mapping(batch, view.device, policy, kept(lead.gpus, policy), seen)
        answer_at = slot_mapping(batch, view.device, mapping, gpus, seen)
        if answer_at == policy_at:
            return {"agrees": True}
        return {"agrees": False, "deviation": Deviation(
            policy=policy_at, **policy_measured(obs, batch, policy_at))}
    if dict(mapping) == policy or placement(batch, mapping) == placement(batch, policy):
        # the calls of one tool exchanging options: one mapping to the monitor (on the real
        # model, parallel_vision_burst's deviations were judged lost while every round
        # measured the policy's makespan; a swap of its two ocr calls is one such answer)
        return {"agrees": True}
    twin_ms = None
    if twin_view is not None:  # None: a tool known by priors only, nothing predicts it
        try:
            if scored is not None and (mine := scored(policy)) is not None and (
                    theirs := scored(mapping)) is not None:
                twin_ms = mine - theirs
            else:
                twin_ms = twin_view.predict(policy) - twin_view.predict(mapping)
        except Exception as exc:  # the prediction is advice
            logger.info("agentic deviation: no prediction (%s)", exc)
    if same_in_effect(policy, mapping, twin_ms):
        return {"agrees": True}
    return {"agrees": False, "deviation": Deviation(
        policy=dict(policy), twin_won_ms=twin_ms, **policy_measured(obs, batch, policy))}
