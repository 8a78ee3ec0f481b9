"""Corrupt the monitor's persisted stats and load them: they must start cold, with a warning.

>>> import pathlib, tempfile
>>> from langgraph_devsched.monitor import RuntimeMonitor
>>> path = pathlib.Path(tempfile.mkdtemp()) / "stats.json"
>>> cold, problem = corrupt_and_reload(RuntimeMonitor(), path, b"[1, 2]")
>>> cold.state.step, problem
(0, None)
"""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.persist import MonitorStatsWarning
from langgraph_devsched.monitor.state import FORMAT_NAME, FORMAT_VERSION


def garbage_files() -> list[bytes]:
    """What a stats file may hold after a crash, a bad copy or tampering."""
    good = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
    return [
        b"\xff\xfe\x00\x81 not text",
        b'{"format": "' + FORMAT_NAME.encode() + b'", "version": ',
        b"[1, 2, 3]",
        b"",
        json.dumps({**good, "format": "something-else"}).encode(),
        json.dumps({**good, "version": 999}).encode(),
        json.dumps({**good, "step": "many", "stats": [1]}).encode(),
        pickle.dumps({"step": 5, "stats": {}}),  # written, never loaded: stats are JSON data
    ]


def corrupt_and_reload(
    monitor: RuntimeMonitor, path: Path, garbage: bytes
) -> tuple[RuntimeMonitor, str | None]:
    """Save ``monitor`` to ``path`` and reload it (must be exact), then overwrite the file
    with ``garbage`` and load it: return the loaded monitor and what went wrong, if anything."""
    monitor.save(path)
    if RuntimeMonitor.load(path).state != monitor.state:
        return monitor, "monitor stats did not survive a save/load round trip"
    path.write_bytes(garbage)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cold = RuntimeMonitor.load(path)
    warned = any(issubclass(w.category, MonitorStatsWarning) for w in caught)
    if cold.state.step == 0 and not cold.state.stats and warned:
        return cold, None
    return cold, f"corrupt stats {garbage[:40]!r} loaded as step {cold.state.step}"
