"""The device of every call, for benchmark runs on several GPUs: a table and a figure.

On one GPU the option says where a call ran; on several, ``gpu_now`` and ``gpu_queued`` also
name a GPU. `devices_table` prints, per multi-GPU scenario, the reference's placement and
each scheduler's last round, call by call (``now@1``: ``gpu_now`` on ``cuda:1``; ``cpu``);
`devices_figure` draws the same as a grid (a row per call, a column per scheduler, a colour
per device). Both are None where no scenario ran on several GPUs.
"""

from __future__ import annotations

from typing import Any

from langgraph_devsched.bench.runner import BenchResult, ScenarioResult

REFERENCE = "reference"
"""The column of the reference's placement."""


SHORT = {"gpu_now": "now", "gpu_queued": "queued", "cpu": "cpu"}
KEY = "now@k: gpu_now on cuda:k · queued@k: gpu_queued on cuda:k · cpu"


def placement(option: str, device: str) -> str:
    """One call's placement as printed: the option, and the GPU where it names one.

    >>> placement("gpu_now", "cuda:1"), placement("gpu_queued", "cuda:0"), placement("cpu", "cpu")
    ('now@1', 'queued@0', 'cpu')
    """
    short = SHORT.get(option, option)
    return short if option == "cpu" else f"{short}@{device.rpartition(':')[2]}"


def _columns(bench: BenchResult, s: ScenarioResult) -> dict[str, dict[str, str]]:
    """Per column (the reference, then each scheduler run), each call's placement."""
    out = {REFERENCE: {c: placement(o, s.optimal_devices.get(c, "cuda:0"))
                       for c, o in s.optimal_mapping.items()}}
    for name in bench.schedulers:
        r = s.results.get(name)
        if r is not None:
            out[name] = {c: placement(o, r.final_devices.get(c, "cuda:0"))
                         for c, o in r.final_mapping.items()}
    return out


def multi_gpu(bench: BenchResult) -> list[ScenarioResult]:
    """The scenarios that ran on several GPUs."""
    return [s for s in bench.scenarios if s.optimal_devices]


def devices_table(bench: BenchResult, *, caption: str = "") -> Any:
    """A rich table: a row per (multi-GPU scenario, call), a column per scheduler."""
    scenarios = multi_gpu(bench)
    if not scenarios:
        return None
    from rich.table import Table

    table = Table(title="Device per call, last round (several GPUs)",
                  caption="\n".join(x for x in (KEY, caption) if x))
    for col in ("call", REFERENCE, *bench.schedulers):
        table.add_column(col, no_wrap=True)
    for s in scenarios:
        cols = _columns(bench, s)
        calls = list(s.optimal_mapping)
        table.add_row(f"[bold]{s.name}[/]")
        for i, call in enumerate(calls):
            ref = cols[REFERENCE].get(call, "")
            cells = [_marked(cols[n].get(call, ""), ref) if n in cols else ""
                     for n in bench.schedulers]
            table.add_row(f"  {call}", ref, *cells, end_section=i == len(calls) - 1)
    return table


def _marked(cell: str, ref: str) -> str:
    """A scheduler's placement, dimmed where it is the reference's."""
    return f"[dim]{cell}[/]" if cell == ref else cell


def devices_figure(bench: BenchResult, plt: Any, title: str) -> Any:
    """A figure of one grid per multi-GPU scenario: a row per call, a column per scheduler,
    each cell coloured by its device and labelled with its placement."""
    scenarios = multi_gpu(bench)
    if not scenarios:
        return None
    fig, axes = plt.subplots(len(scenarios), 1, squeeze=False,
                             figsize=(2.2 + 1.5 * (len(bench.schedulers) + 1),
                                      sum(0.9 + 0.42 * len(s.optimal_mapping)
                                          for s in scenarios)))
    palette = plt.get_cmap("tab10")
    for ax, s in zip(axes[:, 0], scenarios, strict=True):
        cols = _columns(bench, s)
        names = list(cols)
        calls = list(s.optimal_mapping)
        for x, name in enumerate(names):
            for y, call in enumerate(calls):
                cell = cols[name].get(call, "")
                gpu = cell.partition("@")[2]
                colour = palette(int(gpu) % 10) if gpu else (0.85, 0.85, 0.85)
                ax.add_patch(plt.Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white"))
                ax.text(x + 0.5, y + 0.5, cell, ha="center", va="center", fontsize=7)
        ax.set_xlim(0, len(names))
        ax.set_ylim(len(calls), 0)
        ax.set_xticks([x + 0.5 for x in range(len(names))])
        ax.set_xticklabels(names, fontsize=8)
        ax.set_yticks([y + 0.5 for y in range(len(calls))])
        ax.set_yticklabels(calls, fontsize=7)
        ax.set_title(s.name, fontsize=9)
    fig.suptitle(f"{title}\n{KEY}", fontsize=9)
    return fig
