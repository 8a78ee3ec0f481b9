"""The default mode: the model decides, given the monitor's observations as tool outputs.

`Step` is what every mode builds a consultation from (the step, the scheduler's settings,
the classical policy's decision beside it, the twin). `AgentMode` builds a `Consultation`:
the observation tools called for the model (``inline``: their outputs in the task message,
``one_shot``), one forced turn through the answer channel (more with ``max_turns``). It is
asked again when a mapping of the shape was measured for the first time (`executed_key`),
besides the fingerprint's own changes. Before it asks, the policy's own mapping is measured
once where it never ran and predicts below the fastest measured one (`AgentMode.trial`).
The json_schema answer admits only the mappings the guard's checks admit (`admitted`); where
one alone is admitted, it is taken without asking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langgraph_devsched.schedulers.agentic.admitted import admitted_schema, open_calls
from langgraph_devsched.schedulers.agentic.config import AnswerChannel
from langgraph_devsched.schedulers.agentic.consult import Consultation
from langgraph_devsched.schedulers.agentic.fallback import measured_outcome
from langgraph_devsched.schedulers.agentic.gpu_choice import several
from langgraph_devsched.schedulers.agentic.model import (
    CHANNEL_CHAIN,
    LONG_BUDGET_FACTOR,
    ChannelState,
    answer_budget,
)
from langgraph_devsched.schedulers.agentic.observations import (
    answer_values,
    mapping_of,
    observation_tools,
    outcomes_of,
)
from langgraph_devsched.schedulers.agentic.prompts import agent_prompt, short_labels
from langgraph_devsched.schedulers.base import Batch

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langgraph_devsched.schedulers.agentic.constraints import HardConstraints
    from langgraph_devsched.schedulers.agentic.guard import TwinView
    from langgraph_devsched.schedulers.base import Decision, SchedulerView


@dataclass
class Step:
    """One step to consult about, and the scheduler's settings for it."""

    model: BaseChatModel
    batch: Batch
    view: SchedulerView
    obs: Mapping[str, Any]
    constraints: HardConstraints
    policy: str | None
    max_turns: int
    max_tokens: int | None
    timeout_s: float
    clock: Callable[[], float]
    on_llm_call: Callable[[], None]
    lead: Decision | None = None
    """The classical policy's decision for this step (agreement, fallback; pick's lead)."""
    twin_view: TwinView | None = None
    candidates: int = 0
    pick_within: float | None = None
    guard_ratio: float | None = None
    explore_ms: float | None = None
    """What a probe of an unmeasured mapping may cost this step (`exploration`; None: no
    bound, the guard off): shown with the exploration hints."""
    uses_next: Mapping[str, float] = field(default_factory=dict)
    """Per model of the step, the uses the policy's forecast expects over the coming steps
    (what repays its load): shown for a model not warm on a GPU."""
    admitted: Callable[[], list[dict[str, str]] | None] = lambda: None
    """The answers the evidence admits (`admitted`, screened by the guard's checks) by call
    id; None: not screened (the guard off, too many). Computed when a mode asks."""

    @property
    def vram_seen(self) -> Mapping[str, float]:
        return self.obs.get("vram_seen_mb") or {}


def executed_key(obs: Mapping[str, Any], batch: Batch) -> tuple[Any, ...]:
    """The executed mappings of ``batch``'s shape, as a cache-key part: a mapping measured
    for the first time (the monitor's reprobe, or the model's own answer) is an observation
    the model has not seen, so the default mode is asked again."""
    return tuple(sorted(str(o.get("placement")) for o in outcomes_of(obs, batch)))


def _untried(obs: Mapping[str, Any], batch: Batch, mapping: Mapping[str, str]) -> bool:
    """Whether ``mapping`` never ran, or ran once only while its models loaded (its one
    makespan is a cold start's, not the mapping's)."""
    row = measured_outcome(obs, batch, mapping)
    return row is None or (bool(row.get("cold")) and int(row.get("count") or 0) <= 1)


def _makespan(outcome: Mapping[str, Any]) -> float:
    return float(outcome.get("makespan_ms") or 0.0)


def fastest_outcome(obs: Mapping[str, Any], batch: Batch) -> Mapping[str, Any] | None:
    """The monitor's fastest measured mapping of ``batch``'s shape, None before any."""
    return min(outcomes_of(obs, batch), key=_makespan, default=None)


def fastest_measured(obs: Mapping[str, Any], batch: Batch) -> float | None:
    """The lowest mean makespan measured for ``batch``'s shape, None before any."""
    row = fastest_outcome(obs, batch)
    return None if row is None else _makespan(row)


TRIAL_GAIN = 0.02
"""The policy's never-measured mapping is run once when it predicts at least this much
below the fastest measured mapping of the shape."""


class AgentMode:
    """The default mode (``inline=True``: the observations inline, ``one_shot``)."""

    def __init__(self, answer: AnswerChannel, *, inline: bool = False) -> None:
        self.name = "one_shot" if inline else "agent"
        self.inline = inline
        self.channel = ChannelState(answer, CHANNEL_CHAIN)

    def key(self, step: Step) -> Any:
        return executed_key(step.obs, step.batch)

    def trial(self, step: Step) -> str | None:
        """Why the policy's mapping is to be measured once, unconsulted, else None: it
        never ran, the shape has measured mappings, and the policy predicts it more than
        `TRIAL_GAIN` below the fastest of them. Like the monitor's reprobes it is a
        measurement, not a choice: the model sees its outcome among the executed mappings
        (never labelled) and decides. Traced with Qwen2.5-Coder-1.5B: the model copies the
        fastest measured mapping, and the policy's best, never measured, was never in that
        list (10 of 17 built-ins optimal)."""
        lead, batch = step.lead, step.batch
        if lead is None or lead.probe or not lead.predicted_ms:
            return None
        row = fastest_outcome(step.obs, batch)
        fastest = None if row is None else _makespan(row)
        if not fastest or not _untried(step.obs, batch, lead.mapping):
            return None
        predicted = max(lead.predicted_ms.values())
        extra = ""
        twin = step.twin_view
        best = None if row is None else mapping_of(row.get("placement", ()), batch)
        if twin is not None and twin.reload is not None and best is not None:
            # with resident models a step's makespan leaves out what its evictions cost the
            # next steps: both sides priced with that reload (traced: the model's mapping
            # reloaded a diffusion model every step, the policy's predicted the same step)
            ids = batch.call_ids
            mine, theirs = twin.reload_of([[lead.mapping[c] for c in ids],
                                           [best[c] for c in ids]])
            predicted, fastest = predicted + mine, fastest + theirs
            extra = " with the reloads their evictions cost"
        if predicted >= (1.0 - TRIAL_GAIN) * fastest:
            return None
        return (f"the policy's mapping never ran warm: predicted {predicted:.0f} ms against "
                f"{fastest:.0f} ms measured at best{extra}")

    def consultation(self, step: Step) -> Consultation:
        rules = step.constraints
        labels = short_labels(step.batch)
        # the model reads and answers with short labels; the answer is read back to the ids
        batch = Batch.of([(labels[c.call_id], c.tool, c.spec) for c in step.batch.calls])
        tools = observation_tools(batch, step.view, rules, step.obs,
                                  explore_ms=step.explore_ms, uses_next=step.uses_next,
                                  refuted=step.guard_ratio is not None)
        admits = step.admitted()
        ids = [labels[c] for c in step.batch.call_ids]
        asked, schema = ids, None
        settled: dict[str, str] = {}
        if admits is not None and len(admits) >= 2:
            offered = [{labels[c]: v for c, v in m.items()} for m in admits]
            asked, settled = open_calls(ids, offered)
            schema = admitted_schema(asked, offered)
        budget = answer_budget(len(asked), several_gpus=several(step.view.device))
        consultation = Consultation(
            model=step.model,
            batch=batch,
            messages=agent_prompt(batch, tools, rules, step.policy, inline_outputs=self.inline,
                                  fastest_ms=fastest_measured(step.obs, batch),
                                  several_gpus=several(step.view.device), settled=settled),
            observations=tools,
            channel=self.channel,
            max_turns=1 if self.inline else step.max_turns,
            max_tokens=step.max_tokens or budget,
            long_tokens=step.max_tokens or LONG_BUDGET_FACTOR * budget,
            allowed={c.call_id: answer_values(c, rules, step.view.device) for c in batch.calls},
            deadline=0.0,
            inline=self.inline,
            clock=step.clock,
            on_llm_call=step.on_llm_call,
            ids={label: c for c, label in labels.items() if label != c},
            schema=schema,
            settled=settled,
            sole=admits[0] if admits is not None and len(admits) == 1 else None,
        )
        consultation.graph()  # compiled outside the consultation's time
        consultation.deadline = step.clock() + step.timeout_s
        consultation.tally.mode = self.name
        consultation.tally.candidates = len(admits or ())
        return consultation
