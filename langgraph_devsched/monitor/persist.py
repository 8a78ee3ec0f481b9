"""Persist monitor stats: a JSON file or a LangGraph `BaseStore`, with a format version.

Data only (JSON validated by pydantic, no pickle). A corrupt, foreign or future-version file
is rejected with a warning that says why, and the monitor starts cold; a file whose entries
hold bad values (a negative time, a wrong type, a malformed key) loses those entries, with one
warning that names the file and each one dropped, and keeps the rest. Loading never raises,
whatever the file or the store item holds (binary garbage, JSON nested 100,000 deep, a
5,000-digit number, ``NaN``, malformed keys). At most `MAX_FILE_BYTES` (64 MiB) are read.
Saving writes a temp file unique to the call beside the target and renames it over the target
(`os.replace`), so concurrent saves of one path never collide and a reader sees a whole file.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "stats.json"
>>> save_file(MonitorState(step=3), path)
>>> load_file(path).step
3
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, NoReturn

from langgraph_devsched.monitor.salvage import Unsalvageable, salvage
from langgraph_devsched.monitor.state import FORMAT_NAME, FORMAT_VERSION, MonitorState

logger = logging.getLogger(__name__)

STORE_NAMESPACE: tuple[str, ...] = ("langgraph_devsched", "monitor")
STORE_KEY = "stats"
MAX_FILE_BYTES = 64 * 1024 * 1024
"""A stats file larger than this is not read (the monitor starts cold, with a warning)."""


MAX_LISTED = 5
"""A partial load's warning names at most this many dropped entries (and counts the rest)."""


class MonitorStatsWarning(UserWarning):
    """Persisted stats could not be used, in whole (the monitor starts cold) or in part (the
    bad entries were dropped)."""


def _warn(message: str) -> None:
    logger.warning(message)
    warnings.warn(message, MonitorStatsWarning, stacklevel=4)


def _cold(where: str, why: str) -> MonitorState:
    _warn(f"monitor stats {where} ignored, starting cold: {why}")
    return MonitorState()


def _partial(where: str, state: MonitorState, dropped: list[str]) -> MonitorState:
    listed = "; at ".join(dropped[:MAX_LISTED])
    more = f"; and {len(dropped) - MAX_LISTED} more" if len(dropped) > MAX_LISTED else ""
    _warn(
        f"monitor stats {where}: dropped {len(dropped)} invalid "
        f"entr{'y' if len(dropped) == 1 else 'ies'}, kept the rest (invalid content at "
        f"{listed}{more})"
    )
    return state


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
        state, dropped = salvage(data)
    except Unsalvageable as exc:
        return _cold(where, f"invalid content at {exc}")
    except RecursionError:
        return _cold(where, "invalid content: nested too deeply")
    except Exception as exc:  # nothing a store may hand back is allowed to take the app down
        return _cold(where, f"invalid content ({type(exc).__name__}: {exc})")
    return _partial(where, state, dropped) if dropped else state


def save_file(state: MonitorState, path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically (see `write_file`)."""
    write_file(state.model_dump_json(indent=1).encode("utf-8"), path)


def write_file(data: bytes, path: str | Path) -> None:
    """Write ``data`` to ``path`` atomically: a temp file unique to this call in the same
    directory, fsynced, then `os.replace`; the temp file is removed if anything fails."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a stats file is data, not a secret
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number the monitor keeps")


def _read_capped(path: Path) -> bytes:
    """At most `MAX_FILE_BYTES` + 1 bytes of a regular file (`OSError` for anything else)."""
    with path.open("rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return f.read(MAX_FILE_BYTES + 1)


def load_file(path: str | Path) -> MonitorState:
    """The state saved at ``path``; a fresh one (and a warning) if it is missing or unusable.

    Never raises: whatever the file holds, the worst case is a cold start with a warning."""
    path = Path(path)
    where = f"file {path}"
    try:
        raw = _read_capped(path)
    except FileNotFoundError:
        logger.info("no monitor stats at %s; starting cold", path)
        return MonitorState()
    except Exception as exc:  # OSError, and whatever an odd filesystem raises
        return _cold(where, f"cannot read it ({exc})")
    if len(raw) > MAX_FILE_BYTES:
        return _cold(where, f"cannot read it (larger than {MAX_FILE_BYTES} bytes)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _cold(where, f"cannot read it ({exc})")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return _cold(where, f"not valid JSON ({exc.msg} at line {exc.lineno})")
    except RecursionError:
        return _cold(where, "nested too deeply to be monitor stats")
    except Exception as exc:  # ValueError: a 5,000-digit integer, NaN, Infinity
        return _cold(where, f"not valid JSON ({exc})")
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
    try:
        data = item.value
    except Exception as exc:
        return _cold(where, f"store item unreadable ({type(exc).__name__}: {exc})")
    return state_from_data(data, where)
