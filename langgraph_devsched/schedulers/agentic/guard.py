"""The guard on an agentic answer: the monitor's twin predicts it against the best it knows.

The twin is the `schedulers.policy.model` noise-free testbed built from the monitor's observations
(declared hints blended with measurements). `TwinView.rank` predicts every mapping of the
batch (a coordinate descent beyond `ENUMERATE_UP_TO` calls); `guard` rejects an answer whose
predicted makespan exceeds ``ratio`` times the best prediction, with both recorded, unless
the answer measures what an exploration hint names (`hinted_probe`). Where the answer's
mapping already ran, measurement judges it too (`measured_guard`): a mapping measured slower
than the fastest measured one of its shape by more than `MEASURED_MARGIN` is rejected. The
same ranking gives pick mode's candidates.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.monitor.observations import Observations
>>> from langgraph_devsched.schedulers.base import Batch
>>> from langgraph_devsched.telemetry import DeviceState
>>> batch = Batch.of([("a", "asr", ToolDeviceSpec(vram_mb=1000,
...     profile=SoloProfile(cpu_ms=900, gpu_ms=60)))])
>>> gpu = DeviceState(True, "gpu", 8000, 0, 0.0, 8)
>>> twin_view = TwinView.build(batch, gpu, Observations(step=0))
>>> verdict = guard(twin_view, {"a": "cpu"}, ratio=1.5)
>>> verdict.rejected, round(verdict.answer_ms), round(verdict.best_ms)
(True, 900, 60)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_devsched.options import DeviceOption
from langgraph_devsched.schedulers.base import Batch
from langgraph_devsched.telemetry import DeviceState

ENUMERATE_UP_TO = 8
"""Batches up to this many calls are predicted exhaustively (3**8 mappings)."""
GPU_DEMAND = {"cpu": 0, "gpu_queued": 1, "gpu_now": 2}
"""How much of the GPU an option asks for: ties go to the mapping asking less."""


@dataclass(frozen=True)
class Verdict:
    """The twin's predictions for the answer and for the best mapping it knows."""

    answer_ms: float
    best_ms: float
    best: dict[str, DeviceOption]
    ratio: float

    @property
    def rejected(self) -> bool:
        return self.answer_ms > self.ratio * self.best_ms + 1e-9

    def text(self) -> str:
        return (
            f"twin predicts {self.answer_ms:.1f} ms for the answer vs {self.best_ms:.1f} ms "
            f"for the best known mapping (limit {self.ratio:g}x)"
        )


@dataclass
class TwinView:
    """A batch and the twin that predicts its mappings."""

    batch: Batch
    bed: Any
    choices: list[tuple[DeviceOption, ...]]
    reload: Callable[[Sequence[str]], float] | None = None
    """What evicting resident models costs the steps after (the fallback policy's price,
    `DefaultPolicy.reload_ms`): added to every prediction, so that an answer that evicts a
    model the next step loads again is not judged by its own step alone."""
    _ranked: list[tuple[float, dict[str, DeviceOption]]] | None = field(
        default=None, repr=False, compare=False)

    @classmethod
    def build(cls, batch: Batch, device: DeviceState, observations: Any,
              reload: Callable[[Sequence[str]], float] | None = None) -> TwinView | None:
        """The twin for ``batch``; None without `Observations`, when a tool has neither a
        declared profile nor a measurement (the twin would predict from priors alone), or on
        a machine with several GPUs: this twin models one GPU (the flat fields, GPU 0), so
        it would judge every GPU call as sharing GPU 0 and reject answers that spread the
        calls over the GPUs. There the measured guard alone judges an answer, and pick mode
        runs as one-shot."""
        from langgraph_devsched.monitor.observations import Observations
        from langgraph_devsched.schedulers.policy.model import (
            estimate_params,
            oom_detect_ms,
            twin,
        )

        if not isinstance(observations, Observations) or not batch.calls:
            return None
        if len(device.devices) > 1:
            return None  # a one-GPU twin: see the docstring
        measured = {e.tool for e in observations.estimates}
        if any(c.spec.profile is None and c.tool not in measured for c in batch.calls):
            return None  # the twin would only know its priors for this tool
        specs = {c.tool: c.spec for c in batch.calls}
        params = {
            t: estimate_params(t, s, observations, bg_share=device.gpu_utilization)
            for t, s in specs.items()
        }
        bed = twin(params, device, oom_ms=oom_detect_ms(observations, params))
        choices = [
            tuple(c.spec.allowed_options()) if device.gpu_available else ("cpu",)
            for c in batch.calls
        ]
        choices = [c if c else ("cpu",) for c in choices]
        return cls(batch, bed, choices, reload if device.resident else None)

    def predict(self, mapping: Mapping[str, DeviceOption]) -> float:
        """The twin's makespan of ``mapping``, plus the reload of what it evicts."""
        calls = [(c.call_id, c.tool, mapping[c.call_id]) for c in self.batch.calls]
        return float(self.bed.makespan(calls)) + self.reload_of(
            [[mapping[c] for c in self.batch.call_ids]])[0]

    def reload_of(self, mappings: Sequence[Sequence[str]]) -> list[float]:
        """Per mapping (options in call order), the reload its evictions cost later steps
        (0 without a price or without resident models)."""
        if self.reload is None:
            return [0.0] * len(mappings)
        tools = [c.tool for c in self.batch.calls]
        return [self.reload(models) if models else 0.0
                for models in self.bed.mapping_evictions(tools, mappings)]

    def rank(self, k: int | None = None) -> list[tuple[float, dict[str, DeviceOption]]]:
        """Mappings by predicted makespan (ties: fewer GPU options first), best first; ranked
        once per step (the guard asks for the best of every answer it screens)."""
        if self._ranked is None:
            self._ranked = self._rank_all()
        return [(p, dict(m)) for p, m in self._ranked[: k or len(self._ranked)]]

    def _rank_all(self) -> list[tuple[float, dict[str, DeviceOption]]]:
        from langgraph_devsched.schedulers.policy.model import predict_makespans

        tools = [c.tool for c in self.batch.calls]
        ids = list(self.batch.call_ids)
        if len(ids) <= ENUMERATE_UP_TO:
            combos = list(itertools.product(*self.choices))
            preds = predict_makespans(self.bed, tools, self.choices)
            if self.reload is not None:
                preds = [p + r for p, r in zip(preds, self.reload_of(combos), strict=True)]
        else:
            combos, preds = self._descend()
        ranked = sorted(zip(preds, combos, strict=True),
                        key=lambda pc: (pc[0], tuple(GPU_DEMAND[o] for o in pc[1])))
        return [(p, dict(zip(ids, c, strict=True))) for p, c in ranked]

    def _descend(self) -> tuple[list[tuple[DeviceOption, ...]], list[float]]:
        current = [c[0] for c in self.choices]
        seen: dict[tuple[DeviceOption, ...], float] = {}
        ids = list(self.batch.call_ids)

        def cost(m: list[DeviceOption]) -> float:
            key = tuple(m)
            if key not in seen:
                seen[key] = self.predict(dict(zip(ids, key, strict=True)))
            return seen[key]

        for _ in range(3):
            for i, options in enumerate(self.choices):
                current[i] = min(
                    options, key=lambda o: (cost([*current[:i], o, *current[i + 1 :]]), o)
                )
        return list(seen), list(seen.values())


def guard(twin_view: TwinView, mapping: Mapping[str, DeviceOption], *, ratio: float) -> Verdict:
    """The twin's verdict on ``mapping`` (complete for the batch) at ``ratio``."""
    best_ms, best = twin_view.rank(1)[0]
    answer_ms = twin_view.predict(mapping)
    if answer_ms < best_ms:  # the answer is better than anything ranked (descent)
        best_ms, best = answer_ms, dict(mapping)
    return Verdict(answer_ms, best_ms, best, ratio)


def hinted_probe(
    mapping: Mapping[str, DeviceOption], batch: Batch, hints: Sequence[Any]
) -> str | None:
    """The text of an exploration hint that ``mapping`` measures, else None: the guard never
    vetoes a probe the hints asked for. A hint is measured when each of its tools has a call
    on the hint's device (``devices``), with the hint's option where it names one for a
    single tool (``shared``, ``queued``, ``noisy``, ``stale``).

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> b = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
    >>> hint = {"kind": "swap", "tools": ["ocr", "asr"], "devices": ["cpu", "gpu"],
    ...         "text": "swap ocr/asr"}
    >>> hinted_probe({"a": "cpu", "b": "gpu_now"}, b, [hint])
    'swap ocr/asr'
    >>> hinted_probe({"a": "gpu_now", "b": "cpu"}, b, [hint]) is None
    True
    """
    placed: dict[str, set[tuple[str, str]]] = {}
    for call in batch.calls:
        option = mapping.get(call.call_id)
        if option is not None:
            side = "gpu" if option != "cpu" else "cpu"
            placed.setdefault(call.tool, set()).add((side, option))
    for hint in hints:
        data = hint.model_dump() if hasattr(hint, "model_dump") else hint
        tools = list(data.get("tools") or ())
        devices = list(data.get("devices") or ())
        option = data.get("option") if len(tools) == 1 else None
        if not tools or (not devices and option is None):
            continue
        ok = True
        for i, tool in enumerate(tools):
            here = placed.get(tool, set())
            want = devices[i] if i < len(devices) else None
            if not any((want is None or s == want) and (option is None or o == option)
                       for s, o in here):
                ok = False
                break
        if ok:
            return str(data.get("text") or data.get("kind"))
    return None


MEASURED_MARGIN = 0.02
"""An answer whose mapping ran slower than the fastest measured mapping of its shape by more
than this (relative, mean makespans) is rejected: a measured mistake is not repeated."""


@dataclass(frozen=True)
class MeasuredVerdict:
    """The answer's measured mean makespan against the fastest measured mapping's."""

    answer_ms: float
    fastest_ms: float
    margin: float
    runs: int = 1
    """How many runs the answer's mean is of."""

    @property
    def rejected(self) -> bool:
        return self.answer_ms > (1.0 + self.margin) * self.fastest_ms + 1e-9

    def text(self) -> str:
        return (
            f"the answer's mapping measured {self.answer_ms:.1f} ms vs {self.fastest_ms:.1f} ms "
            f"for the fastest measured mapping (limit {1.0 + self.margin:g}x)"
        )


def measured_guard(
    outcomes: Sequence[Mapping[str, Any]], batch: Batch, mapping: Mapping[str, str],
    *, margin: float = MEASURED_MARGIN,
) -> MeasuredVerdict | None:
    """The measured verdict on ``mapping`` from the executed mappings of ``batch``'s shape
    (``outcomes``: the monitor's, `observations.outcomes_of`); None when it never ran. On a
    machine with several GPUs both are spelled with their GPUs (``gpu_now@1``: the
    scheduler's own `gpu_outcomes`, `gpu_choice.slot_mapping`), so the GPUs are compared too.

    >>> from langgraph_devsched.hints import ToolDeviceSpec
    >>> b = Batch.of([("a", "ocr", ToolDeviceSpec()), ("b", "asr", ToolDeviceSpec())])
    >>> ran = [{"placement": [["asr", "gpu_now"], ["ocr", "cpu"]], "makespan_ms": 90.0},
    ...        {"placement": [["asr", "gpu_now"], ["ocr", "gpu_now"]], "makespan_ms": 120.0}]
    >>> measured_guard(ran, b, {"a": "gpu_now", "b": "gpu_now"}).rejected
    True
    >>> measured_guard(ran, b, {"a": "cpu", "b": "gpu_now"}).rejected
    False
    >>> measured_guard(ran, b, {"a": "cpu", "b": "cpu"}) is None
    True
    """
    placement = sorted((c.tool, str(mapping[c.call_id])) for c in batch.calls)
    spans = {
        tuple(sorted(tuple(map(str, pair[:2])) for pair in o.get("placement", ()))):
            (float(o.get("makespan_ms") or 0.0), int(o.get("count") or 1))
        for o in outcomes
    }
    answer = spans.get(tuple(placement))
    if answer is None:
        return None
    return MeasuredVerdict(answer[0], min(ms for ms, _ in spans.values()), margin,
                           runs=max(1, answer[1]))


NOISE_Z = 2.0
"""Two measured means tell two mappings apart when their gap exceeds this many standard
errors of the gap (`distinguishes`)."""


def shape_noise_ms(outcomes: Sequence[Mapping[str, Any]]) -> float | None:
    """The spread of one run's makespan in a shape: the pooled standard deviation of the
    shape's mappings (the monitor's rows, before `warm_first`) that ran at least twice and
    loaded no model in any run (a load's run is another distribution). None where none did:
    the noise is not known yet.

    >>> shape_noise_ms([{"count": 3, "std_ms": 30.0, "makespan_ms": 640.0, "warm_ms": 640.0},
    ...                 {"count": 1, "std_ms": 0.0, "makespan_ms": 600.0, "warm_ms": 600.0},
    ...                 {"count": 4, "std_ms": 900.0, "makespan_ms": 1500.0, "warm_ms": 600.0}])
    30.0
    """
    weight = total = 0.0
    for o in outcomes:
        runs = int(o.get("count") or 0)
        warm = o.get("warm_ms")
        if runs < 2 or warm is None or abs(float(warm) - float(o.get("makespan_ms") or 0.0)) > 1e-6:
            continue
        weight += runs - 1
        total += (runs - 1) * float(o.get("std_ms") or 0.0) ** 2
    return math.sqrt(total / weight) if weight else None


def distinguishes(gap_ms: float, noise_ms: float | None, runs_a: int, runs_b: int,
                  *, z: float = NOISE_Z) -> bool:
    """Whether two measured means, of ``runs_a`` and ``runs_b`` runs whose makespans spread by
    ``noise_ms`` each (`shape_noise_ms`), differ by more than the noise: ``gap_ms`` beyond
    ``z`` standard errors of the gap. A mapping measured twice at 644 ms and one measured 13
    times at 644 ms (a 0 ms gap), or a single run 18 ms faster than a two-run mean, are not
    told apart at 30 ms of noise; 120 ms is. With the noise not known yet (None) no gap is.

    >>> distinguishes(-18.0, 30.0, 1, 2), distinguishes(-120.0, 30.0, 1, 2)
    (False, True)
    >>> distinguishes(-1.0, 0.0, 1, 1), distinguishes(-500.0, None, 1, 1)
    (True, False)
    """
    if noise_ms is None:
        return False
    error = noise_ms * math.sqrt(1.0 / max(1, runs_a) + 1.0 / max(1, runs_b))
    return abs(gap_ms) > z * error + 1e-9
