"""The monitor policy charges a mapping the reload of the models its evictions take from
later steps (`schedulers/policy/eviction.py`).

With noisy declared profiles (sigma 0.3), `residency_visual_suite` put its small VQA call on
the GPU, about 100 ms faster for that step, which evicted the other diffusion model; the next
step loaded it again (2.9 s), and so on every step: 2.2x the optimum, 41 loads in 40 steps.
"""

from __future__ import annotations

import pytest

from langgraph_devsched.schedulers.policy.eviction import DEFAULT_LOAD_MS_PER_MB, RecentModels
from tests.builtin_bench import run_builtin

pytest.importorskip("numpy")


def test_a_step_does_not_evict_the_model_the_next_step_needs() -> None:
    scenario = run_builtin("residency_visual_suite", declare="noisy(0.3)")
    monitor = scenario.results["monitor"]
    assert monitor.optimal, (monitor.final_mapping, scenario.optimal_mapping)
    assert monitor.loads <= 8, monitor.loads  # both diffusion models stay warm
    assert monitor.regret_ms < 10_000, monitor.regret_ms


def test_only_recently_used_models_cost_their_reload_and_the_table_is_bounded() -> None:
    use = RecentModels(horizon=3, max_models=4)
    use.note(["a"])
    use.learn({"a": 100.0, "never_used": 5.0})
    assert use.reload_ms(["a", "never_used"]) == 100.0
    for k in range(10):
        use.note([f"m{k}"])
    assert len(use) == 4
    assert use.reload_ms(["a"]) == 0.0


def test_an_eviction_costs_the_load_seen_on_an_earlier_step() -> None:
    # with nothing declared, a decision learned only its own batch's load times: the ASR
    # step after the first caption step saw the caption model's load as 0 (unknown when
    # that model was last decided), probed ASR on the GPU, evicted the caption model and
    # paid its 2.6 s load again in round 2 (3,240 ms of regret)
    scenario = run_builtin("residency_alternating", declare="none")
    monitor = scenario.results["monitor"]
    extra = [s - r for s, r in zip(monitor.round_makespans_ms,
                                   scenario.reference_makespans_ms, strict=True)]
    assert monitor.optimal, (monitor.final_mapping, scenario.optimal_mapping)
    # the reference loads the next turn's model while the agent thinks; the monitor learns
    # which turn follows which in round 2, and then pays no load on a step
    assert max(extra[2:]) < 500, extra
    assert monitor.total_ratio is not None and monitor.total_ratio < 1.5, monitor.total_ratio


def test_a_load_seen_stays_learned_when_no_estimate_is_known() -> None:
    use = RecentModels(horizon=3)
    use.note(["caption"])
    use.learn({"caption": 2600.0})  # seen on a step
    use.note(["asr"])
    use.learn({"caption": 0.0})  # a decision whose estimate knows nothing yet
    assert use.reload_ms(["caption"]) == 2600.0


def test_a_load_never_seen_is_priced_from_the_weights_not_free() -> None:
    # nothing declared, `residency_cpu_preferred`: the ASR weights were resident from the
    # start, no step had shown their load, and evicting them was priced 0 ms; the next step
    # paid 2.5 s to load them again
    use = RecentModels()
    use.note(["asr"], weights_mb={"asr": 3000.0})
    assert use.reload_ms(["asr"]) == 3000.0 * DEFAULT_LOAD_MS_PER_MB
    use.note(["ocr"], weights_mb={"ocr": 3500.0})
    use.learn({"ocr": 900.0})  # a load seen: its rate prices the unseen ones
    assert use.reload_ms(["asr"]) == pytest.approx(3000.0 * 900.0 / 3500.0)
    use.learn({"asr": 2500.0})
    assert use.reload_ms(["asr"]) == 2500.0
