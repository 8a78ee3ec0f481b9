"""The mappings the evidence admits, offered to the model as its only answers.

The guard vetoes an answer after the model gave it: refuted by measurement, predicted by the
twin beyond ``guard_ratio`` of the best, or an exploration the shape's budget does not cover
(`exploration`). Each veto is a consultation spent for nothing: measured with
Qwen2.5-Coder-1.5B over the 17 built-ins at 20 rounds, 46 of 131 answers were vetoed, and
leaving refuted mappings out of the observations did not stop the model composing them.

So before it asks, the scheduler screens the step's answers with the very checks that judge
an answer (`admitted`), and the json_schema channel constrains decoding to the survivors
(`admitted_schema`: one ``anyOf`` branch per mapping, in the answer's flat ``{call_id:
option}`` shape), asking only for the calls whose option differs among them (`open_calls`:
the others are settled, named in the task and filled in). The answers screened
(`candidates`): every one built from each call's allowed values, at most `MAX_ENUMERATED`;
for a larger step, where no unmeasured deviation can run (no exploration funded), the
policy's mapping and the shape's measured ones, which are then all the guard can admit (on
several GPUs spelled with their GPUs, ``gpu_now@1``). Answers the same in effect as the
policy's (``gpu_now`` or ``gpu_queued`` for the one GPU call) count once. The model still
chooses among everything the evidence has not ruled out; the guard still judges whatever
comes back (a server may ignore the schema). Where one mapping alone survives there is
nothing to choose: the step takes it without asking (``skipped="one_admitted"``). Otherwise
(a larger step with exploration funded, or nothing surviving) the per-call enums apply as
before.

>>> values = {"a": ["cpu", "gpu_now"], "b": ["cpu", "gpu_now"]}
>>> answers = candidates(values, [{"a": "gpu_now", "b": "cpu"}])
>>> answers[0], len(answers)
({'a': 'gpu_now', 'b': 'cpu'}, 4)
>>> admitted(answers, lambda m: None if m["a"] == "cpu" else m["b"] == "cpu")
[{'a': 'gpu_now', 'b': 'cpu'}, {'a': 'gpu_now', 'b': 'gpu_now'}]
>>> candidates(values, [], limit=3) is None
True
>>> candidates(values, [{"a": "cpu", "b": "cpu"}], complete=True, limit=3)
[{'a': 'cpu', 'b': 'cpu'}]
>>> admitted_schema(["a", "b"], [{"a": "cpu", "b": "cpu"}])["anyOf"][0]["properties"]
{'a': {'const': 'cpu'}, 'b': {'const': 'cpu'}}
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

MAX_ENUMERATED = 81
"""Answers screened at most by enumeration (3 options for 4 calls): each is a twin
prediction and the guard's checks, a few ms in all beside a consultation of seconds."""


def candidates(
    values: Mapping[str, Sequence[str]],
    known: Sequence[Mapping[str, str]],
    *,
    complete: bool = False,
    limit: int = MAX_ENUMERATED,
) -> list[dict[str, str]] | None:
    """The answers to screen, ``known`` first (the policy's mapping first, then the measured
    ones), each once: with every answer built from ``values`` (each call's allowed values,
    in call order) where there are at most ``limit``; else ``known`` alone where it is
    ``complete`` (no other answer can pass), else None (not screened)."""
    ids = list(values)
    if not ids:
        return None
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for answer in known:
        if set(answer) == set(ids):
            out.setdefault(tuple(answer[c] for c in ids), {c: answer[c] for c in ids})
    if math.prod(len(values[c]) for c in ids) <= limit:
        for combo in itertools.product(*(values[c] for c in ids)):
            out.setdefault(combo, dict(zip(ids, combo, strict=True)))
    elif not complete:
        return None
    return list(out.values())


def admitted(
    answers: Iterable[dict[str, str]], judge: Callable[[dict[str, str]], bool | None]
) -> list[dict[str, str]]:
    """The ``answers`` the guard lets run, in order; ``judge`` says of each: None (it may not
    run), True (it may, and is the policy's mapping in effect), False (a deviation that may
    run). Of the answers the same in effect as the policy's, the first alone is kept."""
    out: list[dict[str, str]] = []
    same = False
    for answer in answers:
        verdict = judge(answer)
        if verdict is None or (verdict and same):
            continue
        same = same or verdict
        out.append(answer)
    return out


def open_calls(call_ids: Sequence[str], mappings: Sequence[Mapping[str, str]]
               ) -> tuple[list[str], dict[str, str]]:
    """The calls whose option differs among ``mappings`` (what the model is asked), and the
    others with the one option every admitted mapping gives them (settled by the evidence:
    not asked, a token of output each saved; a 1.5B model on two CPU cores writes about 11
    tokens a second, 60 for a seven-call answer).

    >>> open_calls(["a", "b"], [{"a": "cpu", "b": "cpu"}, {"a": "gpu_now", "b": "cpu"}])
    (['a'], {'b': 'cpu'})
    """
    asked = [c for c in call_ids if len({m[c] for m in mappings}) > 1]
    settled = {c: mappings[0][c] for c in call_ids if c not in asked} if mappings else {}
    return asked, settled


def admitted_schema(call_ids: Sequence[str], mappings: Sequence[Mapping[str, str]]
                    ) -> dict[str, Any]:
    """The json_schema channel's schema admitting exactly ``mappings`` restricted to
    ``call_ids``: the flat answer object of `model.answer_schema`, one ``anyOf`` branch per
    distinct mapping with a ``const`` per call id (llama.cpp and vLLM compile it to a
    grammar)."""
    distinct = list({tuple(m[c] for c in call_ids): m for m in mappings}.values())
    return {"anyOf": [{
        "type": "object",
        "properties": {c: {"const": m[c]} for c in call_ids},
        "required": list(call_ids),
        "additionalProperties": False,
    } for m in distinct]}
