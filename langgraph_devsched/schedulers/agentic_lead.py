"""Pick mode's lead: the fallback policy's own decision, as candidate 1 or run as it is.

In ``pick`` mode the agentic scheduler asks its fallback policy (``monitor``) for the step
first (`fallback_lead`). That decision shapes the consultation:

- its settled mapping is part of the cache key (`lead_key`): when the policy learns its
  way to another mapping, the model is asked again;
- an exploratory probe is run as it is, unconsulted: it is a measurement
  the policy asked for (a side never measured, a pair never run together), not a choice to
  make, and it lets the next lead be learnt rather than guessed;
- otherwise its mapping is candidate 1 (`lead_candidate`), with the policy's own
  prediction.

Either way the policy's mapping is held to the operator's hard constraints but not
VRAM-fitted again (`held_to_rules`: its twin weighed the VRAM; the ledger queues what does
not fit), unless the operator keeps VRAM free (`agentic_answer.repair`, ``fit_vram``).

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch, Decision
>>> batch = Batch.of([("c1", "asr", ToolDeviceSpec()), ("c2", "asr", ToolDeviceSpec())])
>>> lead_key(batch, Decision(mapping={"c1": "cpu", "c2": "gpu_now"}))
((('asr', 0), 'cpu'), (('asr', 1), 'gpu_now'))
>>> probe = Decision(mapping={"c1": "cpu", "c2": "cpu"}, probe=True)
>>> lead_key(batch, probe), lead_key(batch, None)
('probe', 'no lead')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic_answer import (
    AgenticCause,
    HardConstraints,
    ParsedAnswer,
    repair,
)
from langgraph_devsched.schedulers.agentic_cache import slots
from langgraph_devsched.schedulers.agentic_pick import Candidate

if TYPE_CHECKING:
    from langgraph_devsched.schedulers.agentic_guard import TwinView
    from langgraph_devsched.schedulers.base import Batch, Decision, Scheduler, SchedulerView

logger = logging.getLogger(__name__)


def fallback_lead(fallback: Scheduler, batch: Batch, view: SchedulerView) -> Decision | None:
    """The fallback's decision for the step; None when it fails or leaves a call out."""
    try:
        lead = fallback.decide(batch, view)
    except Exception as exc:
        logger.info("agentic pick: fallback %s failed (%s)", fallback.name, exc)
        return None
    return lead if set(lead.mapping) == set(batch.call_ids) else None


def lead_key(batch: Batch, lead: Decision | None) -> Any:
    """The lead's part of the cache key: its options by (tool, occurrence), ``"probe"`` for
    a probe (never cached), ``"no lead"`` without one."""
    if lead is None:
        return "no lead"
    if lead.probe:
        return "probe"
    options = tuple(lead.mapping[c] for c in batch.call_ids)
    return tuple(sorted(zip(slots(batch), options, strict=True)))


def held_to_rules(
    batch: Batch, view: SchedulerView, rules: HardConstraints, lead: Decision,
    seen: Mapping[str, float],
) -> tuple[dict[str, DeviceOption], dict[str, AgenticCause]]:
    """The lead's mapping (a probe, or candidate 1) held to the hard constraints, and what
    that repaired."""
    return repair(ParsedAnswer(dict(lead.mapping)), batch, view.device, rules, fallback={},
                  vram_seen_mb=seen, fit_vram=False)


def lead_candidate(
    batch: Batch, view: SchedulerView, rules: HardConstraints, twin_view: TwinView,
    seen: Mapping[str, float], lead: Decision | None,
) -> Candidate | None:
    """The lead's mapping as a candidate, held to the hard constraints, with the policy's
    own prediction (the twin's where the constraints changed it); None without a lead
    (`fallback_lead` gives none that leaves a call out)."""
    if lead is None:
        return None
    mapping, _ = held_to_rules(batch, view, rules, lead, seen)
    ends = [float(lead.predicted_ms[c]) for c in batch.call_ids if c in lead.predicted_ms]
    same = mapping == dict(lead.mapping) and len(ends) == len(batch)
    return Candidate(mapping, max(ends) if same else twin_view.predict(mapping))
