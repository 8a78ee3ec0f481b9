"""The machine-wide ledger (``LocalBackend(shared=path)``): one budget per GPU across real
processes (spawned), crash-safe leases, eviction requests between processes.

A declared GPU (no CUDA needed); the other processes are real OS processes running their own
compiled graph (`tests.process_workers`). Waits are bounded by events the test sets, never
by a guess of how fast the machine is.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.tools import tool

from langgraph_devsched import DeviceToolNode, GpuConfig, InjectedDevice, LocalBackend
from langgraph_devsched.shared_ledger import BudgetMismatchError, LedgerStore, ProcessId
from tests import process_workers as pw

SPAWN = mp.get_context("spawn")


def big_tool(hints: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    @tool
    def big(text: str, device: Annotated[str, InjectedDevice]) -> str:
        """Run on 700 MB of VRAM."""
        return device

    return big, {"big": {"vram_mb": 700, **hints}}


def run_big(path: Path, reports: list[Any], **hints: Any) -> str:
    big, spec = big_tool(hints)
    node = DeviceToolNode([big], hints=spec, backend=pw.backend(str(path)),
                          on_step=reports.append)
    return pw.ask(pw.graph(node), "big", "b1")


def start(target: Any, *args: Any, **kwargs: Any) -> Any:
    proc = SPAWN.Process(target=target, args=args, kwargs=kwargs, daemon=True)
    proc.start()
    return proc


def test_two_processes_hold_one_budget(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    entered, go, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    other = start(pw.hold_on_gpu, str(path), entered, go, results)
    try:
        assert entered.wait(pw.WAIT_S)
        reports: list[Any] = []
        # the other process holds 700 of the 1000 MB: 700 more do not fit machine-wide
        assert run_big(path, reports, pinned="gpu_now") == "cpu"
        call = reports[-1].record.calls[0]
        assert call.fallback == "oom"
    finally:
        go.set()
    assert results.get(timeout=pw.WAIT_S) == "cuda:0"
    other.join(pw.WAIT_S)
    assert run_big(path, [], pinned="gpu_now") == "cuda:0"  # its call ended: room again
    snap = LedgerStore(path).snapshot()
    assert snap.gpus["gpu0"] == (1000.0, 700.0)  # machine-wide peak: one 700 MB call at once


def test_a_killed_holder_is_reclaimed_and_a_queued_call_gets_its_room(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    entered, go, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    other = start(pw.hold_on_gpu, str(path), entered, go, results, die=True)
    assert entered.wait(pw.WAIT_S)
    other.join(pw.WAIT_S)
    assert other.exitcode == -9  # SIGKILLed mid-call, holding 700 MB
    reports: list[Any] = []
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path,
                           queue_timeout_s=pw.WAIT_S)
    big, spec = big_tool({"pinned": "gpu_queued"})
    node = DeviceToolNode([big], hints=spec, backend=backend, on_step=reports.append)
    assert pw.ask(pw.graph(node), "big", "q1") == "cuda:0"
    snap = LedgerStore(path).snapshot()
    assert [r.pid for r in snap.reclaimed] == [other.pid]
    assert snap.reclaimed[0].mb == 700.0
    backend.close()
    assert LedgerStore(path).snapshot().holds == []  # back to 0


@pytest.mark.parametrize("keep_warm", [False, True])
def test_another_process_evicts_an_idle_model_on_request(tmp_path: Path, keep_warm: bool) -> None:
    path = tmp_path / "ledger.db"
    loaded, go, results = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    other = start(pw.keep_idle_model, str(path), loaded, go, results, keep_warm=keep_warm)
    try:
        assert loaded.wait(pw.WAIT_S)
        reports: list[Any] = []
        backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path,
                               queue_timeout_s=pw.WAIT_S if not keep_warm else 0.2)
        big, spec = big_tool({"pinned": "gpu_queued"})
        node = DeviceToolNode([big], hints=spec, backend=backend, on_step=reports.append)
        # 600 MB of idle weights in the other process leave 400: the queued call asks them
        where = pw.ask(pw.graph(node), "big", "q1")
    finally:
        go.set()
    first, still_holds, released = results.get(timeout=pw.WAIT_S)
    other.join(pw.WAIT_S)
    assert first == "cuda:0"
    counters = LedgerStore(path).snapshot().counters
    if keep_warm:  # kept warm: refused, and the call goes where it can (the CPU)
        assert (where, still_holds, released) == ("cpu", True, [])
        assert reports[-1].record.calls[0].fallback == "queue_timeout"
        assert counters.get("served", 0) == 0
    else:  # evicted at the owner's next safe point: the instance freed, the call on the GPU
        assert (where, still_holds, released) == ("cuda:0", False, ["cuda:0"])
        assert counters["served"] == 1


def test_backends_of_one_file_share_the_budget(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    a, b = (LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path) for _ in range(2))
    assert a.ledger is not None and b.ledger is not None
    held = a.ledger.try_reserve(600)
    assert held is not None
    assert b.ledger.try_reserve(600) is None
    assert b.ledger.free_mb == 400.0
    held.release()
    assert b.ledger.try_reserve(600) is not None
    assert LedgerStore(path).snapshot().total_mb("gpu0") == 600.0


def test_single_process_ledger_is_unchanged_by_default() -> None:
    a, b = (LocalBackend(gpu=GpuConfig(vram_budget_mb=1000)) for _ in range(2))
    assert a.shared is None and type(a.ledger).__name__ == "VramLedger"
    assert a.ledger is not None and b.ledger is not None
    assert a.ledger.try_reserve(600) is not None and b.ledger.try_reserve(600) is not None


def test_a_dead_holder_is_told_by_pid_and_start_time_not_by_age(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path)
    assert backend.ledger is not None
    store = LedgerStore(path)
    me = ProcessId.current()
    reused = ProcessId(me.pid, me.start - 1, me.boot)  # this pid, but another process
    with store.transaction():
        store.add_holder("ghost", "gpu0", reused)
        store.write("ghost", "gpu0", [(("work", ""), (500.0, 1, 0, 0))])
        store.add_holder("twin", "gpu0", me)  # alive (this very process): never reclaimed
        store.write("twin", "gpu0", [(("work", ""), (300.0, 1, 0, 0))])
    with store.transaction():
        gone = store.sweep(request_ttl_s=60.0)
    assert [g.holder for g in gone] == ["ghost"] and gone[0].mb == 500.0
    assert backend.ledger.try_reserve(800) is None  # the live twin's 300 MB stay counted
    assert backend.ledger.try_reserve(700) is not None


def test_bad_shared_options_name_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path)
    with pytest.raises(BudgetMismatchError, match=r"holds a budget of 1000 MB.*declares 2000"):
        LocalBackend(gpu=GpuConfig(vram_budget_mb=2000), shared=path)
    with pytest.raises(ValueError, match=r"folder of .* does not exist"):
        LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=tmp_path / "no" / "l.db")


def test_a_forked_child_holds_its_part_as_itself(tmp_path: Path) -> None:
    """A backend built before a fork (gunicorn ``--preload``): the child is its own holder."""
    import os

    path = tmp_path / "ledger.db"
    backend = LocalBackend(gpu=GpuConfig(vram_budget_mb=1000), shared=path)
    assert backend.ledger is not None
    held = backend.ledger.try_reserve(600)
    assert held is not None
    fork = mp.get_context("fork")
    results = fork.Queue()
    child = fork.Process(target=pw.reserve_in_fork, args=(backend, results))
    child.start()
    reserved, pid, holders = results.get(timeout=pw.WAIT_S)
    child.join(pw.WAIT_S)
    assert reserved and pid != os.getpid()
    assert [p for p, _ in holders] == sorted([os.getpid(), pid])
    assert holders[0][1] == 900.0  # the parent's 600 and the child's 300, one budget
