"""``devsched stress --processes N``: N OS processes against one declared GPU and one
machine-wide ledger (``LocalBackend(shared=...)``), with processes killed mid-call and
mid-load.

The steps (1-3 parallel calls on three resident models, seeded) are dealt to N slots; each
slot runs one worker process (`process_worker`, spawned) at a time; a worker whose steps are
answered idles (its ledger still watching) until every slot is done, as queue workers wait
for work. A worker killed by a
fault is replaced by a new one that gets the slot's steps it never answered, the killing
step without its kill (a queue redelivering its message). Checked:

* every call answered exactly once (lost, duplicated, stray: an answer naming another call);
* the machine-wide ledger never over budget: the store's exact peak (`SharedVramLedger`);
* back to 0 at the end: no hold and no holder left in the store;
* every killed process reclaimed, and how long after its kill (the goal: within 5 s), and
  by whom: a worker's ledger, or the harness's own (an idle ledger on the GPU, as an app
  process between steps holds one);
* at rest, in each worker that ends normally, its rows in the store against the model
  instances its cache holds (the same models, no working memory, nothing in use).

>>> steps = make_steps(calls=10, seed=1, rates={})
>>> sum(len(calls) for _, calls in steps)
10
"""

from __future__ import annotations

import json
import multiprocessing as mp
import queue
import random
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from langgraph_devsched._dev.stress.process_worker import BUDGET_MB, WorkerSpec, worker_main

PROCESS_FAULTS = ("kill_call", "kill_load", "error", "slow")
DEFAULT_PROCESS_RATES: dict[str, float] = {
    "kill_call": 0.003, "kill_load": 0.003, "error": 0.01, "slow": 0.02}
"""Per step: kill_call, kill_load; per call: error, slow."""
RECLAIM_GOAL_S = 5.0
_TOOLS = ("embed", "transcribe", "generate")
_WEIGHTS = (5, 4, 1)

Step = tuple[int, list[tuple[str, str, str]]]


class ProcessStressReport(BaseModel):
    """Figures of one ``devsched stress --processes N`` run (``--json`` writes this)."""

    model_config = ConfigDict(extra="forbid")

    processes: int
    calls: int
    seed: int
    rates: dict[str, float]
    steps: int = 0
    answered: int = 0
    lost: int = 0
    duplicated: int = 0
    stray: int = 0
    error_answers: int = 0
    spawned: int = 0
    killed_mid_call: int = 0
    killed_mid_load: int = 0
    killed_holding_vram: int = 0
    """Kills whose process held VRAM in the store when it was reclaimed."""
    reclaimed: int = 0
    reclaim_s_p50: float = 0.0
    reclaim_s_max: float = 0.0
    reclaim_goal_s: float = RECLAIM_GOAL_S
    reclaim_s: list[float] = Field(default_factory=list)
    """Each killed process: seconds from its kill to its reclaim (kill order)."""
    reclaimed_by_workers: int = 0
    """Kills reclaimed by a worker's ledger (the others: by the harness's own idle ledger,
    or by its final sweep)."""
    budget_mb: float = BUDGET_MB
    peak_mb: float = 0.0
    """The largest machine-wide total any commit left (exact)."""
    end_mb: float = 0.0
    end_holders: int = 0
    at_rest_checked: int = 0
    eviction_requests: dict[str, int] = Field(default_factory=dict)
    wall_s: float = 0.0
    stopped_early: bool = False
    violations: list[str] = Field(default_factory=list)

    @property
    def killed(self) -> int:
        return self.killed_mid_call + self.killed_mid_load

    @property
    def ok(self) -> bool:
        return not self.violations


def make_steps(*, calls: int, seed: int, rates: Mapping[str, float]) -> list[Step]:
    """The run's steps: (number, [(call id, tool, fault)]), ``calls`` calls in all."""
    rng = random.Random(seed)
    steps: list[Step] = []
    sent = 0
    while sent < calls:
        number = len(steps)
        n = min(rng.choice((1, 2, 3)), calls - sent)
        made = []
        for j in range(n):
            fault = ""
            if rng.random() < rates.get("error", 0.0):
                fault = "error"
            elif rng.random() < rates.get("slow", 0.0):
                fault = "slow"
            made.append([f"s{number}c{j}", rng.choices(_TOOLS, _WEIGHTS)[0], fault])
        if rng.random() < rates.get("kill_load", 0.0):
            made[-1][1:] = ["doomed", "kill_load"]
        elif rng.random() < rates.get("kill_call", 0.0):
            made[-1][2] = "kill_call"
        steps.append((number, [(c, t, f) for c, t, f in made]))
        sent += n
    return steps


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by the kill
            continue
    return out


def _without_kill(step: Step) -> Step:
    number, calls = step
    return number, [(c, t, "" if f.startswith("kill") else f) for c, t, f in calls]


class _Run:
    def __init__(self, processes: int, steps: list[Step], folder: Path, ctx: Any) -> None:
        self.ctx = ctx
        self.done_queue = ctx.Queue()
        self.stop = ctx.Event()
        self.idle: set[int] = set()
        self.folder = folder
        self.store = str(folder / "ledger.db")
        self.queues = [deque(s for s in steps if s[0] % processes == i)
                       for i in range(processes)]
        self.running: dict[int, tuple[Any, Path, list[Step]]] = {}
        self.answers: dict[str, list[tuple[str, str]]] = {}
        self.kills: list[dict[str, Any]] = []
        self.rests: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.spawned = 0

    def spawn(self, slot: int) -> None:
        batch = list(self.queues[slot])
        self.queues[slot].clear()
        log = self.folder / f"worker-{self.spawned}.jsonl"
        spec = WorkerSpec(self.store, str(log), batch, slot, self.done_queue, self.stop)
        proc = self.ctx.Process(target=worker_main, args=(spec,), daemon=True)
        proc.start()
        self.spawned += 1
        self.running[slot] = (proc, log, batch)

    def drain(self) -> None:
        """Note the workers that answered every step (they idle now)."""
        while True:
            try:
                self.idle.add(self.done_queue.get_nowait())
            except queue.Empty:
                return

    def reap(self, slot: int) -> None:
        proc, log, batch = self.running.pop(slot)
        proc.join()
        self.idle.discard(slot)
        done: set[int] = set()
        kill: dict[str, Any] | None = None
        for record in _read_log(log):
            if "step" in record:
                done.add(record["step"])
                for call_id, content, status in record["answers"]:
                    self.answers.setdefault(call_id, []).append((content, status))
            elif "kill" in record:
                kill = record
            elif "rest" in record:
                self.rests.append(record["rest"])
        left = [s for s in batch if s[0] not in done]
        if kill is not None and proc.exitcode == -9:
            self.kills.append(kill)
            left = [_without_kill(s) if s[0] == kill["kill"] else s for s in left]
        elif proc.exitcode != 0:
            self.violations.append(f"worker pid {proc.pid} ended with exit code "
                                   f"{proc.exitcode} and no planned kill")
            left = [_without_kill(s) for s in left]
        elif left:
            self.violations.append(f"worker pid {proc.pid} ended with {len(left)} steps "
                                   "unanswered")
            left = []
        self.queues[slot].extendleft(reversed(left))


def run_process_stress(*, processes: int, calls: int, seed: int,
                       rates: Mapping[str, float] | None = None,
                       max_seconds: float = 540.0,
                       reclaim_goal_s: float = RECLAIM_GOAL_S) -> ProcessStressReport:
    """Run the harness (see the module) and check it; a kill reclaimed later than
    ``reclaim_goal_s`` after it is a violation."""
    from langgraph_devsched.shared_ledger import LedgerStore, SharedVramLedger, gpu_key

    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    rates = dict(DEFAULT_PROCESS_RATES if rates is None else rates)
    unknown = sorted(set(rates) - set(PROCESS_FAULTS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) for --processes: {', '.join(unknown)}; "
                         f"valid: {', '.join(PROCESS_FAULTS)}")
    steps = make_steps(calls=calls, seed=seed, rates=rates)
    report = ProcessStressReport(processes=processes, calls=calls, seed=seed, rates=rates,
                                 steps=len(steps), reclaim_goal_s=reclaim_goal_s)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="devsched-stress-") as folder:
        run = _Run(processes, steps, Path(folder), mp.get_context("spawn"))
        # the harness is a process on the GPU too: an idle ledger, as an app between steps
        # holds one; it sees a kill while every worker is starting up after kills of its own
        harness = SharedVramLedger(BUDGET_MB, store=run.store, gpu=gpu_key(0))
        while True:
            over = time.monotonic() - t0 > max_seconds
            if over and not report.stopped_early:
                report.stopped_early = True
                for proc, _log, _batch in run.running.values():
                    proc.terminate()
            for slot in range(processes):
                if slot not in run.running and run.queues[slot] and not report.stopped_early:
                    run.spawn(slot)
            run.drain()
            for slot in [s for s, (p, _l, _b) in run.running.items() if not p.is_alive()]:
                run.reap(slot)
            if not any(run.queues) and set(run.running) <= run.idle:
                run.stop.set()  # every step answered: the idle workers close and exit
            if not run.running and (report.stopped_early or not any(run.queues)):
                break
            time.sleep(0.02)
        harness.close()
        store = LedgerStore(run.store)
        with store.transaction():  # the last kills, if no worker was left to see them
            store.sweep(request_ttl_s=0.0)
        snap = store.snapshot()
        store.close()
    report.wall_s = round(time.monotonic() - t0, 2)
    report.spawned = run.spawned
    _check(report, run, steps, snap, harness.holder, harness.gpu)
    return report


def _check(report: ProcessStressReport, run: _Run, steps: list[Step], snap: Any,
           harness: str, gpu: str) -> None:
    v = run.violations
    faults = {c: f for _, calls in steps for c, _t, f in calls}
    sent = set(run.answers) if report.stopped_early else set(faults)
    report.answered = sum(1 for c in sent if run.answers.get(c))
    report.lost = sum(1 for c in sent if not run.answers.get(c))
    report.duplicated = sum(1 for c in sent if len(run.answers.get(c, [])) > 1)
    for call_id, got in run.answers.items():
        for content, status in got:
            if status == "error":
                report.error_answers += 1
                if faults.get(call_id) != "error":
                    v.append(f"{call_id}: an error answer without an injected error: "
                             f"{content[:120]}")
            elif not content.startswith(f"{call_id}@"):
                report.stray += 1
                v.append(f"{call_id}: answered {content[:80]!r}")
    if report.lost:
        v.append(f"{report.lost} call(s) never answered")
    if report.duplicated:
        v.append(f"{report.duplicated} call(s) answered more than once")
    report.killed_mid_call = sum(1 for k in run.kills if k["mode"] == "call")
    report.killed_mid_load = sum(1 for k in run.kills if k["mode"] == "load")
    latencies = []
    for kill in run.kills:
        found = [r for r in snap.reclaimed if r.pid == kill["pid"] and r.at >= kill["at"]]
        if not found:
            v.append(f"process {kill['pid']} killed mid-{kill['mode']} was never reclaimed")
            continue
        latencies.append(found[0].at - kill["at"])
        report.reclaimed_by_workers += int(found[0].by != "" and found[0].by != harness)
        report.killed_holding_vram += int(found[0].mb > 0)
    report.reclaimed = len(latencies)
    report.reclaim_s = [round(x, 3) for x in latencies]
    if latencies:
        report.reclaim_s_p50 = round(statistics.median(latencies), 3)
        report.reclaim_s_max = round(max(latencies), 3)
        slow = [x for x in latencies if x > report.reclaim_goal_s]
        if slow:
            v.append(f"{len(slow)} killed process(es) reclaimed after more than "
                     f"{report.reclaim_goal_s:g} s (the slowest {max(slow):.1f} s)")
    budget, peak = snap.gpus.get(gpu, (BUDGET_MB, 0.0))
    report.budget_mb, report.peak_mb = budget, round(peak, 3)
    if peak > budget + 1e-6:
        v.append(f"machine-wide peak {peak:.0f} MB over the {budget:.0f} MB budget")
    report.end_mb = round(sum(r[4] for r in snap.holds), 6)
    report.end_holders = len(snap.holders)
    if snap.holds or snap.holders:
        v.append(f"at the end the store holds {report.end_mb:.0f} MB in {len(snap.holds)} "
                 f"row(s) of {len(snap.holders)} holder(s): not back to 0")
    for rest in run.rests:
        report.at_rest_checked += 1
        if (rest["store_weights"] != rest["instances"] or rest["work_mb"] > 1e-6
                or rest["in_use"] or rest["active"] or rest["queued"]):
            v.append(f"at rest the store and the live instances differ: {rest}")
    report.eviction_requests = {k: n for k, n in sorted(snap.counters.items())}
    report.violations = v
