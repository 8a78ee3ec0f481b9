"""The monitor's twin learns the machine's contention (issue 16): it selects the physics
that explains the executed placements, fits shares jointly, and lets repeated measurements
override it beyond their own noise."""

from __future__ import annotations

import itertools

import pytest

from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
from langgraph_devsched.monitor import RuntimeMonitor
from langgraph_devsched.monitor.observations import PlacementOutcome
from langgraph_devsched.schedulers import Batch, Decision
from langgraph_devsched.schedulers.policy.contention_fit import fit_contention
from langgraph_devsched.schedulers.policy.model import ContentionModel, twin
from langgraph_devsched.schedulers.policy.scores import TwinScores, override_tolerance
from langgraph_devsched.testbed import SimulatedTestbed, ToolParams

pytest.importorskip("numpy")

TOOLS = {
    "asr": ToolParams(cpu_ms=400, gpu_ms=60, vram_mb=1000, gpu_share=0.4),
    "ocr": ToolParams(cpu_ms=300, gpu_ms=40, transfer_ms=5, vram_mb=800, gpu_share=0.3),
    "tts": ToolParams(cpu_ms=350, gpu_ms=50, vram_mb=900, gpu_share=0.2),
}
SEQ = ["asr", "ocr", "tts"]


def declared(p: ToolParams) -> ToolDeviceSpec:
    """A profiler's solo times and VRAM; never the GPU share (or the physics)."""
    return ToolDeviceSpec(vram_mb=p.vram_mb, profile=SoloProfile(
        cpu_ms=p.cpu_ms, gpu_ms=p.gpu_ms + p.transfer_ms, transfer_ms=p.transfer_ms))


def observed(physics: str, runs: int = 2) -> tuple[RuntimeMonitor, Batch, SimulatedTestbed]:
    """Every mapping of the three tools with two or more on the GPU, run on a noise-free
    testbed of ``physics`` and recorded by a monitor."""
    bed = SimulatedTestbed(TOOLS, vram_budget_mb=8000, physics=physics)  # type: ignore[arg-type]
    specs = {t: declared(p) for t, p in TOOLS.items()}
    batch = Batch.of([(f"c{i}", t, specs[t]) for i, t in enumerate(SEQ)])
    monitor = RuntimeMonitor()
    for m in itertools.product(("gpu_now", "gpu_queued", "cpu"), repeat=3):
        if sum(o != "cpu" for o in m) < 2:
            continue
        for _ in range(runs):
            calls = list(zip(batch.call_ids, SEQ, m, strict=True))
            decision = Decision(mapping=dict(zip(batch.call_ids, m, strict=True)),
                                reason="test", scheduler="test")
            monitor.record_step(batch, decision, bed.run_step(calls), bed.device_state())
    return monitor, batch, bed


def fitted(physics: str) -> tuple[object, SimulatedTestbed]:
    monitor, batch, bed = observed(physics)
    obs = monitor.snapshot(batch, tools=set(SEQ))
    specs = {c.tool: c.spec for c in batch.calls}
    return fit_contention(SEQ, specs, obs, bed.device_state(), oom_ms=20.0), bed


@pytest.mark.parametrize("physics", ["processor_sharing", "time_slicing", "idle_queue",
                                     "bandwidth"])
def test_the_fit_selects_the_physics_that_produced_the_observations(physics: str) -> None:
    fit, bed = fitted(physics)
    assert fit.model.physics == physics, fit.losses  # type: ignore[attr-defined]
    # the twin (fitted shares, selected model) predicts the ground truth's makespans
    from langgraph_devsched.schedulers.policy.model import estimate_params

    monitor, batch, _ = observed(physics, runs=1)
    obs = monitor.snapshot(batch, tools=set(SEQ))
    params = {c.tool: estimate_params(c.tool, c.spec, obs, bg_share=0.0,
                                      share=fit.shares.get(c.tool))  # type: ignore[attr-defined]
              for c in batch.calls}
    bed_twin = twin(params, bed.device_state(), oom_ms=20.0,
                    model=fit.model)  # type: ignore[attr-defined]
    mappings = list(itertools.product(("gpu_now", "gpu_queued", "cpu"), repeat=3))
    truth = bed.mapping_makespans(SEQ, mappings)
    guess = bed_twin.mapping_makespans(SEQ, mappings)
    assert abs(guess / truth - 1.0).max() < 0.05


def test_a_twin_of_processor_sharing_cannot_explain_idle_queue() -> None:
    fit, _ = fitted("idle_queue")
    losses = fit.losses  # type: ignore[attr-defined]
    assert losses["idle_queue"] < 0.1 * losses["processor_sharing"]


def test_shares_of_tools_run_together_are_fitted_jointly() -> None:
    # the two run side by side in every sample: only lowering both explains it
    fit, _ = fitted("processor_sharing")
    shares = fit.shares  # type: ignore[attr-defined]
    assert shares["asr"] + shares["ocr"] + shares["tts"] <= 1.0 + 1e-9, shares


def outcome(ms: float, std: float, count: int) -> PlacementOutcome:
    return PlacementOutcome(shape=("a",), placement=(("a", "gpu_now"),), makespan_ms=ms,
                            run_ms=(ms,), latency_ms=(ms,), std_ms=std, count=count)


def test_a_repeated_mapping_overrides_the_twin_beyond_its_own_noise() -> None:
    # 16 runs spread 1 %: 6 % off the prediction is evidence, whatever the pooled spread
    many = outcome(106.0, 1.06, 16)
    assert override_tolerance(many, noise=0.15, floor=0.03) < 0.06
    assert override_tolerance(many, noise=0.0, floor=0.03) == pytest.approx(
        3 * ((15 * 0.01**2) / 19) ** 0.5 / 4)
    # two runs say little of their spread: the pooled noise dominates
    assert override_tolerance(outcome(106.0, 0.0, 2), noise=0.05, floor=0.03) > 0.08
    # one run: 3x the pooled noise, at least the floor
    assert override_tolerance(outcome(106.0, 0.0, 1), noise=0.0, floor=0.03) == 0.03
    bed = SimulatedTestbed({"a": ToolParams(cpu_ms=500, gpu_ms=100)}, vram_budget_mb=1000)
    scores = TwinScores(bed, ["a"], [many], noise=0.15, override_floor=0.03)
    assert scores([("gpu_now",)]) == [106.0]  # predicted 100, measured 106 +- 0.3
    loose = outcome(106.0, 10.6, 16)  # spread 10 %: within the noise, the twin stands
    assert TwinScores(bed, ["a"], [loose], noise=0.15, override_floor=0.03)(
        [("gpu_now",)]) == [100.0]


def test_the_default_contention_model_is_processor_sharing() -> None:
    assert ContentionModel().physics == "processor_sharing"
    assert ContentionModel("bandwidth", mem_bound=0.25).label == "bandwidth(mem_bound 0.25)"
