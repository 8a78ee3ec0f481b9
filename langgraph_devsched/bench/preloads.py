"""The bench's side of loads between steps: a scheduler's preloads run on the testbed while
the agent's LLM thinks.

After each step (and its idle-time calibration runs), a scheduler with a ``preloads``
method (the monitor policy: `schedulers.policy.investments`) is given the testbed's device state
and the idle time left; each load it asks for runs on the testbed (`SimulatedTestbed.
preload`: counted against the GPU's budget from its start, evicting only what the scheduler
named and then idle models least recently used first; or into host memory), at most
`MAX_PRELOADS`, one after another. A scheduler asks only for loads that
end within the idle time, so no step arrives during one: the cost a step pays for a load
in flight is zero by construction here, and the node's own loads between steps wait for a
step's calls the same way (see docs/resident_models.md).

A step whose decision names loads in its ``background`` (a model to load on a GPU that none
of the step's calls uses: the monitor policy's `Investments.background`) starts them with the
step (`run_background`): the load runs while the step runs and then in the think time; what
it takes beyond both delays the next step, which starts only once it ended (the step's
total pays that delay). On a GPU the step uses it evicts nothing and needs room beside the
working memory of the step's calls (`SimulatedTestbed.beside`; `beside_tools`: on one GPU every
call's, on several those placed on that GPU); otherwise it is refused. A step with a
background load has no load between steps after it (one loader: at most `MAX_PRELOADS` per
step and its think time).

`PreloadRuns` counts what they did: loads run, their device time, the models a later step
then used warm on the GPU (saved: the load that step did not pay) and those evicted or never
used before the run ended (wasted device time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Preload
from langgraph_devsched.schedulers.policy.investments import MAX_PRELOADS
from langgraph_devsched.schedulers.protocols import capabilities
from langgraph_devsched.testbed import SimulatedTestbed


@dataclass
class PreloadRuns:
    """What the loads between steps did over one run."""

    loads: int = 0
    device_ms: float = 0.0
    saved_ms: float = 0.0
    """The loads the steps that used a preloaded model did not pay."""
    wasted: int = 0
    wasted_ms: float = 0.0
    cancelled: int = 0
    """Loads cut where the next step arrived (their time is wasted)."""
    background: int = 0
    """Of `loads`, those started with a step (`run_background`)."""
    delay_ms: float = 0.0
    """What background loads delayed the next step by (their time past the step and the
    think time): the cost to a step that arrived during one."""
    refused: int = 0
    """Background loads that could not run (no room beside the step, or unknown)."""
    pending: dict[str, float] = field(default_factory=dict)
    """Models preloaded and not yet used, with their load time."""

    def step(self, bed: SimulatedTestbed, record: StepRecord) -> None:
        """A step ran: preloaded models it used warm are repaid; any no longer resident
        (evicted before a use) is wasted."""
        for call in record.calls:
            if call.model in self.pending and call.on_gpu and not call.loaded:
                self.saved_ms += self.pending.pop(call.model)
        resident = {w.model for w in bed.device_state().resident if w.side == "gpu"}
        for model in [m for m in self.pending if m not in resident]:
            self._waste(model)

    def ran(self, model: str, took: float, side: str) -> None:
        """A load of ``model`` on ``side`` ran in ``took`` ms; a GPU one waits for its use."""
        self.loads += 1
        self.device_ms += took
        if side == "gpu":
            self.pending[model] = took

    def finish(self) -> None:
        """The run ended: preloads never used are wasted."""
        for model in list(self.pending):
            self._waste(model)

    def _waste(self, model: str) -> None:
        self.wasted += 1
        self.wasted_ms += self.pending.pop(model)


def beside_tools(tools: Sequence[str], options: Sequence[DeviceOption],
                 gpus: Mapping[str, int] | None, call_ids: Sequence[str]) -> dict[int, list[str]]:
    """Per GPU the step used, the calls (their tools) whose working memory a load beside the
    step must leave room for there: one GPU (``gpus`` None), every call of the step whatever
    its option; several, the calls placed on that GPU (``gpus``: call id -> GPU index).

    >>> beside_tools(["a", "b"], ["gpu_now", "cpu"], None, ["x", "y"])
    {0: ['a', 'b']}
    >>> beside_tools(["a", "b", "c"], ["gpu_now", "cpu", "gpu_queued"], {"x": 1, "z": 0},
    ...              ["x", "y", "z"])
    {1: ['a'], 0: ['c']}
    """
    if gpus is None:
        return {0: list(tools)} if any(is_gpu(o) for o in options) else {}
    out: dict[int, list[str]] = {}
    for cid, tool, option in zip(call_ids, tools, options, strict=True):
        if is_gpu(option) and cid in gpus:
            out.setdefault(gpus[cid], []).append(tool)
    return out


def run_background(bed: SimulatedTestbed, loads: Sequence[Preload],
                   tools: Mapping[int, Sequence[str]], step_ms: float, think_ms: float,
                   totals: PreloadRuns) -> float:
    """Run a step's background ``loads`` (at most `MAX_PRELOADS`) on ``bed`` once the step
    ran in ``step_ms`` (`SimulatedTestbed.load_beside`: on a GPU the step used, a key of
    ``tools`` (`beside_tools`), only into room beside those calls): the delay to the next
    step (ms)."""
    busy = 0.0
    for p in loads[:MAX_PRELOADS]:
        took = None if p.side != "gpu" else bed.load_beside(
            p.model, p.gpu, p.evict, tools.get(p.gpu, ()), p.gpu in tools)
        if took is None:
            totals.refused += 1
            continue
        busy += took
        totals.ran(p.model, took, "gpu")
        totals.background += 1
    delay = max(0.0, busy - step_ms - think_ms)
    totals.delay_ms += delay
    return delay


def run_preloads(bed: SimulatedTestbed, scheduler: Any, idle_ms: float,
                 totals: PreloadRuns) -> None:
    """Run the loads ``scheduler.preloads(device, idle_ms)`` asks for (none without that
    method) on ``bed``, at most `MAX_PRELOADS`, one after another within ``idle_ms``."""
    ask = capabilities(scheduler).preloads
    if ask is None or idle_ms <= 0:
        return
    busy = 0.0
    for p in ask(bed.device_state(), idle_ms)[:MAX_PRELOADS]:
        truth = bed.model_loads(p.side)
        if busy + p.load_ms > idle_ms or p.model not in truth:
            continue
        if busy + truth[p.model] > idle_ms:  # estimated short: cancelled when the step came
            totals.cancelled += 1
            totals.wasted_ms += idle_ms - busy
            totals.device_ms += idle_ms - busy
            return
        took = bed.preload(p.model, p.gpu, p.evict, side=p.side)
        if took is None:
            continue
        busy += took
        totals.ran(p.model, took, p.side)
