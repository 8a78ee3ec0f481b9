"""Who holds a reservation: a process named by its pid *and* its start time, read from /proc.

A pid alone is not an identity: after a process dies the kernel may hand its pid to a new
one. The start time (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot) and the
boot id tell a live holder from a dead one whose pid was reused, without any wall-clock
guess: a holder is dead when its pid is gone, or runs a process that started at another
time, or the machine has booted since.

>>> me = ProcessId.current()
>>> me.alive()
True
>>> ProcessId(me.pid, me.start + 1, me.boot).alive()   # same pid, another process
False
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None when it is gone (a
    zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = raw[raw.rfind(b")") + 2:].split()
    if not fields or fields[0] in (b"Z", b"X", b"x"):
        return None
    try:
        return int(fields[19])  # field 22 of the whole line
    except (IndexError, ValueError):
        return None


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot of the machine (``/proc/sys/kernel/random/boot_id``; empty where absent)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def proc_available() -> bool:
    """Whether /proc tells process start times here (Linux)."""
    return process_start(os.getpid()) is not None


@dataclass(frozen=True)
class ProcessId:
    """One process of this machine: its pid, its start time and the boot it ran in."""

    pid: int
    start: int
    boot: str

    @classmethod
    def current(cls) -> ProcessId:
        pid = os.getpid()
        start = process_start(pid)
        if start is None:
            raise RuntimeError(
                "a shared ledger needs /proc/<pid>/stat to tell live holders from dead ones "
                "(Linux); it is not readable here")
        return cls(pid, start, boot_id())

    def alive(self) -> bool:
        """True while this very process runs (its pid was not reused since)."""
        return self.boot == boot_id() and process_start(self.pid) == self.start
