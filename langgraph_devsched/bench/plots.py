"""PNG plots of a benchmark run (matplotlib, imported only here).

* ``accuracy.png`` — scenarios where each scheduler's final mapping is optimal;
* ``regret.png`` — cumulative regret over rounds, summed over scenarios, per scheduler;
* ``ratio.png`` — final makespan / optimum per scenario and scheduler.
"""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path
from typing import Any

from langgraph_devsched.bench.report import ratio, summary
from langgraph_devsched.bench.runner import BenchResult


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError(
            "plots need matplotlib: pip install 'langgraph-devsched[plots]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_plots(bench: BenchResult, folder: str | Path) -> list[Path]:
    """Write the three PNGs into ``folder`` and return their paths."""
    plt = _pyplot()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = bench.schedulers
    paths = []

    summ = summary(bench)
    fig, ax = plt.subplots(figsize=(7, 4))
    values = [summ[n]["optimal"] for n in names]
    ax.bar(names, values, color="tab:blue")
    ax.set_ylim(0, max(1, len(bench.scenarios)) * 1.1)
    ax.set_ylabel(f"scenarios with the optimal final mapping (of {len(bench.scenarios)})")
    ax.set_title("Mapping accuracy vs brute-force optimum")
    for i, v in enumerate(values):
        ax.text(i, v, str(v), ha="center", va="bottom")
    paths.append(_save(plt, fig, folder / "accuracy.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
        per_round = [
            sum(
                max(0.0, s.results[n].round_makespans_ms[k] - s.optimal_makespan_ms)
                for s in bench.scenarios
                if k < len(s.results[n].round_makespans_ms)
            )
            for k in range(max(len(s.results[n].round_makespans_ms) for s in bench.scenarios))
        ]
        ax.plot(range(1, len(per_round) + 1), list(accumulate(per_round)), label=n, marker=".")
    ax.set_yscale("symlog", linthresh=100)
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative regret, ms (all scenarios)")
    ax.set_title("Cumulative regret (probes included)")
    ax.legend()
    paths.append(_save(plt, fig, folder / "regret.png"))

    fig, ax = plt.subplots(figsize=(max(8, len(bench.scenarios) * 0.8), 4.5))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        xs = [k + (i - (len(names) - 1) / 2) * width for k in range(len(bench.scenarios))]
        ax.bar(xs, [ratio(s.results[n], s) for s in bench.scenarios], width, label=n)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(bench.scenarios)))
    ax.set_xticklabels([s.name for s in bench.scenarios], rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("final makespan / optimum (log)")
    ax.set_title("Makespan ratio to the optimum per scenario")
    ax.legend(fontsize=8)
    paths.append(_save(plt, fig, folder / "ratio.png"))
    return paths


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
