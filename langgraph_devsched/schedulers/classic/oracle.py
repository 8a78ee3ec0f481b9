"""The brute-force oracle: every mapping evaluated on the testbed's noise-free makespan.

It is the accuracy reference of the benchmark and the one scheduler handed the ground truth
(the testbed). All ``3^n`` mappings allowed by the hints are evaluated exactly by the batched
simulator with bound pruning (`SimulatedTestbed.product_makespans`). Ties are broken
deterministically, call by call, towards the least demanding option: ``cpu``, then
``gpu_queued``, then ``gpu_now`` (use the GPU, and start at once, only where it helps).

Several GPUs: every placement of ``(2k+1)^n`` (``cpu``, or either GPU option on each GPU the
call's ``gpus`` hint allows) is simulated exactly (`SimulatedTestbed.simulate`), up to
`MAX_MULTI_GPU_MAPPINGS` once GPUs alike in memory, speed, background and resident weights
are taken as interchangeable (only the placements that use such GPUs in index order are
simulated); beyond it the oracle refuses. Ties: ``cpu``, then ``gpu_queued`` on GPU 0, 1,
..., then ``gpu_now`` on GPU 0, 1, ...

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40),
...     "asr": ToolParams(cpu_ms=900, gpu_ms=60, vram_mb=2000)}, vram_budget_mb=8000)
>>> batch = Batch.of([("a", "fft", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
>>> dict(OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state())).mapping)
{'a': 'cpu', 'b': 'gpu_queued'}
"""

from __future__ import annotations

import itertools
import math

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.gpu_workers import interchangeable_gpus
from langgraph_devsched.testbed import SimulatedTestbed

TIE_ORDER: tuple[DeviceOption, ...] = ("cpu", "gpu_queued", "gpu_now")
"""Preference among mappings with the same makespan (first call first)."""
MAX_ORACLE_CALLS = 14
"""Beyond this many calls (4.8 million mappings) the oracle refuses instead of thrashing."""
MAX_MULTI_GPU_MAPPINGS = 20_000
"""Several GPUs: the most placements the oracle simulates one by one for a batch."""


class OracleScheduler(SchedulerBase):
    """Exact optimum of each batch on the ground truth (``testbed``): the reference."""

    name = "oracle"

    def __init__(self, *, testbed: SimulatedTestbed | None = None) -> None:
        if not isinstance(testbed, SimulatedTestbed):
            raise ValueError(
                "the oracle scheduler needs the ground truth to evaluate every mapping: give "
                "it a simulated testbed (DeviceToolNode(scheduler='oracle', testbed=bed), or "
                f"OracleScheduler(testbed=bed)); got testbed={testbed!r}. On a real machine "
                "use scheduler='monitor' (the default)"
            )
        self.testbed = testbed

    def choices(self, batch: Batch, view: SchedulerView) -> list[tuple[DeviceOption, ...]]:
        """The options the hints allow for each call, in `TIE_ORDER`."""
        out = []
        for call in batch.calls:
            allowed = call.spec.allowed_options()
            if not view.device.gpu_available and "cpu" in allowed:
                allowed = ("cpu",)
            out.append(tuple(o for o in TIE_ORDER if o in allowed))
        return out

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        if len(batch) > MAX_ORACLE_CALLS:
            raise ValueError(
                f"the oracle enumerates 3^n mappings; {len(batch)} calls is over its limit of "
                f"{MAX_ORACLE_CALLS}"
            )
        choices = self.choices(batch, view)
        if not batch.calls:
            return self._decision({}, "empty batch")
        if self.testbed.gpu_count > 1:
            return self._decide_devices(batch, choices)
        tools = [c.tool for c in batch.calls]
        spans = self.testbed.product_makespans(tools, choices, prune=True)
        best = float(spans.min())
        candidates = [int(i) for i in (spans <= best).nonzero()[0]]
        rank = {o: k for k, o in enumerate(TIE_ORDER)}
        index = min(candidates, key=lambda i: (float(spans[i]), i))
        options = _mapping_at(choices, index)
        mapping = dict(zip(batch.call_ids, options, strict=True))
        tie_key = tuple(rank[o] for o in options)
        return self._decision(
            mapping,
            f"brute force: best of {len(spans)} mappings, {best:.1f} ms "
            f"({len(candidates)} tied, tie-break {tie_key})",
            predicted_ms={"makespan": best},
        )


    def _decide_devices(
        self, batch: Batch, choices: list[tuple[DeviceOption, ...]]
    ) -> Decision:
        """Every placement over the GPUs, simulated (several GPUs)."""
        bed = self.testbed
        k = bed.gpu_count
        per_call: list[list[tuple[DeviceOption, int | None]]] = []
        for call, options in zip(batch.calls, choices, strict=True):
            pins = call.spec.gpus
            allowed = [g for g in range(k) if pins is None or g in pins] or list(range(k))
            per_call.append([(o, None) if o == "cpu" else (o, g)
                             for o in options for g in ((None,) if o == "cpu" else allowed)])
        classes = interchangeable_gpus(bed)
        count = math.prod(len(c) for c in per_call)
        ids = batch.call_ids
        tools = [c.tool for c in batch.calls]
        combos = []
        for combo in itertools.product(*per_call):
            if not _canonical([g for _, g in combo], classes):
                continue
            combos.append(combo)
            if len(combos) > MAX_MULTI_GPU_MAPPINGS:
                raise ValueError(
                    f"the oracle over {k} GPUs simulates each placement; {len(batch)} calls "
                    f"({count} placements) is over its limit of {MAX_MULTI_GPU_MAPPINGS}")
        best: tuple[float, tuple[tuple[DeviceOption, int | None], ...]] | None = None
        simulated = len(combos)
        for combo in combos:
            span = bed.makespan(list(zip(ids, tools, (o for o, _ in combo), strict=True)),
                                gpus={c: g for c, (_, g) in zip(ids, combo, strict=True)
                                      if g is not None})
            if best is None or span < best[0]:
                best = (span, combo)
        assert best is not None
        span, combo = best
        mapping = {c: o for c, (o, _) in zip(ids, combo, strict=True)}
        gpus = {c: g for c, (_, g) in zip(ids, combo, strict=True) if g is not None}
        return self._decision(
            mapping, f"brute force over {k} GPUs: best of {simulated} placements "
            f"({count} before symmetry), {span:.1f} ms",
            predicted_ms={"makespan": span}, gpus=gpus)


def _canonical(used: list[int | None], classes: list[int]) -> bool:
    """Whether alike GPUs are first used in index order (one placement per symmetry class)."""
    nxt: dict[int, int] = {}
    for g in used:
        if g is None:
            continue
        head = classes[g]
        members = [i for i, c in enumerate(classes) if c == head]
        seen = nxt.get(head, 0)
        position = members.index(g)
        if position > seen:
            return False
        if position == seen:
            nxt[head] = seen + 1
    return True


def _mapping_at(choices: list[tuple[DeviceOption, ...]], index: int) -> tuple[DeviceOption, ...]:
    """The ``index``-th mapping of ``itertools.product(*choices)``."""
    out: list[DeviceOption] = []
    for options in reversed(choices):
        index, k = divmod(index, len(options))
        out.append(options[k])
    return tuple(reversed(out))
