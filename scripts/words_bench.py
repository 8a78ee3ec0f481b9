"""The must-show table of forecasts from words, from `devsched bench --taskbench` JSONs.

Usage: ``python scripts/words_bench.py A.json [B.json ...]``: the runs are merged by
conversation name (one scheduler's run may come from another JSON, e.g. ``agentic`` against
a model server). Prints, per scheduler, the whole-run total ratio against the exact
reference (p50 / p95 / max over conversations), the share of the p95 gap between the
monitor alone and ``monitor+oracle`` it closes, the conversations more than 1.05x the
monitor's own total, and its forecasts (asked, in force before the request's first step,
latency p50, node precision / recall / F1).
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

from langgraph_devsched.bench.runner import percentile


def quantile(values: list[float], q: float) -> float:
    """The bench report's percentile (so the figures match docs/results.md)."""
    return percentile(values, q * 100)


def merged(paths: list[str]) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    runs: dict[str, dict[str, Any]] = {}
    reference: dict[str, float] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for s in json.load(f)["scenarios"]:
                reference[s["name"]] = s["total_reference_ms"]
                for name, r in s["results"].items():
                    runs.setdefault(name, {})[s["name"]] = r
    return runs, reference


def main(paths: list[str]) -> None:
    runs, reference = merged(paths)
    alone = runs.get("monitor", {})
    p95 = {n: quantile([r["total_ratio"] for r in rs.values()], 0.95) for n, rs in runs.items()}
    gap = p95.get("monitor", 0.0) - p95.get("monitor+oracle", 0.0)
    print("| scheduler | n | total ratio p50 / p95 / max | p95 gap closed | > 1.05x monitor "
          "| asked | in time | latency p50 | P / R / F1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rs in runs.items():
        ratios = [r["total_ratio"] for r in rs.values()]
        worse = sorted((c, round(r["total_ms"] / alone[c]["total_ms"], 3))
                       for c, r in rs.items() if c in alone
                       and r["total_ms"] > 1.05 * alone[c]["total_ms"])
        words = [r["words"] for r in rs.values() if r.get("words")]
        closed = f"{(p95['monitor'] - p95[name]) / gap:.0%}" if gap > 0 else "-"
        asked = sum(w["asked"] for w in words)
        in_time = sum(w["in_time"] for w in words)
        lat = [w["latency_ms_p50"] for w in words if w["latency_ms_p50"] is not None]
        scored = [w for w in words if w["f1"] is not None]
        prf = " / ".join(f"{statistics.fmean(w[k] for w in scored):.3f}"
                         for k in ("precision", "recall", "f1")) if scored else "-"
        print(f"| {name} | {len(ratios)} | {quantile(ratios, 0.5):.3f} / "
              f"{quantile(ratios, 0.95):.3f} / {max(ratios):.3f} | {closed} | "
              f"{len(worse)}{' ' + str(worse) if worse else ''} | {asked or '-'} | "
              f"{in_time if words else '-'} | "
              f"{f'{statistics.median(lat):.0f} ms' if lat else '-'} | {prf} |")
    exact = sum(1 for c in reference if c in alone)
    print(f"\nconversations: {len(reference)}; references exact: see the JSONs "
          f"(total_reference_exact); merged runs of {exact} conversations")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
