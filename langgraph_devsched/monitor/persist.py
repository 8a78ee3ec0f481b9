"""Persist monitor stats: a JSON file or a LangGraph `BaseStore`, with a format version.

Data only (JSON validated by pydantic, no pickle). A corrupt, foreign or future-version file
is rejected with a warning that says why, and the monitor starts cold; it never crashes.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "stats.json"
>>> save_file(MonitorState(step=3), path)
>>> load_file(path).step
3
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from langgraph_devsched.monitor.state import FORMAT_NAME, FORMAT_VERSION, MonitorState

logger = logging.getLogger(__name__)

STORE_NAMESPACE: tuple[str, ...] = ("langgraph_devsched", "monitor")
STORE_KEY = "stats"


class MonitorStatsWarning(UserWarning):
    """Persisted stats could not be used; the monitor starts cold."""


def _cold(where: str, why: str) -> MonitorState:
    message = f"monitor stats {where} ignored, starting cold: {why}"
    logger.warning(message)
    warnings.warn(message, MonitorStatsWarning, stacklevel=3)
    return MonitorState()


def state_from_data(data: Any, where: str) -> MonitorState:
    """Validate loaded data as a `MonitorState`, or start cold with a clear reason."""
    if not isinstance(data, dict):
        return _cold(where, f"expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT_NAME:
        return _cold(where, f"not a {FORMAT_NAME} file (format={data.get('format')!r})")
    if data.get("version") != FORMAT_VERSION:
        return _cold(
            where,
            f"format version {data.get('version')!r} is not supported (expected {FORMAT_VERSION})",
        )
    try:
        return MonitorState.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        return _cold(where, f"invalid content at {loc}: {first['msg']}")


def save_file(state: MonitorState, path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, path)


def load_file(path: str | Path) -> MonitorState:
    """The state saved at ``path``; a fresh one (and a warning) if it is missing or unusable."""
    path = Path(path)
    where = f"file {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        logger.info("no monitor stats at %s; starting cold", path)
        return MonitorState()
    except (OSError, UnicodeDecodeError) as exc:
        return _cold(where, f"cannot read it ({exc})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return _cold(where, f"not valid JSON ({exc.msg} at line {exc.lineno})")
    return state_from_data(data, where)


def save_store(
    state: MonitorState, store: Any, namespace: tuple[str, ...] = STORE_NAMESPACE,
    key: str = STORE_KEY,
) -> None:
    """Put ``state`` into a LangGraph `BaseStore` as one JSON item."""
    store.put(namespace, key, state.model_dump(mode="json"))


def load_store(
    store: Any, namespace: tuple[str, ...] = STORE_NAMESPACE, key: str = STORE_KEY
) -> MonitorState:
    """The state kept in ``store``; a fresh one (and a warning) if absent or unusable."""
    where = f"store item {'/'.join(namespace)}/{key}"
    try:
        item = store.get(namespace, key)
    except Exception as exc:  # a broken store must not take the app down
        return _cold(where, f"store read failed ({type(exc).__name__}: {exc})")
    if item is None:
        return MonitorState()
    return state_from_data(item.value, where)
