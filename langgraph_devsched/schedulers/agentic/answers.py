"""Finding the agentic answer in what a model said: linear, size-capped, wrapper-tolerant.

Small models put the answer in many places: the ``submit_mapping`` tool call, a JSON object
in the text (often in a code fence), a tool-call-shaped wrapper written as text
(``{"name": "submit_mapping", "arguments": ...}``), or a first turn before they were asked.
`find_answer` looks at every turn, newest first, and returns the first answer-shaped value.

The scan is linear in the text and reads at most `MAX_ANSWER_CHARS` characters: one pass
finds the balanced ``{...}``/``[...]`` spans (strings and escapes respected), and only spans
of the outer `MAX_DEPTH` levels are decoded, each level's spans being disjoint.

>>> answer_from_text('Sure: ```json {"assignments": {"c1": "cpu"}, "reason": "r"} ``` done')
{'assignments': {'c1': 'cpu'}, 'reason': 'r'}
>>> answer_from_text('{"name": "submit_mapping", "arguments": [{"call_id": "c1", "option": "x"}]}')
{'assignments': [{'call_id': 'c1', 'option': 'x'}]}
>>> answer_from_text("{" * 300_000) is None
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from langgraph_devsched.options import DeviceOption

ANSWER_TOOL = "submit_mapping"
MAX_ANSWER_CHARS = 32_000
"""Text beyond this many characters is not read (an answer for 13 calls is ~1.5 k)."""
MAX_DEPTH = 3
"""How many nesting levels of JSON spans are tried (a wrapper inside prose inside a fence)."""
MAX_UNWRAP = 4

_ASSIGNMENT_KEYS = ("assignments", "mapping", "placements", "options")
_WRAPPER_KEYS = ("arguments", "args", "parameters", "input", "function", ANSWER_TOOL)


def _spans(text: str) -> list[list[tuple[int, int]]]:
    """Balanced bracket spans by depth (0 = outermost), in one pass over ``text``."""
    levels: list[list[tuple[int, int]]] = [[] for _ in range(MAX_DEPTH)]
    stack: list[tuple[str, int]] = []
    closing = {"}": "{", "]": "["}
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"' and stack:
            in_string = True
        elif ch in "{[":
            stack.append((ch, i))
        elif ch in closing:
            if stack and stack[-1][0] == closing[ch]:
                _, start = stack.pop()
                depth = len(stack)
                if depth < MAX_DEPTH:
                    levels[depth].append((start, i + 1))
            else:
                stack.clear()  # unbalanced: start afresh after this point
    return levels


def _is_assignment_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, Mapping) and "call_id" in v for v in value)
    )


def unwrap_answer(value: Any, call_ids: Collection[str] = ()) -> dict[str, Any] | None:
    """``value`` as ``{"assignments": ..., "reason"?}`` if it is an answer in a known wrapper.

    Accepted: the answer itself (``assignments`` as a list or a ``{call_id: option}``
    mapping; ``mapping``/``placements``/``options`` as aliases), a bare list of
    ``{call_id, option}``, and wrappers ``{"name", "arguments"|"args"|"parameters"}``,
    ``{"function": {...}}``, ``{"submit_mapping": {...}}``, with arguments as JSON text;
    and, given the step's ``call_ids``, the flat ``{call_id: option}`` object the json_schema
    channel asks for.

    >>> call = {"name": "submit_mapping", "arguments": '{"mapping": {"a": "cpu"}}'}
    >>> unwrap_answer({"function": call})
    {'assignments': {'a': 'cpu'}}
    >>> unwrap_answer({"name": "step_calls", "arguments": {}}) is None
    True
    """
    for _ in range(MAX_UNWRAP):
        if isinstance(value, str):
            try:
                value = json.loads(value[:MAX_ANSWER_CHARS])
            except ValueError:
                return None
        if _is_assignment_list(value):
            return {"assignments": value}
        if not isinstance(value, Mapping):
            return None
        if call_ids and value and all(k in call_ids and isinstance(v, str)
                                      for k, v in value.items()):
            return {"assignments": dict(value)}
        for key in _ASSIGNMENT_KEYS:
            if key in value and isinstance(value[key], (Mapping, list)):
                out = {"assignments": value[key]}
                if "reason" in value:
                    out["reason"] = value["reason"]
                return out
        name = value.get("name")
        if isinstance(name, str) and name != ANSWER_TOOL:
            return None  # another tool's call, written out
        inner = next((value[k] for k in _WRAPPER_KEYS if k in value), None)
        if inner is None:
            return None
        value = inner
    return None


def json_values(text: str, max_chars: int = MAX_ANSWER_CHARS) -> Iterator[Any]:
    """Every JSON object or array in the first ``max_chars`` characters of ``text``, outer
    spans first (each decoded once; the one reader of JSON inside text)."""
    text = text[:max_chars]
    if "{" not in text and "[" not in text:
        return
    for level in _spans(text):
        for start, end in sorted(level):
            try:
                yield json.loads(text[start:end])
            except ValueError:
                continue


def answer_from_text(
    text: str, *, max_chars: int = MAX_ANSWER_CHARS, call_ids: Collection[str] = ()
) -> dict[str, Any] | None:
    """The first answer-shaped JSON value in the first ``max_chars`` characters of ``text``."""
    for value in json_values(text, max_chars):
        found = unwrap_answer(value, call_ids)
        if found is not None:
            return found
    return None


def text_of(message: Any) -> str:
    """A message's text (its content's text parts)."""
    text = getattr(message, "text", "")
    if isinstance(text, str):
        return str(text)
    return text() if callable(text) else ""  # older langchain-core: a method


def find_answer(
    messages: Sequence[Any], call_ids: Collection[str] = ()
) -> tuple[dict[str, Any], str] | None:
    """The newest answer in any AI turn of ``messages``, and where it was found.

    Where: ``"tool_call"`` (the ``submit_mapping`` call), ``"wrapped_call"`` (another tool
    call whose arguments hold an answer) or ``"text"``.
    """
    for message in reversed(messages):
        if getattr(message, "type", None) != "ai":
            continue
        calls = getattr(message, "tool_calls", None) or []
        for call in calls:
            if call.get("name") == ANSWER_TOOL:
                args = call.get("args")
                return unwrap_answer(args, call_ids) or dict(args or {}), "tool_call"
        for call in calls:
            found = unwrap_answer(call.get("args"), call_ids)
            if found is not None:
                return found, "wrapped_call"
        text = text_of(message)
        found = answer_from_text(text, call_ids=call_ids) if text else None
        if found is not None:
            return found, "text"
    return None


class CallOption(BaseModel):
    """The option chosen for one call of the step."""

    call_id: str = Field(description="a call id of this step, exactly as given")
    option: DeviceOption = Field(description="gpu_now, gpu_queued or cpu")


class MappingAnswer(BaseModel):
    """Submit the final device option for every call of the step, with a short reason."""

    assignments: list[CallOption] = Field(description="one entry per call id of the step")
    reason: str = Field(description="one or two sentences: why this mapping")


@dataclass(frozen=True)
class ParsedAnswer:
    """What a submitted answer said, before any checks: raw options by call id."""

    options: dict[str, str]
    reason: str = ""
    issues: tuple[str, ...] = ()


def parse_answer(args: Any) -> ParsedAnswer:
    """Read ``submit_mapping`` arguments leniently; malformed entries become ``issues``.

    Accepts ``{"assignments": [{"call_id", "option"}, ...], "reason"}`` and the common slip
    ``{"assignments": {call_id: option}}``.

    >>> parse_answer({"assignments": {"c1": "cpu"}, "reason": "x"}).options
    {'c1': 'cpu'}
    >>> parse_answer({"assignments": [{"id": "c1"}]}).issues
    ("assignment 0 is not {call_id, option}: {'id': 'c1'}",)
    """
    if not isinstance(args, Mapping):
        return ParsedAnswer({}, issues=(f"answer is not an object: {args!r:.200}",))
    raw = args.get("assignments")
    if isinstance(raw, Mapping):
        raw = [{"call_id": k, "option": v} for k, v in raw.items()]
    if not isinstance(raw, list):
        return ParsedAnswer({}, str(args.get("reason") or "")[:500], ("no assignments list",))
    options: dict[str, str] = {}
    issues: list[str] = []
    for i, item in enumerate(raw):
        if not (isinstance(item, Mapping) and {"call_id", "option"} <= item.keys()):
            issues.append(f"assignment {i} is not {{call_id, option}}: {item!r:.200}")
            continue
        call_id, option = str(item["call_id"]), str(item["option"])
        if call_id in options and options[call_id] != option:
            issues.append(f"call {call_id!r} given twice; kept {options[call_id]!r}")
            continue
        options[call_id] = option
    return ParsedAnswer(options, str(args.get("reason") or "")[:500], tuple(issues))


PICK_REASON_CHARS = 40
MAX_PICK_TEXT = 4000
_PICK_KEYS = ("pick", "candidate", "choice", "index", "answer", "number")
_KEYED = re.compile(r'"(?:pick|candidate|choice|index)"\s*:\s*"?([0-9]+)')
_INT = re.compile(r"(?<![\w.])([0-9]+)(?![\w])")  # ASCII digits: int() reads no others


def parse_pick(text: str, k: int) -> tuple[int, str] | None:
    """The candidate number (1..k) and reason in a reply, else None.

    Read as ``{"pick": N, "reason": ...}`` (``candidate``/``choice``/``index`` also; a reply
    cut at the token cap still names its pick), else as the only integer in the text
    (``"2"``, ``"Candidate 2."``); a text with several integers, or one out of range, is no
    answer.
    """
    text = text[:MAX_PICK_TEXT]
    for value in json_values(text):
        key = next((key for key in _PICK_KEYS if key in value), None) if isinstance(
            value, Mapping) else None
        if key is None:
            continue
        n = value[key]
        n = int(n) if isinstance(n, str) and n.strip().isascii() and n.strip().isdigit() else n
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= k:
            return None
        return n, str(value.get("reason") or "")[: 2 * PICK_REASON_CHARS]
    keyed = _KEYED.search(text)  # a reply cut at the token cap: '{"pick": 2, "reason": "..'
    numbers = [int(keyed.group(1))] if keyed else list({int(n) for n in _INT.findall(text)})
    if len(numbers) == 1 and 1 <= numbers[0] <= k:
        return numbers[0], ""
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


