"""The ``pick`` consultation: the model chooses one of the twin's best mappings by number.

For a small model on a CPU every token costs: a 1.5B model on two shared cores reads about
12 prompt tokens/s and writes about 4. In ``pick`` mode the scheduler ranks the step's
mappings with the monitor's twin (`agentic_guard.TwinView`), holds each to the hard
constraints, keeps the ``k`` best distinct ones (`pick_candidates`), and shows them numbered,
each with its predicted makespan and a one-line difference to the first (`candidates_text`).
The model answers ``{"pick": N}`` (a short ``"reason"`` may follow; the prompt does not ask
for one, as every generated token costs):

- ``json_schema``: ``response_format`` with `pick_schema`, whose ``pick`` is an enum of
  1..k, so a server that constrains decoding (llama.cpp, vLLM, OpenAI) cannot answer
  anything else;
- ``text``: nothing constrained; the reply is read as that object or as a lone integer.

``auto`` starts with ``json_schema`` and moves to ``text`` when the endpoint gives no answer
or rejects the request (`PICK_CHAIN`). The system message is the same for every
consultation of a scheduler (`pick_system`), so a server's prompt cache keeps it, and only
the step's few lines are read anew. The picked candidate's mapping is the answer; it is
repaired and guarded like any other.

>>> parse_pick('{"pick": 2, "reason": "fewer GPU calls"}', 3)
(2, 'fewer GPU calls')
>>> parse_pick("Candidate 3.", 3), parse_pick("1 or 2", 3), parse_pick("7", 3)
((3, ''), None, None)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, Field, ValidationError, field_validator

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.agentic_answer import HardConstraints, ParsedAnswer, repair
from langgraph_devsched.schedulers.agentic_consult import (
    ChannelState,
    DeadlineError,
    Outcome,
    Tally,
)
from langgraph_devsched.schedulers.agentic_model import AnswerChannel, bind_turn

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langgraph_devsched.schedulers.agentic_guard import TwinView
    from langgraph_devsched.schedulers.base import Batch
    from langgraph_devsched.telemetry import DeviceState

PICK_CHAIN: tuple[AnswerChannel, ...] = ("json_schema", "text")
"""The ``auto`` chain of a pick consultation (tool channels are not used for a pick)."""
PICK_TOOL = "submit_pick"
PICK_MAX_TOKENS = 48
"""Completion tokens of a pick turn: ``{"pick": N, "reason": ...}`` is at most ~25."""
PICK_REASON_CHARS = 40
DEFAULT_PICK_CANDIDATES = 3
MAX_SCANNED = 512
"""Ranked mappings looked at for ``k`` distinct ones after the hard-constraint repair."""
MAX_PICK_TEXT = 4000

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


class PickAnswer(BaseModel):
    """The model's pick: a candidate's number (1-based) and an optional short reason."""

    pick: int = Field(ge=1, description="the number of the chosen candidate mapping")
    reason: str = Field("", description="a few words: why this candidate")

    @field_validator("reason", mode="before")
    @classmethod
    def _short(cls, value: Any) -> str:
        return "" if value is None else str(value)[:PICK_REASON_CHARS * 2]


_PICK_KEYS = ("pick", "candidate", "choice", "index", "answer", "number")
_INT = re.compile(r"(?<![\w.])(\d+)(?![\w])")
_KEYED = re.compile(r'"(?:pick|candidate|choice|index)"\s*:\s*"?(\d+)')


def _from_json(text: str) -> Any:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except ValueError:
        return None


def parse_pick(text: str, k: int) -> tuple[int, str] | None:
    """The candidate number (1..k) and reason in a reply, else None.

    Read as ``{"pick": N, "reason": ...}`` (``candidate``/``choice``/``index`` also; a reply
    cut at the token cap still names its pick), else as the only integer in the text
    (``"2"``, ``"Candidate 2."``); a text with several integers, or one out of range, is no
    answer.
    """
    text = text[:MAX_PICK_TEXT]
    value = _from_json(text)
    if isinstance(value, Mapping):
        key = next((key for key in _PICK_KEYS if key in value), None)
        if key is not None:
            try:
                answer = PickAnswer.model_validate(
                    {"pick": value[key], "reason": value.get("reason")}
                )
            except ValidationError:
                return None
            return (answer.pick, answer.reason) if answer.pick <= k else None
    keyed = _KEYED.search(text)  # a reply cut at the token cap: '{"pick": 2, "reason": "..'
    if keyed is not None:
        n = int(keyed.group(1))
        return (n, "") if 1 <= n <= k else None
    numbers = {int(n) for n in _INT.findall(text)}
    if len(numbers) == 1:
        (n,) = numbers
        if 1 <= n <= k:
            return n, ""
    return None


def pick_schema(k: int) -> dict[str, Any]:
    """The pick answer's JSON schema for ``response_format``: ``pick`` one of 1..k, an
    optional reason of at most `PICK_REASON_CHARS` characters.

    >>> pick_schema(2)["properties"]["pick"]
    {'type': 'integer', 'enum': [1, 2]}
    """
    return {
        "type": "object",
        "properties": {
            "pick": {"type": "integer", "enum": list(range(1, max(1, k) + 1))},
            "reason": {"type": "string", "maxLength": PICK_REASON_CHARS},
        },
        "required": ["pick"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class Candidate:
    """One mapping the model may pick, held to the hard constraints, and its prediction."""

    mapping: dict[str, DeviceOption]
    predicted_ms: float


_DEMAND = {"cpu": 0, "gpu_queued": 1, "gpu_now": 2}


def pick_candidates(
    twin_view: TwinView,
    device: DeviceState,
    constraints: HardConstraints,
    k: int,
    *,
    vram_seen_mb: Mapping[str, float] | None = None,
    within: float | None = None,
) -> list[Candidate]:
    """The twin's ``k`` best distinct mappings after the hard-constraint repair, best first
    (ties: fewer GPU options first). ``within``: only those predicted at most this times the
    best (the guard's ratio: a pick beyond it would be rejected anyway); the best is kept."""
    batch = twin_view.batch
    seen: set[tuple[str, ...]] = set()
    found: list[Candidate] = []
    for ms, mapping in twin_view.rank()[:MAX_SCANNED]:
        fixed, causes = repair(
            ParsedAnswer(dict(mapping)), batch, device, constraints, fallback={},
            vram_seen_mb=vram_seen_mb,
        )
        key = tuple(fixed[c] for c in batch.call_ids)
        if key in seen:
            continue
        seen.add(key)
        found.append(Candidate(fixed, twin_view.predict(fixed) if causes else ms))
        if len(found) >= 4 * k:
            break
    found.sort(key=lambda c: (c.predicted_ms, [_DEMAND[c.mapping[i]] for i in batch.call_ids]))
    if within is not None and found:
        limit = within * found[0].predicted_ms + 1e-9
        found = [found[0], *(c for c in found[1:] if c.predicted_ms <= limit)]
    return found[:k]


def with_lead(
    lead: Candidate | None, candidates: Sequence[Candidate], k: int
) -> list[Candidate]:
    """``lead`` (the fallback scheduler's own mapping) first, then the other ``candidates``,
    ``k`` in all; ``candidates`` alone without a lead."""
    if lead is None:
        return list(candidates)[:k]
    rest = [c for c in candidates if c.mapping != lead.mapping]
    return [lead, *rest][: max(1, k)]


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


def candidates_text(batch: Batch, candidates: Sequence[Candidate]) -> str:
    """The numbered candidates: the first in full (``(best)`` if no other is predicted
    lower), the others as their difference to it.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
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


def pick_system(constraints: HardConstraints, policy: str | None) -> str:
    """The system message of every pick consultation of a scheduler (a stable prefix)."""
    text = PICK_SYSTEM.format(constraints=json.dumps(constraints.describe()))
    return text + (f"\nOperator policy: {policy}" if policy else "")


def pick_task(batch: Batch, candidates: Sequence[Candidate]) -> str:
    """The step's part of the prompt: the numbered candidates, lowest prediction first."""
    k = len(candidates)
    spans = [c.predicted_ms for c in candidates]
    head = "Candidates, lowest predicted makespan first"
    if spans != sorted(spans):
        head = "Candidates (1 is the current scheduler's choice)"
    if k == 1:
        head = "Only candidate"
    ask = f"Pick 1-{k}." if k > 1 else "Pick 1."
    return f"Step of {len(batch)} call(s). {head}:\n{candidates_text(batch, candidates)}\n{ask}"


@dataclass
class PickConsultation:
    """One pick consultation: a single model turn (a second through ``text`` under
    ``auto``), read inside the deadline; same interface as `agentic_consult.Consultation`."""

    model: BaseChatModel
    batch: Batch
    candidates: list[Candidate]
    system: str
    channel: ChannelState
    max_tokens: int | None
    deadline: float
    clock: Callable[[], float] = time.monotonic
    on_llm_call: Callable[[], None] | None = None
    tally: Tally = field(default_factory=lambda: Tally(mode="pick"))
    replies: list[AnyMessage] = field(default_factory=list)
    lead: bool = False
    _retried: bool = False
    """Whether candidate 1 is the fallback scheduler's own mapping (then picking it is never
    guarded: a rejection would fall back to that very mapping)."""

    def __post_init__(self) -> None:
        self.tally.candidates = len(self.candidates)

    def prompt(self) -> list[AnyMessage]:
        return [SystemMessage(self.system), HumanMessage(pick_task(self.batch, self.candidates))]

    def only(self) -> Outcome:
        """The one candidate as the answer, the model not asked (there is nothing to pick)."""
        chosen = self.candidates[0]
        return Outcome(
            ParsedAnswer(dict(chosen.mapping), "the only candidate near the best prediction"),
            via="one_candidate", tally=self.tally, pick=1, unguarded=self.lead,
            skipped="one_candidate",
        )

    def graph(self) -> None:
        """Nothing to compile (one turn, no graph)."""
        return None

    def _bound(self, channel: AnswerChannel) -> Any:
        left = self.deadline - self.clock()
        if left <= 0:
            raise DeadlineError("the consultation's deadline passed")
        self.tally.channel = channel
        self.tally.channels_tried.append(channel)
        self.tally.llm_calls += 1
        if self.on_llm_call is not None:
            self.on_llm_call()
        return bind_turn(
            self.model, [], channel=channel, max_tokens=self.max_tokens, timeout_s=left,
            schema=pick_schema(len(self.candidates)), schema_name=PICK_TOOL,
        )

    def _count(self, reply: Any) -> None:
        usage = getattr(reply, "usage_metadata", None) or {}
        self.tally.prompt_tokens += int(usage.get("input_tokens") or 0)
        details = usage.get("input_token_details") or {}
        self.tally.cached_tokens += int(details.get("cache_read") or 0)

    def _read(self, reply: Any) -> Outcome | None:
        self._count(reply)
        self.replies.append(reply)
        text = getattr(reply, "content", "")
        if not isinstance(text, str):
            text = " ".join(
                str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in text
            )
        found = parse_pick(text, len(self.candidates))
        if found is None:
            return None
        n, reason = found
        chosen = self.candidates[n - 1]
        why = f"pick {n}/{len(self.candidates)}" + (f" ({reason.strip()})" if reason else "")
        return Outcome(
            ParsedAnswer(dict(chosen.mapping), why), via="pick", tally=self.tally, pick=n,
            messages=[*self.prompt(), *self.replies], unguarded=self.lead and n == 1,
        )

    def _next(self, exc: Exception | None) -> Outcome | None:
        """After a turn without an answer: None to ask again (``auto`` moved on), else the
        failure. A request cut at the deadline is a timeout and leaves the channel as is."""
        if self.clock() >= self.deadline:
            return Outcome(failure="timeout", detail="the consultation's deadline passed",
                           tally=self.tally)
        if exc is not None and getattr(exc, "status_code", None) is None and not self._retried:
            # a transport error (e.g. a pooled keep-alive connection the server closed) says
            # nothing about the channel: the same channel once more
            self._retried = True
            return None
        if self.channel.advance():
            return None
        if exc is not None:
            return Outcome(failure="llm_error", detail=f"{type(exc).__name__}: {exc}"[:300],
                           tally=self.tally)
        return Outcome(failure="no_answer", detail="the reply names no candidate number",
                       tally=self.tally, messages=[*self.prompt(), *self.replies])

    def _after(self, reply: Any = None, exc: Exception | None = None) -> Outcome | None:
        """What one turn ended in: the outcome, or None to ask again."""
        if isinstance(exc, DeadlineError):
            return Outcome(failure="timeout", detail=str(exc), tally=self.tally)
        if exc is not None:
            return self._next(exc)
        outcome = self._read(reply)
        return outcome if outcome is not None else self._next(None)

    def invoke(self, config: RunnableConfig) -> Outcome:
        while True:
            try:
                reply = self._bound(self.channel.current).invoke(self.prompt(), config)
            except Exception as exc:
                outcome = self._after(exc=exc)
            else:
                outcome = self._after(reply)
            if outcome is not None:
                return outcome

    async def ainvoke(self, config: RunnableConfig) -> Outcome:
        while True:
            try:
                reply = await self._bound(self.channel.current).ainvoke(self.prompt(), config)
            except Exception as exc:
                outcome = self._after(exc=exc)
            else:
                outcome = self._after(reply)
            if outcome is not None:
                return outcome
