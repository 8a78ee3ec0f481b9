"""The string keys of the monitor's state: built from any tool name, parsed back strictly.

The persisted state is plain JSON, so its tables are keyed by strings: a stats key is
``"tool|option|context"``, a shape the sorted tool names joined by ``,``, a placement the sorted
``tool=option`` pairs joined by ``,``, an outcome key ``"shape|placement"`` and a probe-budget
key ``"shape@bg"``. Inside a key a tool name is escaped (``%`` ``|`` ``,`` ``=`` as ``%25``
``%7C`` ``%2C`` ``%3D``), so every name round-trips; names without those characters are written
as they are (format version 1 is unchanged for them). Each ``parse_*`` is the inverse of its
builder and raises `ValueError` on anything a builder cannot produce.

>>> stats_key("a|b,c", "cpu", "gpu0-cpu0-low-idle")
'a%7Cb%2Cc|cpu|gpu0-cpu0-low-idle'
>>> parse_stats_key(_)
('a|b,c', 'cpu', 'gpu0-cpu0-low-idle')
>>> placement_key([("b", "cpu"), ("a=1", "gpu_now")])
'a%3D1=gpu_now,b=cpu'
>>> parse_outcome_key("a%3D1,b|" + _)
(('a=1', 'b'), (('a=1', 'gpu_now'), ('b', 'cpu')))
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import get_args

from langgraph_devsched.monitor.context import BackgroundBucket, LoadContext
from langgraph_devsched.options import DeviceOption, parse_option

_ESCAPES = {"%": "%25", "|": "%7C", ",": "%2C", "=": "%3D"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
_SPECIAL = re.compile(r"[%|,=]")
_ESCAPED = re.compile(r"%(25|7C|2C|3D)")
_BACKGROUNDS: tuple[str, ...] = get_args(BackgroundBucket)

Shape = tuple[str, ...]
Placement = tuple[tuple[str, DeviceOption], ...]


def escape_tool(tool: str) -> str:
    """``tool`` with the key separators (and ``%``) escaped."""
    return _SPECIAL.sub(lambda m: _ESCAPES[m.group()], tool) if _SPECIAL.search(tool) else tool


def unescape_tool(text: str) -> str:
    """Inverse of `escape_tool`; `ValueError` on a separator or an unknown escape."""
    if "%" not in text and "|" not in text and "," not in text and "=" not in text:
        return text
    tool = _ESCAPED.sub(lambda m: _UNESCAPES[m.group()], text)
    if escape_tool(tool) != text:
        raise ValueError(f"malformed tool name {text!r} in a key (bad escape or separator)")
    return tool


def stats_key(tool: str, option: str, context: str) -> str:
    return f"{escape_tool(tool)}|{option}|{context}"


def shape_key(tools: Iterable[str]) -> str:
    return ",".join(escape_tool(t) for t in sorted(tools))


def placement_key(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f"{escape_tool(t)}={o}" for t, o in sorted(pairs))


def outcome_key(shape: str, placement: str) -> str:
    return f"{shape}|{placement}"


def probe_key(shape: str, bg: str) -> str:
    return f"{shape}@{bg}"


def parse_context(text: str) -> str:
    """``text`` if it is a `LoadContext` key; `ValueError` otherwise."""
    LoadContext.parse(text)
    return text


def parse_stats_key(key: str) -> tuple[str, DeviceOption, str]:
    """``(tool, option, context)`` of a stats key."""
    parts = key.split("|")
    if len(parts) != 3:
        raise ValueError(f"malformed stats key {key!r} (expected 'tool|option|context')")
    tool, option, context = parts
    return (unescape_tool(tool), parse_option(option, where=f"stats key {key!r}"),
            parse_context(context))


def parse_shape(key: str) -> Shape:
    """The sorted tool names of a shape key (never empty: ``""`` is the tool named ``""``)."""
    tools = tuple(unescape_tool(t) for t in key.split(","))
    if list(tools) != sorted(tools):
        raise ValueError(f"malformed shape {key!r} (tool names not sorted)")
    return tools


def parse_placement(key: str) -> Placement:
    """The sorted ``(tool, option)`` pairs of a placement key."""
    pairs = []
    for item in key.split(","):
        tool, sep, option = item.partition("=")
        if not sep:
            raise ValueError(f"malformed placement {key!r} (expected 'tool=option,...')")
        pairs.append((unescape_tool(tool), parse_option(option, where=f"placement {key!r}")))
    if pairs != sorted(pairs):
        raise ValueError(f"malformed placement {key!r} (pairs not sorted)")
    return tuple(pairs)


def parse_outcome_key(key: str) -> tuple[Shape, Placement]:
    """``(shape, placement)`` of an outcome key; the placement places exactly the shape."""
    parts = key.split("|")
    if len(parts) != 2:
        raise ValueError(f"malformed outcome key {key!r} (expected 'shape|placement')")
    shape, placement = parse_shape(parts[0]), parse_placement(parts[1])
    if tuple(t for t, _ in placement) != shape:
        raise ValueError(f"malformed outcome key {key!r} (placement is not of the shape)")
    return shape, placement


def parse_probe_key(key: str) -> tuple[Shape, str]:
    """``(shape, background bucket)`` of a probe-budget key."""
    shape, sep, bg = key.rpartition("@")
    if not sep or bg not in _BACKGROUNDS:
        raise ValueError(f"malformed probe key {key!r} (expected 'shape@idle' or 'shape@busy')")
    return parse_shape(shape), bg
