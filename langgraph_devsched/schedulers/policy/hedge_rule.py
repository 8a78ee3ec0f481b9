"""The monitor policy's hedge rule: when a side-effect-free call also runs on its other side.

A tool whose hints say ``idempotent: true`` may run a call twice
(`langgraph_devsched.hedging`). The rule hedges a call of such a tool when the side its
mapping does not use is one the policy cannot price: neither declared (no ``profile.cpu_ms``
/ ``gpu_ms``) nor ever measured, and no earlier hedge of it was cut at its bound (then that
side is known to be at least ``bound`` times slower there, which is all the policy needs).
The cost is bounded: the loser is cancelled at ``bound`` times the winner's run time, a side
is hedged at most ``max_tries`` times, a step at most ``max_per_step`` hedges (the
longest-predicted calls first: their unknown side is worth the most), a GPU run that could
not fit the budget is never started, and no hedge loads a model's weights (a tool with a
resident model is hedged only on a side where its model is warm: a GPU load could evict
what the step's other calls need, and a host load outlasted the step: with nothing declared
a diffusion model's host load, 3.5 s, ran past its GPU load and then to its bound, 2.5 s of
hedges in `residency_visual_suite`'s first round; idle time measures that side). Idle-time
calibration (`HedgeRule.calibration`) runs a recent call alone between steps, on the same
terms (a host load is allowed: it evicts nothing). A side cut at its bound is *answered*:
the policy does not probe it on its own (`HedgeRule.answered`), and its twin prices it at
`UNKNOWN_FACTOR` times that lower bound (`HedgeRule.priced`), as it prices a side never run
at that factor times the side it knows. Tools without the hint, declared sides and a machine
without a GPU: no hedge, the decision exactly as before.

>>> from langgraph_devsched.hints import ToolDeviceSpec
>>> from langgraph_devsched.monitor.monitor import RuntimeMonitor
>>> from langgraph_devsched.schedulers.base import Batch, Decision
>>> from langgraph_devsched.telemetry import DeviceState
>>> batch = Batch.of([("c1", "fft", ToolDeviceSpec(idempotent=True, vram_mb=300)),
...                   ("c2", "ocr", ToolDeviceSpec(vram_mb=300))])
>>> device = DeviceState(gpu_available=True, gpu_name="sim", vram_budget_mb=8000,
...                      vram_used_mb=0, gpu_utilization=0.0, cpu_cores=8)
>>> rule = HedgeRule()
>>> d = rule.attach(Decision({"c1": "gpu_now", "c2": "gpu_now"}), batch,
...                 RuntimeMonitor().snapshot(), device)
>>> dict(d.hedges)
{'c1': 'cpu'}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from langgraph_devsched.hedging import HEDGE_BOUND
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.censored import CensoredTimes
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.options import DeviceOption, is_gpu
from langgraph_devsched.schedulers.base import Batch, CallRequest, Decision
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.policy.model import UNKNOWN_FACTOR
from langgraph_devsched.telemetry import DeviceState
from langgraph_devsched.testbed import ToolParams

MAX_TRIES = 2
"""A side is hedged at most this many times (then the policy's own probes take over)."""
MAX_PER_STEP = 2
"""At most this many calls of one step are hedged."""
RECENT = 32
"""Idle-time calibration draws from the calls of this many recent tools."""


class HedgeRule:
    """Which calls of a decision to hedge, and on what option (see the module)."""

    def __init__(
        self, *, bound: float = HEDGE_BOUND, max_tries: int = MAX_TRIES,
        max_per_step: int = MAX_PER_STEP, max_tools: int = 1024,
    ) -> None:
        if bound < 1.0:
            raise ValueError(f"HedgeRule bound must be >= 1 (a multiple of the first "
                             f"side's time), got {bound}")
        self.bound = bound
        self.max_tries = max_tries
        self.max_per_step = max_per_step
        self._tries: LruTable[tuple[str, str], int] = LruTable(max_tools)
        self._recent: list[CallRequest] = []

    def __len__(self) -> int:
        return len(self._tries)

    @property
    def recent(self) -> int:
        """How many recent side-effect-free tools `calibration` may draw from."""
        return len(self._recent)

    def calibration(
        self, obs: Observations, device: DeviceState, censored: CensoredTimes | None = None,
    ) -> tuple[Batch, Decision] | None:
        """An idle-time run: a recent call of a side-effect-free tool (no resident model:
        an idle load would move what is resident) on a side never declared, measured or cut,
        tried fewer than ``max_tries`` times; None when there is nothing to measure."""
        if not device.gpu_available:
            return None
        def known_ms(call: CallRequest) -> float:
            return max((e.run_ms for e in obs.for_tool(call.tool)), default=0.0)

        # the slowest tools first: their unknown side is the costliest to find by a probe
        for call in sorted(reversed(self._recent), key=lambda c: -known_ms(c)):
            for option in _sides(call, device):
                side = _side(option)
                if side == "gpu" and _would_load(call, option, device):
                    continue  # an idle GPU load could evict what a next step needs
                key = (call.tool, side)
                if (self._tries.get(key) or 0) >= self.max_tries or _known(call, side, obs):
                    continue
                if censored is not None and censored.count(call.tool, side):
                    continue
                self._tries[key] = (self._tries.get(key) or 0) + 1
                cid = f"idle/{call.tool}/{side}"
                return (Batch.of([(cid, call.tool, call.spec)]),
                        Decision({cid: option}, reason=f"idle-time calibration of "
                                 f"{call.tool!r} on the {side.upper()}", probe=True,
                                 scheduler="monitor"))
        return None

    def priced(
        self, params: Mapping[str, ToolParams], specs: Mapping[str, ToolDeviceSpec],
        obs: Observations, censored: CensoredTimes | None,
    ) -> dict[str, ToolParams]:
        """The twin's parameters with every side cut at a bound and never measured priced
        as the policy prices a side it never ran: `UNKNOWN_FACTOR` times what it knows of
        it, here the lower bound (at least that, never below the guess it had)."""
        out = dict(params)
        if censored is None or not len(censored):
            return out
        for tool, p in params.items():
            spec = specs.get(tool)
            for side in ("cpu", "gpu"):
                floor = censored.at_least(tool, side)
                if floor is None or spec is None or _known(
                        CallRequest("", tool, spec), side, obs):
                    continue
                if side == "cpu":
                    p = p.model_copy(update={"cpu_ms": max(p.cpu_ms, UNKNOWN_FACTOR * floor)})
                else:
                    gpu = max(p.gpu_ms, UNKNOWN_FACTOR * floor - p.transfer_ms)
                    p = p.model_copy(update={"gpu_ms": gpu})
            out[tool] = p
        return out

    def answered(self, tool: str, side: str, censored: CensoredTimes | None) -> bool:
        """Whether a hedge or an idle run of ``tool`` on ``side`` was cut at its bound: that
        side is known to be slower than the bound, and is not worth a probe of its own."""
        return censored is not None and censored.count(tool, side) > 0

    def remember(self, batch: Batch) -> None:
        """Keep the batch's calls of side-effect-free tools (one per tool, the last
        `RECENT` tools) for `calibration`."""
        for call in batch.calls:
            if call.spec.idempotent:
                self._recent = [c for c in self._recent if c.tool != call.tool][-RECENT + 1:]
                self._recent.append(call)

    def attach(
        self, decision: Decision, batch: Batch, obs: Observations, device: DeviceState,
        censored: CensoredTimes | None = None,
    ) -> Decision:
        """``decision`` with its hedges (unchanged when there are none)."""
        self.remember(batch)
        hedges = self.hedges(batch, decision.mapping, obs, device, censored,
                             decision.predicted_ms)
        if not hedges:
            return decision
        for call in batch.calls:
            if call.call_id in hedges:
                key = (call.tool, _side(hedges[call.call_id]))
                self._tries[key] = (self._tries.get(key) or 0) + 1
        sides = ", ".join(f"{c} on {o}" for c, o in hedges.items())
        return dataclasses.replace(
            decision, hedges=hedges, hedge_bound=self.bound,
            reason=f"{decision.reason}; hedged (side never measured): {sides}, the loser "
                   f"cancelled at {self.bound:g}x the winner's time")

    def narrowed(
        self, call: CallRequest, choices: tuple[DeviceOption, ...], obs: Observations,
        device: DeviceState, censored: CensoredTimes | None = None,
    ) -> tuple[DeviceOption, ...]:
        """``choices`` without the side a hedge of this call is still to measure (at least
        one option kept). A side never measured is priced at a guess (`UNKNOWN_FACTOR`
        times the other): a mapping that ran the call there, a probe's in particular, paid
        what the side really takes, unbounded (a captioner's CPU side 23x its GPU side, for
        2 s); a hedge of the call on its known side measures it at a bound."""
        if not self._active(call, device):
            return choices
        keep = tuple(o for o in choices if not self._awaits(call, _side(o), obs, device,
                                                            censored))
        return keep or choices

    def _active(self, call: CallRequest, device: DeviceState) -> bool:
        return (device.gpu_available and self.max_per_step > 0 and call.spec.idempotent
                and call.spec.pinned is None)

    def _awaits(
        self, call: CallRequest, side: str, obs: Observations, device: DeviceState,
        censored: CensoredTimes | None,
    ) -> bool:
        """Whether a hedge of the call may still measure ``side`` (as `hedges` would
        start it from the other side: never a load)."""
        if _known(call, side, obs) or (self._tries.get((call.tool, side)) or 0) >= (
                self.max_tries) or (censored is not None and censored.count(call.tool, side)):
            return False
        if side == "gpu":
            other = _other(call, "cpu", device)
            return other is not None and not _would_load(call, other, device)
        home = _other(call, "cpu", device)
        if home is None or "cpu" not in call.spec.allowed_options():
            return False
        return not _would_load(call, "cpu", device)

    def hedges(
        self, batch: Batch, mapping: Mapping[str, DeviceOption], obs: Observations,
        device: DeviceState, censored: CensoredTimes | None = None,
        predicted: Mapping[str, float] | None = None,
    ) -> dict[str, DeviceOption]:
        """The calls to hedge and their second option (pure but for reading the tries)."""
        if not device.gpu_available or self.max_per_step < 1:
            return {}
        found: list[tuple[float, int, str, DeviceOption]] = []
        seen: set[tuple[str, str]] = set()
        for i, call in enumerate(batch.calls):
            option = mapping.get(call.call_id)
            if option is None or not call.spec.idempotent or call.spec.pinned is not None:
                continue
            other = _other(call, option, device)
            if other is None or (is_gpu(other) and _would_load(call, other, device)):
                continue  # a GPU load could evict what the step's other calls need
            if _would_load(call, other, device):
                continue  # a host load would outlast the step: idle time measures that side
            side = _side(other)
            key = (call.tool, side)
            if key in seen or (self._tries.get(key) or 0) >= self.max_tries:
                continue
            if censored is not None and censored.count(call.tool, side):
                continue
            if _known(call, side, obs):
                continue
            seen.add(key)
            found.append((-(predicted or {}).get(call.call_id, 0.0), i, call.call_id, other))
        found.sort()
        return {cid: other for _, _, cid, other in found[: self.max_per_step]}


def _side(option: DeviceOption) -> str:
    return "gpu" if is_gpu(option) else "cpu"


def _sides(call: CallRequest, device: DeviceState) -> list[DeviceOption]:
    """The call's options, one per side it may run on (GPU first)."""
    out = [o for o in (_other(call, "cpu", device), _other(call, "gpu_now", device)) if o]
    return out


def _other(call: CallRequest, option: DeviceOption, device: DeviceState) -> DeviceOption | None:
    """The option on the call's other side, or None where it may not run there."""
    allowed = call.spec.allowed_options()
    if is_gpu(option):
        return "cpu" if "cpu" in allowed else None
    need = call.spec.vram_mb + call.spec.weights_mb
    if device.vram_budget_mb and need > device.vram_budget_mb:
        return None  # it could never fit: no run started to fail
    for candidate in ("gpu_queued", "gpu_now"):
        if candidate in allowed:
            return candidate
    return None


def _would_load(call: CallRequest, option: DeviceOption, device: DeviceState) -> bool:
    """Whether running the call on ``option`` would first load its model's weights there (a
    hedge never does: a load costs seconds and moves what is resident)."""
    model = call.spec.model_name(call.tool)
    return model is not None and not device.warm(model, _side(option))


def _known(call: CallRequest, side: str, obs: Observations) -> bool:
    """Whether ``side`` of the call's tool is declared or was measured (fallbacks apart)."""
    profile = call.spec.profile
    if profile is not None and getattr(profile, f"{side}_ms") is not None:
        return True
    return any(e.device == side and not e.fallbacks for e in obs.for_tool(call.tool))
