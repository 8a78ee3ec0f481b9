"""The machine-stall reference of the stress probes' wall-clock bounds (`stress.stall`): a
stall of the machine shows in it, so a bound sized from it holds on a loaded machine."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from langgraph_devsched._dev.stress.stall import MachineStall


@pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP is POSIX")
def test_a_stalled_sleeper_reports_at_least_its_stall() -> None:
    with MachineStall() as stall:
        assert stall.started.wait(60), "the sleeper never started"
        assert stall._proc is not None
        os.kill(stall._proc.pid, signal.SIGSTOP)  # what a starved machine does to it
        time.sleep(0.3)
        os.kill(stall._proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while stall.stall_s < 0.25 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert stall.stall_s >= 0.25
    assert stall._proc.returncode == 0  # ended when told, not killed
