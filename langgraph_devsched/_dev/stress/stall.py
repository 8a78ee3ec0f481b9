"""How long the machine itself stalls a healthy sleeper: the allowance a wall-clock bound
needs on a loaded machine, measured, not guessed.

`MachineStall` runs a tiny Python process that sleeps 10 ms at a time and reports each new
longest overshoot; ``stall_s`` is the longest so far. The process shares nothing with the
caller (no GIL, no event loop), so what the caller does — a blocked event loop, a regex
holding the GIL for seconds — never shows in it, while a starved 2-core machine does. A
bound then reads ``limit + stall_s``: the same verdict on a machine ten times more loaded.

>>> import time
>>> with MachineStall() as stall:
...     time.sleep(0.05)
>>> 0.0 <= stall.stall_s < 60.0
True
"""

from __future__ import annotations

import subprocess
import sys
import threading
from types import TracebackType

_SLEEPER = """
import sys, threading, time
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
worst, last = 0.0, time.perf_counter()
print(0.0, flush=True)
while not done.wait(0.01):
    now = time.perf_counter()
    gap = now - last - 0.01
    last = now
    if gap > worst:
        worst = gap
        print(worst, flush=True)
"""


class MachineStall:
    """A sleeper process measuring the machine's stalls while the block runs (see the
    module docstring); ``stall_s`` reads the longest seen so far (0 until it started)."""

    def __init__(self) -> None:
        self.stall_s = 0.0
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.started = threading.Event()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                self.stall_s = max(self.stall_s, float(line))
            except ValueError:
                continue
            self.started.set()

    def __enter__(self) -> MachineStall:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SLEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)


__all__ = ["MachineStall"]
