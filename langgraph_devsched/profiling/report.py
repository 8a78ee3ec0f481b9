"""Show a profile: a rich table in the terminal and a PNG scatter of CPU vs GPU latency.

>>> from langgraph_devsched.profiling.model import Profile
>>> p = Profile(created="2026-01-01T00:00:00+00:00", repeats=1, warmup=0, cpu_threads=1,
...             devices_requested=["cpu"], devices_measured=["cpu"])
>>> profile_table(p).row_count
0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from langgraph_devsched.profiling.model import DeviceRun, Profile, ToolClass

CLASS_COLORS: dict[ToolClass, str] = {
    "gpu_preferred": "tab:green",
    "cpu_preferred": "tab:red",
    "device_neutral": "tab:blue",
    "ambiguous": "tab:orange",
    "unknown": "tab:gray",
}
_RICH_STYLE: dict[ToolClass, str] = {
    "gpu_preferred": "green",
    "cpu_preferred": "red",
    "device_neutral": "blue",
    "ambiguous": "yellow",
    "unknown": "dim",
}


def _ms(run: DeviceRun | None) -> str:
    if run is None:
        return "-"
    return f"{run.latency.median_ms:.2f} ± {run.latency.iqr_ms:.2f}"


def profile_table(profile: Profile) -> Table:
    """One row per tool: medians ± IQR per device, transfer, peak VRAM, class and reason.

    The GPU columns appear only when some tool was measured on a GPU, and a reason leaves
    out a device that the profile's notes (printed under the table) say was unavailable,
    so that the table reads at 80 columns."""
    title = f"profile ({profile.size or 'custom'} size, {profile.repeats} repeats, " \
            f"{profile.cpu_threads} CPU threads; ms: median ± IQR)"
    table = Table(title=title)
    on_gpu = any(row.gpu is not None for row in profile.tools)
    columns = ["cpu ms"]
    if on_gpu:
        columns += ["gpu ms", "transfer ms", "peak VRAM MB"]
    table.add_column("tool", no_wrap=True)
    for col in columns:
        table.add_column(col, overflow="fold")
    table.add_column("class", no_wrap=True)
    table.add_column("reason", ratio=1)
    for row in profile.tools:
        gpu = row.gpu
        cells = [row.tool, _ms(row.cpu)]
        if on_gpu:
            cells += [
                _ms(gpu),
                f"{gpu.transfer_ms:.2f} ({gpu.transfer_method})" if gpu else "-",
                f"{gpu.peak_vram_mb:.0f}" if gpu and gpu.peak_vram_mb is not None else "-",
            ]
        cells += [f"[{_RICH_STYLE[row.tool_class]}]{row.tool_class}[/]",
                  _short_reason(row.reason, profile.notes)]
        table.add_row(*cells)
    return table


def _short_reason(reason: str, notes: list[str]) -> str:
    """``reason`` without its ``(cuda: cuda:0 requested but unavailable)`` part when a
    note says so for the whole profile."""
    head, sep, rest = reason.partition(" (")
    if sep and "requested but unavailable" in rest and any(
            "requested but unavailable" in n for n in notes):
        kept = [p for p in rest.rstrip(")").split("; ") if "requested but unavailable" not in p]
        return f"{head} ({'; '.join(kept)})" if kept else head
    return reason


def print_profile(profile: Profile, console: Console | None = None) -> None:
    """Print the table and the profile's notes."""
    console = console or Console()
    console.print(profile_table(profile))
    for note in profile.notes:
        console.print(f"[yellow]note:[/] {note}")


def markdown_table(profile: Profile) -> str:
    """The table as Markdown (for docs)."""
    lines = [
        "| tool | cpu ms (median ± IQR) | gpu ms (median ± IQR) | class | reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in profile.tools:
        reason = row.reason.replace("|", "/")
        lines.append(
            f"| {row.tool} | {_ms(row.cpu)} | {_ms(row.gpu)} | {row.tool_class} | {reason} |"
        )
    return "\n".join(lines)


def plot_profile(profile: Profile, path: str | Path) -> Path:
    """Scatter CPU vs GPU median latency (log-log), coloured by class, IQR bars, and y = x.

    Tools without a GPU measurement sit on the bottom edge as grey crosses.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "plots need matplotlib: pip install matplotlib "
            "(from a clone: pip install -e '.[plots]')"
        ) from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    both = [r for r in profile.tools if r.cpu and r.gpu]
    cpu_only = [r for r in profile.tools if r.cpu and not r.gpu]
    values = [r.cpu.latency.median_ms for r in both + cpu_only if r.cpu] + [
        r.gpu.latency.median_ms for r in both if r.gpu
    ]
    lo = max(min(values, default=0.01), 1e-3) / 2
    hi = max(values, default=1.0) * 2
    fig: Any
    fig, ax = plt.subplots(figsize=(7, 6))
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls="--", label="equal latency")
    for cls, color in CLASS_COLORS.items():
        rows = [r for r in both if r.tool_class == cls]
        if not rows:
            continue
        xs = [r.cpu.latency.median_ms for r in rows if r.cpu]
        ys = [r.gpu.latency.median_ms for r in rows if r.gpu]
        ax.scatter(xs, ys, color=color, label=cls, zorder=3)
        xerr = [[x - r.cpu.latency.q25_ms for r, x in zip(rows, xs, strict=True) if r.cpu],
                [r.cpu.latency.q75_ms - x for r, x in zip(rows, xs, strict=True) if r.cpu]]
        yerr = [[y - r.gpu.latency.q25_ms for r, y in zip(rows, ys, strict=True) if r.gpu],
                [r.gpu.latency.q75_ms - y for r, y in zip(rows, ys, strict=True) if r.gpu]]
        ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, fmt="none", ecolor=color, alpha=0.5, lw=1)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(r.tool, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if cpu_only:
        xs = [r.cpu.latency.median_ms for r in cpu_only if r.cpu]
        ax.scatter(xs, [lo * 1.05] * len(xs), marker="x", color=CLASS_COLORS["unknown"],
                   label="unknown (no GPU measurement)", zorder=3, clip_on=False)
        for r, x in zip(cpu_only, xs, strict=True):
            ax.annotate(r.tool, (x, lo * 1.05), fontsize=6, rotation=60,
                        xytext=(0, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("CPU median latency (ms)")
    ax.set_ylabel("GPU median latency, transfers included (ms)")
    ax.set_title(f"CPU vs GPU latency per tool ({profile.size or 'custom'} size)")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
