"""Write docs/results.md from the benchmark runs committed under docs/results/.

    python scripts/results_page.py          # rewrite docs/results.md
    python scripts/results_page.py --check  # exit 1 if docs/results.md is not what the runs give
    python scripts/results_page.py --slim docs/results/NAME.json  # drop mappings (large sets)

Each run is a pair: ``NAME.json``, written by ``devsched bench --json``, and ``NAME.run.yaml``,
its sidecar, which says how it was made:

    title: Every scheduler on the built-in scenarios   # the section's heading
    command: devsched bench --rounds 20 --json docs/results/builtins.json
    date: 2026-12-05 17:46 UTC
    machine: 2 CPU cores shared with other work, no GPU; load average 3.4 at the start
    order: 10          # optional: sections sorted by (order, NAME); default 100
    note: optional paragraph printed under the run line
    figures: [img/accuracy.png]   # optional: images (paths relative to docs/) of this run

The page shows, per run, the summary per scheduler and the per-scenario final ratios, and
where the run has them, the resident-model figures and the summary per contention physics.
Only keys of the bench JSON contract (`langgraph_devsched.bench.report`) are read; other
keys are ignored. tests/test_results_page.py checks that the committed page is what this
writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "results"
PAGE = ROOT / "docs" / "results.md"
SIDECAR_KEYS = {"title", "command", "date", "machine", "order", "note", "figures"}
REQUIRED = ("title", "command", "date", "machine")

HEAD = """\
# Results

Every table on this page is written by `python scripts/results_page.py` from the benchmark
runs committed under `docs/results/` (a test fails when the page and the runs differ). What
the columns mean and what the reference is: [the benchmark's method](benchmark.md#metrics).
Runs on the simulated testbed have exact virtual times; only the decision-time columns
depend on the machine that ran them, which each run names.

**Adding a run.** Write the bench JSON with `devsched bench ... --json docs/results/NAME.json`
and beside it `docs/results/NAME.run.yaml`, a sidecar with `title` (the section's heading),
`command` (the exact command), `date`, `machine` (cores, GPU, and the load while it ran),
and optionally `order` (sections sort by it, then by name), `note` (a paragraph shown under the
run) and `figures` (images of the run, paths relative to `docs/`). Then run `python
scripts/results_page.py` and commit the three files together.
"""


class RunError(ValueError):
    """A run under docs/results/ that cannot be shown: the message says which and why."""


def load_runs(folder: Path = RUNS) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(name, sidecar, bench)`` per run, in page order."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        side_path = path.with_suffix(".run.yaml")
        if not side_path.exists():
            raise RunError(f"{path.name}: no sidecar {side_path.name} (needs "
                           f"{', '.join(REQUIRED)}; see scripts/results_page.py)")
        side = yaml.safe_load(side_path.read_text(encoding="utf-8")) or {}
        missing = [k for k in REQUIRED if not side.get(k)]
        unknown = sorted(set(side) - SIDECAR_KEYS)
        if missing or unknown:
            raise RunError(f"{side_path.name}: missing {missing}, unknown {unknown}; "
                           f"valid keys: {', '.join(sorted(SIDECAR_KEYS))}")
        bench = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(bench, dict) or "summary" not in bench or "scenarios" not in bench:
            raise RunError(f"{path.name}: not a `devsched bench --json` file "
                           "(no 'summary' or 'scenarios')")
        runs.append((path.stem, side, bench))
    orphans = sorted(p.name for p in folder.glob("*.run.yaml")
                     if not p.with_name(p.name.removesuffix(".run.yaml") + ".json").exists())
    if orphans:
        raise RunError(f"sidecars without a run: {', '.join(orphans)}")
    return sorted(runs, key=lambda r: (r[1].get("order", 100), r[0]))


def _n(value: Any, spec: str = ",.0f") -> str:
    return "—" if value is None else format(value, spec)


def summary_table(summary: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| scheduler | optimal | regret ms | wall regret ms | mean ratio | total ratio p50 "
             "/ max | decision p50 / p95 ms | LLM calls |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, row in summary.items():
        lines.append(
            f"| {name} | {row['optimal']}/{row['total']} | {_n(row['regret_ms'])} | "
            f"{_n(row.get('wall_regret_ms'))} | {_n(row.get('mean_ratio'), '.3f')} | "
            f"{_n(row.get('total_ratio_p50'), '.3f')} / {_n(row.get('total_ratio_max'), '.3f')}"
            f" | {_n(row.get('decision_ms_p50'), '.2f')} / {_n(row.get('decision_ms_p95'), '.2f')}"
            f" | {row.get('llm_calls', 0)} |")
    return lines


def scenario_table(bench: dict[str, Any]) -> list[str]:
    names = list(bench["summary"])
    lines = ["| scenario | optimum ms | " + " | ".join(names) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in names) + " |"]
    for s in bench["scenarios"]:
        cells = []
        for name in names:
            r = s["results"].get(name)
            cells.append("" if r is None else
                         f"{'✓' if r['optimal'] else '✗'} {r['makespan_ratio']:.2f}×")
        label = s["name"] if s.get("physics") in (None, "processor_sharing") or "@" in s["name"] \
            else f"{s['name']}@{s['physics']}"
        lines.append(f"| {label} | {s['optimal_makespan_ms']:,.1f} | " + " | ".join(cells) + " |")
    return lines


WORST = 10
"""A generated set (``devsched bench --generate N``: every scenario named ``gen-s...``) shows
its distribution and its worst workloads instead of one row per scenario."""


def generated(bench: dict[str, Any]) -> bool:
    """A generated set: workloads (``gen-s...``) or TaskBench conversations (``tb-s...``)."""
    return bool(bench["scenarios"]) and all(
        str(s["name"]).startswith(("gen-s", "tb-s")) for s in bench["scenarios"])


def words_table(bench: dict[str, Any]) -> list[str]:
    """Per scheduler that read the requests' words: its forecasts (asked, in force before
    their request's first step, latency p50, node precision / recall / F1, means over the
    conversations), and the conversations whose total is over 1.05x the monitor's alone."""
    names = [n for n in bench["summary"]
             if any((s["results"].get(n) or {}).get("words") for s in bench["scenarios"])]
    if not names:
        return []
    lines = ["| scheduler | asked | in force by the first step | latency p50 | precision / "
             "recall / F1 | over 1.05x the monitor's total |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        words = [s["results"][name]["words"] for s in bench["scenarios"]
                 if (s["results"].get(name) or {}).get("words")]
        scored = [w for w in words if w.get("f1") is not None]
        lat = sorted(w["latency_ms_p50"] for w in words if w.get("latency_ms_p50") is not None)
        prf = " / ".join(f"{sum(w[k] for w in scored) / len(scored):.3f}"
                         for k in ("precision", "recall", "f1")) if scored else "-"
        worse = sum(1 for s in bench["scenarios"] if name in s["results"]
                    and "monitor" in s["results"] and s["results"][name]["total_ms"]
                    > 1.05 * s["results"]["monitor"]["total_ms"])
        lines.append(f"| {name} | {sum(w['asked'] for w in words)} | "
                     f"{sum(w['in_time'] for w in words)} | "
                     f"{f'{lat[len(lat) // 2]:,.0f} ms' if lat else '-'} | {prf} | {worse} |")
    return lines


def distribution_table(bench: dict[str, Any]) -> list[str]:
    """Per scheduler: the total ratio's p50 / p95 / max, how many end optimal on the total,
    and how many above 1.10."""
    lines = ["| scheduler | total ratio p50 / p95 / max | optimal (total) | above 1.10 |",
             "| --- | ---: | ---: | ---: |"]
    for name, row in bench["summary"].items():
        ratios = [s["results"][name].get("total_ratio") for s in bench["scenarios"]
                  if name in s["results"]]
        above = sum(1 for r in ratios if r is not None and r > 1.10)
        lines.append(f"| {name} | {_n(row.get('total_ratio_p50'), '.3f')} / "
                     f"{_n(row.get('total_ratio_p95'), '.3f')} / "
                     f"{_n(row.get('total_ratio_max'), '.3f')} | "
                     f"{row.get('optimal_total', 0)}/{row['total']} | {above} |")
    return lines


def worst_lines(bench: dict[str, Any]) -> list[str]:
    """The last scheduler's worst workloads by total ratio (replay one by its name)."""
    name = list(bench["summary"])[-1]
    rows = sorted(((s["results"][name].get("total_ratio") or 0.0, s["name"],
                    s.get("physics")) for s in bench["scenarios"] if name in s["results"]),
                  reverse=True)[:WORST]
    return [f"Worst for `{name}` (total ratio): " + ", ".join(
        f"`{n}` {r:.2f}× ({p})" for r, n, p in rows) + "."]


def loads_line(bench: dict[str, Any]) -> list[str]:
    """The loads off the critical path of the schedulers that ran any."""
    out = []
    for name, r in bench["summary"].items():
        if r.get("preloads"):
            out.append(f"`{name}`: {r['preloads']} loads ({r.get('preloads_beside', 0)} beside "
                       f"a step), {_n(r.get('preload_device_ms'))} ms of device time, "
                       f"{_n(r.get('preload_saved_ms'))} ms of loads later steps did not pay, "
                       f"{_n(r.get('preload_delay_ms', 0.0))} ms of delay to a next step, "
                       f"{r.get('preloads_wasted', 0)} wasted "
                       f"({_n(r.get('preload_wasted_ms'))} ms).")
    return ["Loads off the critical path: " + " ".join(out)] if out else []


def residency_table(bench: dict[str, Any]) -> list[str]:
    names = list(bench["summary"])
    rows = [s for s in bench["scenarios"] if s.get("resident_models")]
    if not rows:
        return []
    lines = ["| scenario | " + " | ".join(names) + " |",
             "| --- | " + " | ".join("---:" for _ in names) + " |"]
    for s in rows:
        cells = []
        for name in names:
            r = s["results"].get(name)
            cells.append("" if r is None else f"{r['makespan_ratio']:.2f}× · "
                         f"{r.get('evictions_per_step', 0):.2f} · Σ{r.get('total_ratio', 1):.2f}×")
        lines.append(f"| {s['name']} | " + " | ".join(cells) + " |")
    return lines


def physics_table(bench: dict[str, Any]) -> list[str]:
    by = bench.get("summary_by_physics")
    if not by:
        return []
    names = list(bench["summary"])
    lines = ["| physics | " + " | ".join(names) + " |",
             "| --- | " + " | ".join("---:" for _ in names) + " |"]
    for physics, summary in by.items():
        cells = [f"{summary[n]['optimal']}/{summary[n]['total']} · "
                 f"{_n(summary[n].get('mean_ratio'), '.3f')}" if n in summary else ""
                 for n in names]
        lines.append(f"| {physics} | " + " | ".join(cells) + " |")
    return lines


def section(name: str, side: dict[str, Any], bench: dict[str, Any]) -> list[str]:
    config = bench.get("config", {})
    out = [f"## {side['title']}", "",
           f"`{side['command']}` · {side['date']} · {side['machine']} · "
           f"declare={config.get('declare', 'exact')}, decision cost "
           f"{config.get('decision_cost', 'measured')} · [`results/{name}.json`]"
           f"(results/{name}.json)", ""]
    if side.get("note"):
        out += [" ".join(str(side["note"]).split()), ""]
    skipped = config.get("skipped") or {}
    if skipped:
        out += ["Not run: " + ", ".join(f"`{k}` ({str(v).split(':')[0]})"
                                        for k, v in sorted(skipped.items())) + ".", ""]
    out += ["Summary (optimal: final mapping optimal, of the scenarios run):", "",
            *summary_table(bench["summary"]), ""]
    physics = physics_table(bench)
    if physics:
        out += ["Per contention physics (optimal · mean ratio):", "", *physics, ""]
    if generated(bench):
        out += ["The whole run (total over the whole-run reference):", "",
                *distribution_table(bench), "", *worst_lines(bench), ""]
        words = words_table(bench)
        if words:
            out += ["Forecasts from words (per request):", "", *words, ""]
        loads = loads_line(bench)
        return out + ([*loads, ""] if loads else [])
    out += ["Per scenario (✓ optimal · final makespan over the optimum):", "",
            *scenario_table(bench), ""]
    residency = residency_table(bench)
    if residency:
        out += ["Resident models (final ratio · evictions per step · whole-run total over "
                "the whole-run reference):", "", *residency, ""]
    for figure in side.get("figures") or []:
        out += [f"![{Path(figure).stem}]({figure})", ""]
    return out


def render(folder: Path = RUNS) -> str:
    runs = load_runs(folder)
    lines = [HEAD]
    if not runs:
        lines.append("No runs committed yet.\n")
    for name, side, bench in runs:
        lines += section(name, side, bench)
    return "\n".join(lines).rstrip() + "\n"


SLIM_KEYS = ("final_mapping", "final_devices", "measured_makespans_ms", "round_wall_ms",
             "decision_ms")


def slim(path: Path) -> None:
    """Drop from a bench JSON the per-call mappings and per-round timings the page does not
    show (a generated set's JSON is then a third of its size); a workload replays by name."""
    bench = json.loads(path.read_text(encoding="utf-8"))
    for scenario in bench["scenarios"]:
        scenario.pop("optimal_mapping", None)
        for result in scenario["results"].values():
            for key in SLIM_KEYS:
                result.pop(key, None)
    path.write_text(json.dumps(bench, separators=(",", ":")) + "\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--slim":
        slim(Path(argv[1]))
        return 0
    try:
        text = render()
    except RunError as exc:
        print(f"results_page: {exc}", file=sys.stderr)
        return 2
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != text:
            print("docs/results.md is stale: run python scripts/results_page.py")
            return 1
        print("docs/results.md is up to date")
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} from {len(load_runs())} run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
