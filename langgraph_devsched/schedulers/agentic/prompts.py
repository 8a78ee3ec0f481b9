"""Every text the agentic sub-agent reads that is not an observation: one place to tune them.

The default mode's first messages (`agent_prompt`): the system prompt, the same for every
consultation of a scheduler (a stable prefix the server's prompt cache keeps), the
observation tools called for the model, the task line naming the step's calls; the nudges
ask for the answer through the channel in use. Pick mode's texts number the candidate
mappings (`candidates_text`) and ask for one number.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool

from langgraph_devsched.schedulers.agentic.constraints import HardConstraints
from langgraph_devsched.schedulers.agentic.observations import compact, inline, names_tool, opening

if TYPE_CHECKING:
    from langgraph_devsched.schedulers.agentic.modes.pick import Candidate
    from langgraph_devsched.schedulers.base import Batch

SYSTEM_PROMPT = """\
You are the device scheduler of an agent application. A step runs tool calls at once; \
give each call one device option so that the step ends soonest (its makespan).
Options: gpu_now (the GPU at once, shared with the other GPU calls: they slow each other; \
its VRAM must fit now), gpu_queued (the GPU once its VRAM fits and the GPU is free), cpu \
(no VRAM; slow for heavy compute, fast for transfer-bound tools).
The observation tools ({tools}) report declared hints and measurements only: \
step_calls gives a cold model's uses_next (the uses its forecast expects over the coming \
steps: what would repay its load_ms), tool_estimates per option [run ms, samples, context] \
(context g<k>c<j>: k other calls on the GPU, j on the CPU), past_outcomes the mappings \
already run, lowest measured makespan first (a whole mapping's makespan includes how its \
calls slowed each other, which per-tool estimates do not show; refuted: measured slower \
than the fastest, not run again), exploration_hints what is not measured yet and what a \
probe of it may cost this step.
Answer with only a JSON object giving every call id its option: \
{{"<call id>": "<option>", ...}}.
Hard constraints, enforced after you answer: {constraints}"""


GPUS_PROMPT = (
    "This machine has several GPUs (device_state lists each by index): give each GPU option "
    "its GPU as <option>@<index>, e.g. gpu_now@1, gpu_queued@0; a call runs faster on a GPU "
    "where its model is warm (step_calls: warm cuda:<index>)."
)
"""Added to the system prompt on a machine with several GPUs (`gpu_choice`)."""


FORCE_PROMPT = "Submit your answer now: call submit_mapping with one option per call id."
ANSWER_PROMPT = "Answer now."
JSON_PROMPT = (
    'Answer now with only a JSON object: {"assignments": {"<call id>": "<gpu_now, gpu_queued '
    'or cpu>", ...}, "reason": "<a few words>"}, one entry per call id of this step.'
)


def agent_prompt(
    batch: Batch, tools: Sequence[BaseTool], rules: HardConstraints, policy: str | None,
    *, inline_outputs: bool = False, fastest_ms: float | None = None,
    several_gpus: bool = False, settled: Mapping[str, str] | None = None,
) -> list[AnyMessage]:
    """The default mode's first messages: rules (policy included, the same for every
    consultation), the observation tools called for the model (an assistant message with
    the calls, then their outputs; ``inline_outputs``: the outputs in the task message,
    ``one_shot``), then the task, with the lowest makespan measured so far for this shape
    (``fastest_ms``: a fact from past_outcomes, not a mapping). The task comes after the
    observations: the calls' message is the same for every step, so the server's prompt
    cache keeps it. ``several_gpus``: the answer names the GPU (`GPUS_PROMPT`).
    ``settled``: calls the evidence leaves one option (`admitted.open_calls`), named as
    such; the answer gives the others."""
    described = {k: v for k, v in rules.describe().items() if v}
    system = SYSTEM_PROMPT.format(constraints=compact(described) if described else "none",
                                  tools=", ".join(t.name for t in tools))
    if several_gpus:
        system += f"\n{GPUS_PROMPT}"
    if policy:
        system += f"\nOperator policy: {policy}"
    listed = ", ".join(c.call_id if names_tool(c.call_id, c.tool) else f"{c.call_id} ({c.tool})"
                       for c in batch.calls)
    task = f"Step of {len(batch)} call(s): {listed}."
    if fastest_ms is not None:
        task += f" Fastest measured so far: {fastest_ms:.0f} ms (past_outcomes)."
    if settled:
        task += (" Settled by the evidence: "
                 + ", ".join(f"{c} {o}" for c, o in settled.items())
                 + "; answer the other calls.")
    if inline_outputs:
        return [SystemMessage(system), HumanMessage(f"{task}\nObservations:\n{inline(tools)}")]
    return [SystemMessage(system), *opening(tools), HumanMessage(f"{task} {ANSWER_PROMPT}")]


PICK_SYSTEM = """\
You are the device scheduler of an agent application. A step runs several tool calls at \
once; each call goes to gpu_now (the GPU at once, shared with the other GPU calls), \
gpu_queued (the GPU once its VRAM and the GPU are free) or cpu. The monitor's model has \
ranked the best device mappings for the step by predicted makespan (the time until the \
step's last call ends); you get them numbered. Pick the one that will end the step soonest: \
the predictions are estimates from declared profiles and measurements, and the lowest is \
usually best.
Answer only with JSON: {{"pick": <number>}}.
Hard constraints, enforced after you answer: {constraints}"""


def call_labels(batch: Batch) -> dict[str, str]:
    """Short labels for the step's calls: the tool name, ``tool#i`` where a tool repeats
    (call ids may be long random strings, and every token costs)."""
    counts: dict[str, int] = {}
    for call in batch.calls:
        counts[call.tool] = counts.get(call.tool, 0) + 1
    seen: dict[str, int] = {}
    labels = {}
    for call in batch.calls:
        if counts[call.tool] == 1:
            labels[call.call_id] = call.tool
        else:
            labels[call.call_id] = f"{call.tool}#{seen.get(call.tool, 0)}"
            seen[call.tool] = seen.get(call.tool, 0) + 1
    return labels


def short_labels(batch: Batch) -> dict[str, str]:
    """Each call id's label in the default mode's prompt and answer: the tool name
    (`call_labels`) where that is shorter than the id, else the id; the ids themselves when
    the labels would not be unique or would name another call's id. Every token of the
    prompt, and every token the model writes, costs on a small CPU server: a LangGraph call
    id (``call_`` and 24 random characters) is about 15 tokens, written once per call in the
    answer and read once per call in each observation.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> from langgraph_devsched.schedulers.base import Batch
    >>> short_labels(Batch.of([("call_Vx3kPq9LmZ", "asr", ToolDeviceSpec()),
    ...                        ("c2", "embed", ToolDeviceSpec())]))
    {'call_Vx3kPq9LmZ': 'asr', 'c2': 'c2'}
    """
    tools = call_labels(batch)
    labels = {c: tools[c] if len(tools[c]) < len(c) else c for c in batch.call_ids}
    ids = set(batch.call_ids)
    clash = len(set(labels.values())) < len(labels) or any(
        label in ids and label != c for c, label in labels.items())
    return {c: c for c in batch.call_ids} if clash else labels


def candidates_text(batch: Batch, candidates: Sequence[Candidate]) -> str:
    """The numbered candidates: the first in full (``(best)`` if no other is predicted
    lower), the others as their difference to it.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> from langgraph_devsched.schedulers.agentic.modes.pick import Candidate
    >>> from langgraph_devsched.schedulers.base import Batch
    >>> b = Batch.of([("x1", "asr", ToolDeviceSpec()), ("x2", "ocr", ToolDeviceSpec())])
    >>> print(candidates_text(b, [Candidate({"x1": "gpu_now", "x2": "cpu"}, 100.0),
    ...                           Candidate({"x1": "gpu_now", "x2": "gpu_now"}, 130.0)]))
    1) 100 ms (best): asr=gpu_now ocr=cpu
    2) 130 ms: as 1 but ocr=gpu_now

    (Measured with Qwen2.5-Coder-1.5B: a relative "+0%" beside a tie drew picks of a worse
    candidate; the predictions first and "(best)" did not.)
    """
    labels = call_labels(batch)
    ids = list(batch.call_ids)
    lines = []
    best = candidates[0] if candidates else None
    lowest = min((c.predicted_ms for c in candidates), default=0.0)
    for n, cand in enumerate(candidates, start=1):
        ms = f"{cand.predicted_ms:.0f} ms"
        if best is None or n == 1:
            parts = " ".join(f"{labels[c]}={cand.mapping[c]}" for c in ids)
            label = " (best)" if cand.predicted_ms <= lowest else ""
            lines.append(f"{n}) {ms}{label}: {parts}")
            continue
        diff = [f"{labels[c]}={cand.mapping[c]}" for c in ids if cand.mapping[c] != best.mapping[c]]
        lines.append(f"{n}) {ms}: as 1 but {' '.join(diff)}")
    return "\n".join(lines)


def pick_prompt(
    batch: Batch, candidates: Sequence[Candidate], rules: HardConstraints, policy: str | None
) -> list[AnyMessage]:
    """Pick mode's two messages: the system message, the same for every pick consultation of
    a scheduler (a stable prefix), and the numbered candidates, lowest prediction first."""
    system = PICK_SYSTEM.format(constraints=json.dumps(rules.describe()))
    system += f"\nOperator policy: {policy}" if policy else ""
    k = len(candidates)
    spans = [c.predicted_ms for c in candidates]
    head = "Candidates, lowest predicted makespan first"
    if spans != sorted(spans):
        head = "Candidates (1 is the current scheduler's choice)"
    if k == 1:
        head = "Only candidate"
    ask = f"Pick 1-{k}." if k > 1 else "Pick 1."
    task = f"Step of {len(batch)} call(s). {head}:\n{candidates_text(batch, candidates)}\n{ask}"
    return [SystemMessage(system), HumanMessage(task)]


