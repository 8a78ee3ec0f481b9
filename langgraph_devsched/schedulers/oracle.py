"""The brute-force oracle: every mapping evaluated on the testbed's noise-free makespan.

It is the accuracy reference of the benchmark and the one scheduler handed the ground truth
(the testbed). All ``3^n`` mappings allowed by the hints are evaluated exactly by the batched
simulator with bound pruning (`SimulatedTestbed.product_makespans`). Ties are broken
deterministically, call by call, towards the least demanding option: ``cpu``, then
``gpu_queued``, then ``gpu_now`` (use the GPU, and start at once, only where it helps).

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40),
...     "asr": ToolParams(cpu_ms=900, gpu_ms=60, vram_mb=2000)}, vram_budget_mb=8000)
>>> batch = Batch.of([("a", "fft", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
>>> dict(OracleScheduler(testbed=bed).decide(batch, SchedulerView(bed.device_state())).mapping)
{'a': 'cpu', 'b': 'gpu_queued'}
"""

from __future__ import annotations

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.testbed import SimulatedTestbed

TIE_ORDER: tuple[DeviceOption, ...] = ("cpu", "gpu_queued", "gpu_now")
"""Preference among mappings with the same makespan (first call first)."""
MAX_ORACLE_CALLS = 14
"""Beyond this many calls (4.8 million mappings) the oracle refuses instead of thrashing."""


class OracleScheduler(SchedulerBase):
    """Exact optimum of each batch on the ground truth (``testbed``): the reference."""

    name = "oracle"

    def __init__(self, *, testbed: SimulatedTestbed) -> None:
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


def _mapping_at(choices: list[tuple[DeviceOption, ...]], index: int) -> tuple[DeviceOption, ...]:
    """The ``index``-th mapping of ``itertools.product(*choices)``."""
    out: list[DeviceOption] = []
    for options in reversed(choices):
        index, k = divmod(index, len(options))
        out.append(options[k])
    return tuple(reversed(out))
