"""The monitor policy: a deterministic scheduler that reads only hints and the monitor.

For a batch it estimates every tool's parameters from its declared hints and the monitor's
observations (`monitor_model`), predicts the makespan of every joint mapping (3^n, pruned to
the allowed options, n <= ``max_calls``) on a twin of the machine, and takes
``min(candidates, key=(score, index))``. A mapping already executed scores its observed mean
makespan when that disagrees with the prediction beyond the noise (the model was wrong
there); otherwise the prediction (which pools every call's samples) is trusted.

Exploration: the monitor's hints (unknown device, symmetric, swap) name what was never
measured. The policy turns a hint into a *probe* — the chosen mapping with that one change —
when the shape's probe budget is not spent, the probe's placement was never executed, and its
predicted extra cost is at most ``probe_horizon`` times the hint's expected gain (the gain
would be collected on later steps of the shape) and at most ``max_probe_cost`` of the step.
Probes are marked ``Decision(probe=True)``.

Where ``view.observations`` is None the policy keeps a private `RuntimeMonitor` fed by its own
`observe`; when the node or runner owns a monitor (observations given), it only reads: if that
monitor was handed to the constructor it reads ``monitor.snapshot(batch)`` (hints about this
batch's shape), else ``view.observations``. It never records into a monitor it does not own.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.testbed import SimulatedTestbed, ToolParams
>>> bed = SimulatedTestbed({"fft": ToolParams(cpu_ms=30, gpu_ms=2, transfer_ms=40)},
...     vram_budget_mb=8000)
>>> spec = ToolDeviceSpec(profile=SoloProfile(cpu_ms=30, gpu_ms=42, transfer_ms=40))
>>> batch = Batch.of([("c1", "fft", spec)])
>>> policy = MonitorPolicy()
>>> d = policy.decide(batch, SchedulerView(bed.device_state()))
>>> dict(d.mapping), d.probe
({'c1': 'cpu'}, False)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.hints import ExplorationHint
from langgraph_devsched.monitor.monitor import RuntimeMonitor
from langgraph_devsched.monitor.observations import Observations
from langgraph_devsched.monitor.state import placement_key
from langgraph_devsched.options import GPU_OPTIONS, DeviceOption, is_gpu
from langgraph_devsched.records import StepRecord
from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
from langgraph_devsched.schedulers.monitor_model import (
    ContentionFit,
    estimate_params,
    fit_contention,
    oom_detect_ms,
    predict_makespans,
    twin,
)
from langgraph_devsched.telemetry import DeviceState

Mapping_ = tuple[DeviceOption, ...]
_DEMAND = {"cpu": 0, "gpu_queued": 1, "gpu_now": 2}
PROBE_KINDS = ("unknown", "symmetric", "sparse", "swap", "shared", "queued")
RESAMPLE_BELOW = 3
"""A ``sparse`` hint may re-run an executed placement until it has this many samples."""


class MonitorPolicy(SchedulerBase):
    """Contention-aware joint mapping search over monitor observations, with bounded probes."""

    name = "monitor"

    def __init__(
        self,
        *,
        probe_horizon: float = 4.0,
        max_probe_cost: float = 0.5,
        override_floor: float = 0.03,
        tie_tolerance: float = 0.005,
        max_calls: int = 8,
        monitor: RuntimeMonitor | None = None,
    ) -> None:
        self.probe_horizon = probe_horizon
        self.max_probe_cost = max_probe_cost
        self.override_floor = override_floor
        self.tie_tolerance = tie_tolerance
        self.max_calls = max_calls
        self._shared = monitor is not None
        self.monitor = monitor or RuntimeMonitor()
        self._private = False
        self._device: DeviceState | None = None
        self._fits: dict[tuple[str, ...], tuple[int, ContentionFit]] = {}

    # -- protocol --------------------------------------------------------------------------

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        self._private = view.observations is None and not self._shared
        self._device = view.device
        obs: Observations
        if self._private or (self._shared and isinstance(self.monitor, RuntimeMonitor)):
            obs = self.monitor.snapshot(batch)  # read only: hints about this batch's shape
        else:
            obs = view.observations  # type: ignore[assignment]
        device = view.device
        tools = [c.tool for c in batch.calls]
        choices = [self._choices(c.spec.allowed_options(), device) for c in batch.calls]
        specs = {c.tool: c.spec for c in batch.calls}
        fit = self._fit(tools, specs, obs, device)
        params = {
            t: estimate_params(t, s, obs, bg_share=device.gpu_utilization,
                               share=fit.shares.get(t), threads=fit.threads.get(t, 1))
            for t, s in specs.items()
        }
        bed = twin(params, device, oom_ms=oom_detect_ms(obs, params))
        scores, seen_ms = self._scores(batch, obs, bed, tools, choices)
        low = min(scores.values())
        tie = max(self.tie_tolerance * low, 1e-6)

        def objective(m: Mapping_) -> tuple[int, float, tuple[int, ...]]:
            # near-ties (within tie_tolerance of the best) are broken by what was observed
            return (int((scores[m] - low) // tie), seen_ms.get(m, scores[m]),
                    self._order(m, choices))

        best = min(scores, key=objective)
        probe = self._probe(batch, obs, scores, best, choices)
        chosen = probe[0] if probe else best
        mapping = dict(zip(batch.call_ids, chosen, strict=True))
        if not device.gpu_available or not batch.calls:
            pass
        predicted = {
            c.call_id: c.end_ms
            for c in bed.simulate(list(zip(batch.call_ids, tools, chosen, strict=True))).calls
        }
        if probe:
            reason = (f"probe: {probe[1].text}; predicted {scores[chosen]:.1f} ms vs best "
                      f"{scores[best]:.1f} ms")
        else:
            reason = f"best predicted makespan {scores[best]:.1f} ms over {len(scores)} mappings"
        return self._decision(mapping, reason, predicted_ms=predicted, probe=bool(probe))

    def _fit(
        self, tools: list[str], specs: dict[str, ToolDeviceSpec], obs: Observations,
        device: DeviceState,
    ) -> ContentionFit:
        """The contention fit for this shape, refitted (warm) when new outcomes arrived."""
        shape = tuple(sorted(tools))
        seen = sum(o.count for o in obs.outcomes_for(shape))
        cached = self._fits.get(shape)
        if cached is not None and cached[0] == seen:
            return cached[1]
        base = {t: estimate_params(t, s, obs, bg_share=device.gpu_utilization)
                for t, s in specs.items()}
        fit = fit_contention(
            tools, specs, obs, device, oom_ms=oom_detect_ms(obs, base),
            start=cached[1] if cached else None, passes=1 if cached else 2,
        )
        self._fits[shape] = (seen, fit)
        return fit

    def observe(self, batch: Batch, decision: Decision, record: StepRecord) -> None:
        if self._private and self._device is not None:
            self.monitor.record_step(batch, decision, record, self._device)

    # -- search ----------------------------------------------------------------------------

    @staticmethod
    def _choices(allowed: Sequence[DeviceOption], device: DeviceState) -> tuple[DeviceOption, ...]:
        if not device.gpu_available and "cpu" in allowed:
            return ("cpu",)
        return tuple(allowed)

    @staticmethod
    def _order(m: Mapping_, choices: Sequence[Sequence[DeviceOption]]) -> tuple[int, ...]:
        """Ties go to the least demanding options (cpu, then gpu_queued, then gpu_now)."""
        return tuple(_DEMAND[o] for o in m)

    def _scores(
        self, batch: Batch, obs: Observations, bed: object, tools: list[str],
        choices: list[tuple[DeviceOption, ...]],
    ) -> tuple[dict[Mapping_, float], dict[Mapping_, float]]:
        """Score per mapping, and the observed makespan of the executed ones (2+ runs)."""
        if len(tools) <= self.max_calls:
            combos = list(itertools.product(*choices))
            preds = predict_makespans(bed, tools, choices)  # type: ignore[arg-type]
        else:
            combos, preds = self._descend(bed, tools, choices)
        seen = {placement_key(o.placement): o for o in obs.outcomes_for(tuple(tools))}
        noise = _pooled_cv(obs)
        scores: dict[Mapping_, float] = {}
        observed: dict[Mapping_, float] = {}
        for combo, pred in zip(combos, preds, strict=True):
            score = pred
            out = seen.get(placement_key(zip(tools, combo, strict=True)))
            if out is not None and out.count >= 2:
                observed[combo] = max(out.latency_ms) if out.latency_ms else out.makespan_ms
            if out is not None and out.count:
                # the model pools every call's samples and estimates the noise-free makespan;
                # an executed placement overrides it only where the model is visibly wrong.
                # Its makespan is read as the largest mean call latency: the mean of noisy
                # makespans (maxima) would be biased upwards.
                seen_ms = max(out.latency_ms) if out.latency_ms else out.makespan_ms
                tolerance = max(self.override_floor, 3.0 * noise / math.sqrt(out.count))
                if abs(seen_ms - pred) > tolerance * max(pred, 1e-9):
                    score = seen_ms
            scores[combo] = score
        return scores, observed

    def _descend(
        self, bed: object, tools: list[str], choices: list[tuple[DeviceOption, ...]]
    ) -> tuple[list[Mapping_], list[float]]:
        """Coordinate descent for batches too large to enumerate."""
        current = [c[0] for c in choices]
        evaluated: dict[Mapping_, float] = {}

        def cost(m: Sequence[DeviceOption]) -> float:
            key = tuple(m)
            if key not in evaluated:
                evaluated[key] = predict_makespans(bed, tools, [(o,) for o in key])[0]  # type: ignore[arg-type]
            return evaluated[key]

        for _ in range(3):
            for i, options in enumerate(choices):
                current[i] = min(
                    options, key=lambda o: (cost([*current[:i], o, *current[i + 1:]]), o)
                )
        return list(evaluated), list(evaluated.values())

    # -- probes ----------------------------------------------------------------------------

    def _probe(
        self, batch: Batch, obs: Observations, scores: dict[Mapping_, float], best: Mapping_,
        choices: list[tuple[DeviceOption, ...]],
    ) -> tuple[Mapping_, ExplorationHint] | None:
        tools = [c.tool for c in batch.calls]
        counts = {placement_key(o.placement): o.count for o in obs.outcomes_for(tuple(tools))}
        floor = 0.01 * scores[best]
        candidates = []
        for hint in obs.hints:
            if hint.probes_left <= 0 or hint.kind not in PROBE_KINDS:
                continue
            if hint.expected_gain_ms <= floor:
                continue
            blind = hint.kind == "unknown" and not _declared(batch, hint)
            for m in self._realise(hint, best, tools, choices, scores):
                runs = counts.get(placement_key(zip(tools, m, strict=True)), 0)
                if m == best or runs >= (RESAMPLE_BELOW if hint.kind == "sparse" else 1):
                    continue
                # a side never measured nor declared has only a made-up prediction: its
                # first measurement is not priced by it
                cost = 0.0 if blind else scores[m] - scores[best]
                affordable = cost <= self.max_probe_cost * scores[best]
                if affordable and cost <= self.probe_horizon * hint.expected_gain_ms:
                    value = hint.expected_gain_ms - cost / self.probe_horizon
                    candidates.append((-value, self._order(m, choices), m, hint))
                    break
        if not candidates:
            return None
        _, _, m, hint = min(candidates, key=lambda c: (c[0], c[1]))
        return m, hint

    @staticmethod
    def _realise(
        hint: ExplorationHint, best: Mapping_, tools: list[str],
        choices: list[tuple[DeviceOption, ...]], scores: dict[Mapping_, float],
    ) -> list[Mapping_]:
        """Mappings that measure what ``hint`` says is unknown: the best predicted ones
        anywhere, then the hint's change to ``best`` alone, then with one other call's option
        changed (to make room), each group best predicted first."""

        def moved(m: list[DeviceOption], i: int, device: str) -> list[list[DeviceOption]]:
            if device == "cpu":
                return [[*m[:i], "cpu", *m[i + 1:]]] if "cpu" in choices[i] else []
            return [[*m[:i], o, *m[i + 1:]] for o in GPU_OPTIONS if o in choices[i]]

        out: list[list[DeviceOption]] = []
        touched: set[int] = set()
        if hint.kind in ("shared", "queued"):
            (tool,) = hint.tools
            was, now = ("gpu_queued", "gpu_now") if hint.kind == "shared" else (
                "gpu_now", "gpu_queued")
            for i, t in enumerate(tools):
                if t == tool and best[i] == was and now in choices[i]:
                    out, touched = [[*best[:i], now, *best[i + 1:]]], {i}
                    break
        elif hint.kind == "swap":
            a, b = hint.tools
            ia = next((i for i, t in enumerate(tools) if t == a and is_gpu(best[i])), None)
            ib = next((i for i, t in enumerate(tools) if t == b and best[i] == "cpu"), None)
            if ia is None or ib is None or hint.option not in choices[ib]:
                return []
            if "cpu" not in choices[ia]:
                return []
            m = list(best)
            m[ia], m[ib] = "cpu", hint.option
            out, touched = [m], {ia, ib}
        else:
            (tool,), (device,) = hint.tools, hint.devices
            for i, t in enumerate(tools):
                if t == tool and is_gpu(best[i]) != (device == "gpu"):
                    out, touched = moved(list(best), i, device), {i}
                    break
        plain = sorted((tuple(m) for m in out if tuple(m) in scores), key=lambda m: (scores[m], m))
        variants: set[Mapping_] = set()
        for m in out:
            for j, options in enumerate(choices):
                if j not in touched:
                    variants.update(
                        tuple([*m[:j], o, *m[j + 1:]]) for o in options if o != m[j]
                    )
        room = sorted((m for m in variants if m in scores), key=lambda m: (scores[m], m))
        anywhere = [m for m in sorted(scores, key=lambda m: (scores[m], m))[:_SCAN]
                    if _measures(hint, m, tools)][:3]
        return anywhere + plain + room


_SCAN = 2000
"""How many of the best-scored mappings are scanned for one that measures a hint."""


def _measures(hint: ExplorationHint, m: Mapping_, tools: list[str]) -> bool:
    """Whether executing ``m`` measures what ``hint`` says is unknown."""
    if hint.kind == "swap":
        a, b = hint.tools
        return any(t == a and o == "cpu" for t, o in zip(tools, m, strict=True)) and any(
            t == b and o == hint.option for t, o in zip(tools, m, strict=True))
    (tool,) = hint.tools[:1]
    if hint.kind == "shared":
        return any(t == tool and o == "gpu_now" for t, o in zip(tools, m, strict=True)) and (
            sum(1 for o in m if is_gpu(o)) > 1)
    if hint.kind == "queued":
        return any(t == tool and o == "gpu_queued" for t, o in zip(tools, m, strict=True))
    on_gpu = hint.devices[:1] == ("gpu",)
    return any(t == tool and is_gpu(o) == on_gpu for t, o in zip(tools, m, strict=True))


def _declared(batch: Batch, hint: ExplorationHint) -> bool:
    """Whether the hint's tool declares a solo time for the hint's device."""
    for call in batch.calls:
        if call.tool == hint.tools[0] and call.spec.profile is not None:
            side = call.spec.profile.gpu_ms if hint.devices[:1] == ("gpu",) else (
                call.spec.profile.cpu_ms)
            return side is not None
    return False


def _pooled_cv(obs: Observations) -> float:
    """Typical relative spread of the per-call estimates (0 when nothing is repeated)."""
    cvs = [e.std_ms / e.run_ms for e in obs.estimates if e.count >= 2 and e.run_ms > 0]
    return sum(cvs) / len(cvs) if cvs else 0.0
