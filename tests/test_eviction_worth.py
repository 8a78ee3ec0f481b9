"""A GPU copy that saves its calls nothing, beside a host copy, is free to evict."""

from __future__ import annotations

from langgraph_devsched.bench.generate import generated_scenario
from langgraph_devsched.bench.runner import run_scenario


def test_a_gpu_copy_worth_nothing_beside_a_host_copy_does_not_keep_a_call_off_the_gpu() -> None:
    """gen-s3-166: a 2.2 GB GPU holds ``m0`` (1.1 GB), whose tool ``t0`` is transfer-bound
    (47 ms on the CPU, 157 ms on the GPU); idle time loads a host copy of it. ``t1`` has no
    model, needs 1.5 GB of working memory and takes 2.7 s on the CPU, 141 ms on the GPU,
    which it fits once ``m0`` is evicted (the testbed evicts idle weights for a call's
    working memory, as the real ledger does). Charged ``m0``'s 2.8 s reload, evicting it
    looked dearer than the CPU: 2.38x the whole-run reference, every ``t1`` on the CPU until
    a probe. Free to evict (its copy saves nothing and a host copy serves ``t0``), ``t1``
    runs on the GPU from its first call."""
    result = run_scenario(generated_scenario(3, 166), ["monitor"], seed=3, decision_cost="none")
    monitor = result.results["monitor"]
    assert result.total_reference_exact
    assert monitor.total_ratio is not None and monitor.total_ratio <= 1.05, (
        monitor.total_ratio, monitor.round_makespans_ms)
