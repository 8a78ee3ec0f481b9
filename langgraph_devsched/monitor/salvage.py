"""Keep what validates of persisted monitor data: each bad entry dropped, the rest kept.

A stats file or store item with a bad value (a negative time, ``NaN``, infinity, a wrong
type, a malformed key) loses only the entry that holds it: one row of a table (``stats``,
``outcomes``, ``load_seen_ms``, ...) or one top-level field, which takes its default. The
rest loads, so one bad number does not throw away every measurement, and what loads is a
`MonitorState` the monitor and its schedulers can use (see `monitor.state` for the rules).

>>> from langgraph_devsched.monitor.state import FORMAT_NAME
>>> data = {"format": FORMAT_NAME, "version": 1, "step": 4,
...         "load_seen_ms": {"asr|gpu": -5.0, "ocr|gpu": 900.0}}
>>> state, dropped = salvage(data)
>>> state.step, state.load_seen_ms
(4, {'ocr|gpu': 900.0})
>>> dropped
["load_seen_ms.'asr|gpu': Input should be greater than or equal to 0 (got -5.0)"]
"""

from __future__ import annotations

from typing import Any, get_origin

from pydantic import ValidationError

from langgraph_devsched.monitor.state import MonitorState

TABLES = frozenset(
    name for name, info in MonitorState.model_fields.items() if get_origin(info.annotation) is dict
)
"""The fields of `MonitorState` that are tables: a bad row is dropped, not the table."""
MAX_ROUNDS = 4
"""Validation passes at most (each drops at least one entry); entries fail in the first,
table-wide checks (key parsing) in the second."""


class Unsalvageable(ValueError):
    """Nothing can be kept: the data's shape itself is wrong."""


def _said(err: Any) -> str:
    loc = err["loc"]
    text = ".".join(repr(p) if i == 1 and loc[0] in TABLES else str(p) for i, p in enumerate(loc))
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{text}: {msg} (got {_short(err.get('input'))})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad_rows(field: str, table: dict[Any, Any]) -> list[tuple[Any, str]]:
    """The rows of ``table`` that fail alone (a table-wide check named no row)."""
    bad = []
    for key, value in table.items():
        try:
            MonitorState.model_validate({field: {key: value}})
        except ValidationError as exc:
            err = exc.errors()[0]
            if len(err["loc"]) < 2:  # the table-wide check, on this row alone: name the row
                err = {**err, "loc": (field, key), "input": value}
            bad.append((key, _said(err)))
    return bad


def salvage(data: dict[str, Any]) -> tuple[MonitorState, list[str]]:
    """The valid part of ``data`` as a `MonitorState`, and what was dropped (one line each:
    where, why, what it held). `Unsalvageable` when dropping entries cannot make it valid."""
    data = dict(data)
    dropped: list[str] = []
    for _ in range(MAX_ROUNDS):
        try:
            return MonitorState.model_validate(data), dropped
        except ValidationError as exc:
            errors = exc.errors()
        before = len(dropped)
        for err in errors:
            loc = err["loc"]
            field = str(loc[0]) if loc else ""
            value = data.get(field)
            if field in TABLES and isinstance(value, dict):
                rows = (
                    [(loc[1], _said(err))] if len(loc) >= 2 and loc[1] in value
                    else _bad_rows(field, value)
                )
                table = dict(value)
                for key, why in rows:
                    if key in table:
                        del table[key]
                        dropped.append(why)
                data[field] = table
            elif field in data:
                del data[field]  # a scalar field, or a table that is no table: its default
                dropped.append(_said(err))
        if len(dropped) == before:
            raise Unsalvageable(_said(errors[0]) if errors else "invalid content")
    raise Unsalvageable(f"still invalid after dropping {len(dropped)} entries")
