"""PNG plots of a benchmark run (matplotlib, imported only here).

* ``accuracy.png`` — scenarios where each scheduler's final mapping is optimal;
* ``regret.png`` — cumulative regret over rounds, summed over scenarios, per scheduler;
* ``ratio.png`` — final makespan / optimum per scenario and scheduler;
* ``devices.png`` — where several GPUs ran: the device of every call, per scheduler.

Titles say where the run was measured (``simulated testbed`` unless told otherwise) and what
the tools declared; legends sit outside the data; every line has its own marker and style,
so lines that coincide still show; log axes are labelled between decades too.
"""

from __future__ import annotations

import math
from itertools import accumulate
from pathlib import Path
from typing import Any

from langgraph_devsched.bench.devices import devices_figure
from langgraph_devsched.bench.report import declare_label, ratio, summary
from langgraph_devsched.bench.runner import BenchResult

SIMULATED = "simulated testbed"
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", ":")
STEPS = (1.0, 2.0, 5.0)
"""Labelled ticks per decade on log axes."""


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


def log_ticks(low: float, high: float, *, steps: tuple[float, ...] = STEPS) -> list[float]:
    """Tick values 1, 2, 5 x each power of ten that covers [low, high] (low > 0).

    >>> log_ticks(1, 30)
    [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]
    """
    low, high = max(low, 1e-12), max(high, low)
    ticks = []
    for exp in range(math.floor(math.log10(low)), math.floor(math.log10(high)) + 1):
        ticks += [s * 10.0**exp for s in steps]
    lo = max((t for t in ticks if t <= low), default=ticks[0])
    hi = min((t for t in ticks if t >= high), default=ticks[-1])
    return [t for t in ticks if lo <= t <= hi]


def _number(value: float, _: Any = None) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def _title(bench: BenchResult, what: str, where: str) -> str:
    return f"{what}\n({where}, declare={declare_label(bench)})"


def _legend_outside(ax: Any) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8)


def figures(bench: BenchResult, *, where: str = SIMULATED) -> dict[str, Any]:
    """The figures by file name (``where``: what ran, for the titles)."""
    plt = _pyplot()
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    names = bench.schedulers
    out: dict[str, Any] = {}

    summ = summary(bench)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    values = [summ[n]["optimal"] for n in names]
    ax.bar(names, values, color="tab:blue")
    ax.set_ylim(0, max(1, len(bench.scenarios)) * 1.15)
    ax.set_ylabel(f"optimal final mapping (of {len(bench.scenarios)} scenarios)")
    ax.set_title(_title(bench, "Mapping accuracy vs brute-force optimum", where))
    for i, v in enumerate(values):
        ax.text(i, v, str(v), ha="center", va="bottom")
    out["accuracy.png"] = fig

    fig, ax = plt.subplots(figsize=(9, 4.5))
    top = 1.0
    for i, n in enumerate(names):
        rows = [s.results[n].round_makespans_ms for s in bench.scenarios if n in s.results]
        per_round = [
            sum(max(0.0, s.results[n].round_makespans_ms[k] - _reference(s, k))
                for s in bench.scenarios
                if n in s.results and k < len(s.results[n].round_makespans_ms))
            for k in range(max((len(r) for r in rows), default=0))
        ]
        total = list(accumulate(per_round))
        top = max([top, *total])
        ax.plot(range(1, len(total) + 1), total, label=n, marker=MARKERS[i % len(MARKERS)],
                linestyle=LINESTYLES[i % len(LINESTYLES)], markersize=9 - 0.6 * (i % 8),
                markerfacecolor="none", linewidth=1.2, alpha=0.9)
    ax.set_yscale("symlog", linthresh=100)
    ax.set_ylim(bottom=0, top=top * 1.5)
    ax.yaxis.set_major_locator(FixedLocator([0.0, *log_ticks(100, top * 1.5)]))
    ax.yaxis.set_major_formatter(FuncFormatter(_number))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative regret, ms (all scenarios)")
    ax.set_title(_title(bench, "Cumulative regret (probes included)", where))
    _legend_outside(ax)
    out["regret.png"] = fig

    fig, ax = plt.subplots(figsize=(max(9, len(bench.scenarios) * 0.85), 5))
    width = 0.8 / max(1, len(names))
    ratios = []
    for i, n in enumerate(names):
        xs = [k + (i - (len(names) - 1) / 2) * width for k in range(len(bench.scenarios))]
        ys = [ratio(s.results[n], s) if n in s.results else math.nan for s in bench.scenarios]
        ratios += [y for y in ys if not math.isnan(y)]
        ax.bar(xs, ys, width, label=n)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    high = max(ratios, default=1.0) * 1.1
    ax.set_ylim(0.95, max(1.2, high))
    fine = [t for t in (1.1, 1.25, 1.5, 3.0) if t <= high]  # the first decade, finer
    ax.yaxis.set_major_locator(
        FixedLocator(sorted({*log_ticks(1.0, max(1.2, high)), *fine})))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.set_xticks(range(len(bench.scenarios)))
    ax.set_xticklabels([s.name for s in bench.scenarios], rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("final makespan / optimum (log)")
    ax.set_title(_title(bench, "Makespan ratio to the optimum per scenario", where))
    _legend_outside(ax)
    out["ratio.png"] = fig
    devices = devices_figure(bench, plt, _title(bench, "Device per call, last round", where))
    if devices is not None:
        out["devices.png"] = devices
    return out


def write_plots(bench: BenchResult, folder: str | Path, *, where: str = SIMULATED) -> list[Path]:
    """Write the PNGs into ``folder`` and return their paths."""
    plt = _pyplot()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures(bench, where=where).items():
        fig.tight_layout()
        path = folder / name
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _reference(s: Any, k: int) -> float:
    """Round ``k``'s reference makespan (resident models: the least any mappings pay)."""
    refs = getattr(s, "reference_makespans_ms", None) or []
    return float(refs[k]) if k < len(refs) else float(s.optimal_makespan_ms)
