"""Classification on synthetic measurements: the four classes, unknown, and the boundaries."""

from __future__ import annotations

import pytest

from langgraph_devsched.profiling import LatencyStats, Thresholds, classify, summarize


def stats(median: float, q25: float, q75: float) -> LatencyStats:
    return LatencyStats(
        runs=5, median_ms=median, q25_ms=q25, q75_ms=q75, iqr_ms=q75 - q25, mad_ms=0.0,
        min_ms=q25, max_ms=q75,
    )


def test_gpu_preferred_when_clearly_faster() -> None:
    c = classify(stats(800, 790, 810), stats(60, 58, 62), transfer_ms=5)
    assert c.tool_class == "gpu_preferred"
    assert c.gpu_speedup == pytest.approx(800 / 60)
    assert c.reason == "GPU 13.3x faster"


def test_cpu_preferred_transfer_dominated() -> None:
    c = classify(stats(2.0, 1.9, 2.1), stats(40, 39, 41), transfer_ms=35)
    assert c.tool_class == "cpu_preferred"
    assert c.reason.startswith("GPU slower: transfer-dominated (35.00 of 40.00 ms")


def test_cpu_preferred_without_transfer_says_launch_bound() -> None:
    c = classify(stats(2.0, 1.9, 2.1), stats(5.0, 4.9, 5.1), transfer_ms=0.5)
    assert c.tool_class == "cpu_preferred" and "launch/compute-bound" in c.reason


def test_device_neutral_inside_the_relative_band() -> None:
    # 10% of the larger median (10.0) is 1.0: a 0.9 ms gap is neutral even if noisy
    assert classify(stats(10.0, 5, 15), stats(9.1, 5, 15)).tool_class == "device_neutral"
    # the absolute floor covers microsecond tools
    tiny = classify(stats(0.03, 0.02, 0.04), stats(0.07, 0.06, 0.08))
    assert tiny.tool_class == "device_neutral"


def test_neutral_band_boundary_is_inclusive() -> None:
    th = Thresholds(neutral_rel=0.10, neutral_abs_ms=0.0)
    assert classify(stats(100, 99, 101), stats(90, 89, 91), thresholds=th).tool_class == (
        "device_neutral"
    )
    assert classify(stats(100, 99, 101), stats(89.9, 89, 90), thresholds=th).tool_class == (
        "gpu_preferred"
    )


def test_ambiguous_when_the_iqrs_overlap() -> None:
    c = classify(stats(100, 70, 130), stats(60, 40, 80))
    assert c.tool_class == "ambiguous"
    assert c.reason == "IQRs overlap: cpu [70.00, 130.00] vs gpu [40.00, 80.00] ms"


def test_ambiguous_boundary_touching_iqrs_count_as_overlap() -> None:
    touching = classify(stats(100, 80, 120), stats(60, 40, 80))
    apart = classify(stats(100, 80.01, 120), stats(60, 40, 80))
    assert touching.tool_class == "ambiguous"
    assert apart.tool_class == "gpu_preferred"
    # and the same on the CPU-preferred side
    assert classify(stats(60, 40, 80), stats(100, 80, 120)).tool_class == "ambiguous"
    assert classify(stats(60, 40, 79.99), stats(100, 80, 120)).tool_class == "cpu_preferred"


def test_unknown_when_one_device_is_missing() -> None:
    c = classify(stats(10, 9, 11), None, missing_reason="cuda: no CUDA here")
    assert (c.tool_class, c.reason) == ("unknown", "measured on cpu only (cuda: no CUDA here)")
    assert classify(None, stats(1, 1, 1)).reason == "measured on cuda only"


def test_classify_from_real_summaries() -> None:
    cpu = summarize([100.0, 104.0, 98.0, 101.0, 150.0])
    gpu = summarize([12.0, 12.5, 11.8, 12.1, 30.0])
    assert classify(cpu, gpu).tool_class == "gpu_preferred"


def test_summarize_rejects_no_samples() -> None:
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
