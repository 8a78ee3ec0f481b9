"""``devsched bench``: load scenarios, run with a progress bar, print tables, write outputs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph_devsched.bench.agentic_stats import format_agentic, merge
from langgraph_devsched.bench.declare import parse_declare
from langgraph_devsched.bench.report import beaten_lines, tables, write_json
from langgraph_devsched.bench.runner import (
    BenchResult,
    SchedulerOptions,
    StepRunner,
    check_decision_cost,
    default_schedulers,
    run_benchmark,
    validate_scheduler_names,
)
from langgraph_devsched.bench.scenario import Scenario, load_scenarios, under_physics

PIPE_WIDTH = 100
"""The width tables are laid out for when stdout is no terminal and ``COLUMNS`` is unset
(a wider table is printed long: a row per scenario and scheduler)."""


def first_sentence(text: str) -> str:
    """The reason a scheduler was skipped, without its exception name and past its first
    sentence (``AgenticNotConfiguredError: ... not configured: no model name (...). Set ...``
    -> ``... not configured: no model name (...)``).

    >>> first_sentence("ValueError: needs a model. Set X or Y.")
    'needs a model'
    """
    head, sep, rest = text.partition(": ")
    if sep and head.isidentifier() and head[:1].isupper():
        text = rest
    return text.split(". ", 1)[0].rstrip(".")


BENCH_BACKENDS = ("local", "ray")
"""``local``: the testbed alone; ``ray``: every simulated call also runs as a Ray task."""


def step_runner_for(backend: str) -> StepRunner | None:
    """The step runner of a ``--backend`` name, or `ValueError` listing the valid ones."""
    if backend == "local":
        return None
    if backend == "ray":
        from langgraph_devsched.executors.ray_sim import RaySimulatedSteps

        try:
            return RaySimulatedSteps()
        except ImportError as exc:
            raise ValueError(str(exc)) from None
    raise ValueError(f"unknown backend {backend!r}; valid backends: {', '.join(BENCH_BACKENDS)}")


def _taskbench(scenarios: Path | None, generate: int | None, seed: int | None,
               taskbench: Path | None, conversations: int | None, profiles: Path | None,
               ) -> tuple[list[Scenario], int | None] | None:
    """TaskBench conversations (`bench.taskbench`): ``conversations`` of seed ``seed``, or
    those named ``tb-sS-I`` in ``scenarios`` replayed; None when neither is asked."""
    from langgraph_devsched.bench.taskbench import (
        load_taskbench,
        parse_taskbench_name,
        taskbench_conversation,
        taskbench_conversations,
    )
    from langgraph_devsched.bench.taskbench_profiles import load_profiles

    names = [n.strip() for n in str(scenarios).split(",")] if scenarios is not None else []
    replays = [parse_taskbench_name(n) for n in names]
    if taskbench is None:
        if conversations is not None or profiles is not None:
            raise ValueError("--conversations and --profiles need --taskbench DIR (a "
                             "TaskBench domain directory: data.json, tool_desc.json)")
        named = [n for n, r in zip(names, replays, strict=True) if r is not None]
        if named:
            raise ValueError(f"replaying {', '.join(named)} needs --taskbench DIR (the "
                             f"directory its conversations were drawn from)")
        return None
    if generate is not None:
        raise ValueError("give --generate or --taskbench, not both")
    if (conversations is None) == (scenarios is None):
        raise ValueError("--taskbench needs --conversations N, or --scenarios with "
                         "conversation names (tb-s1-3,...) to replay, exactly one of them")
    bench = load_taskbench(taskbench)
    table = load_profiles(profiles)
    if conversations is not None:
        return taskbench_conversations(bench, conversations, seed or 0, table), seed or 0
    wrong = [n for n, r in zip(names, replays, strict=True) if r is None]
    if wrong:
        raise ValueError(f"--scenarios with --taskbench: {', '.join(wrong)} is no "
                         f"conversation name; expected tb-sSEED-INDEX, e.g. tb-s1-3")
    seeds = {r[0] for r in replays if r is not None}
    replayed = seeds.pop() if seed is None and len(seeds) == 1 else seed
    return [taskbench_conversation(bench, *r, table) for r in replays if r is not None], replayed


def _scenarios(scenarios: Path | None, generate: int | None, seed: int | None,
               ) -> tuple[list[Scenario], int | None]:
    """The scenarios to run: generated (`bench.generate`), replayed by name, or loaded; and
    the bench's seed: ``seed``, else that of the generated workloads replayed when they share
    one, so that a replay measures what ``--generate N --seed S`` measured (the noise draws
    the policy learns from depend on it)."""
    from langgraph_devsched.bench.generate import (
        generate_scenarios,
        generated_scenario,
        parse_generated_name,
    )

    if generate is not None:
        if scenarios is not None:
            raise ValueError("give --generate or --scenarios, not both")
        return generate_scenarios(generate, seed=seed or 0), seed or 0
    if scenarios is not None:
        names = [parse_generated_name(n.strip()) for n in str(scenarios).split(",")]
        if names and all(n is not None for n in names):
            seeds = {n[0] for n in names if n is not None}
            replayed = seeds.pop() if seed is None and len(seeds) == 1 else seed
            return [generated_scenario(*n) for n in names if n is not None], replayed
    return load_scenarios(scenarios), seed


def run_bench_command(
    *,
    scenarios: Path | None = None,
    schedulers: Sequence[str] | None = None,
    rounds: int | None = None,
    seed: int | None = None,
    noise: float | None = None,
    json_path: Path | None = None,
    plots: Path | None = None,
    backend: str = "local",
    real: bool = False,
    decision_cost: str = "measured",
    declare: str = "exact",
    physics: str | None = None,
    progress: Any | None = None,
    scheduler_options: SchedulerOptions | None = None,
    generate: int | None = None,
    taskbench: Path | None = None,
    conversations: int | None = None,
    profiles: Path | None = None,
) -> BenchResult:
    """What ``devsched bench`` does; raises `ValueError` on bad scenarios or names.

    Progress (one step per scenario x scheduler) goes to ``progress`` (a rich `Console`;
    default: stderr), only when that is a terminal.

    ``decision_cost``: ``measured`` (a round's wall time is its decision time plus its
    makespan) or ``none`` (makespan only). ``declare``: what the tools declare
    (`bench.declare.parse_declare`: exact, none, noisy(SIGMA), stale(FACTOR)).
    ``physics``: the ground truth's contention physics, one name, a comma-separated list or
    ``all`` (every scenario under each, labelled ``scenario@physics``; default: the
    scenarios' own). ``scheduler_options``: constructor options per scheduler name
    (`bench.runner.build_scheduler`). ``generate``: that many generated workloads of seed
    ``seed`` (`bench.generate`) instead of ``scenarios``; a generated workload's name
    (``gen-s1-17``) in ``scenarios`` replays it. ``taskbench``: a TaskBench domain
    directory, of which ``conversations`` conversations of seed ``seed`` run
    (`bench.taskbench`, the tools' ground truth from ``profiles`` or the packaged table),
    or those named in ``scenarios`` (``tb-s1-3``)."""
    cost = check_decision_cost(decision_cost)
    mode = parse_declare(declare)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    if real:
        return run_real_bench_command(
            scenarios=scenarios, schedulers=schedulers, rounds=rounds, json_path=json_path,
            plots=plots,
        )
    runner = step_runner_for(backend)
    drawn = _taskbench(scenarios, generate, seed, taskbench, conversations, profiles)
    loaded, seed = drawn if drawn is not None else _scenarios(scenarios, generate, seed)
    if physics is not None:
        loaded = under_physics(loaded, physics)
    skipped: dict[str, str] = {}
    if schedulers is None:
        names = default_schedulers(skipped=skipped)
    else:
        names = validate_scheduler_names(schedulers)
    if not names:
        raise ValueError("no scheduler selected; give --schedulers")
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH  # a pipe, a file, make: tables laid out to fit
    for name, why in skipped.items():  # one line each; the JSON keeps the whole reason
        console.print(f"[yellow]skipped {name}[/]: {first_sentence(why)}", overflow="ellipsis",
                      no_wrap=True, crop=True)
    err = Console(stderr=True) if progress is None else progress
    rounds_of = {s.name: rounds or s.workload.rounds for s in loaded}
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        console=err, transient=True, disable=not err.is_terminal,
    ) as bar:
        task = bar.add_task("bench", total=len(loaded) * len(names))

        def tick(scenario: Scenario, name: str, r: int) -> None:
            if r == 1:
                bar.update(task, description=f"{scenario.name} · {name}", refresh=True)
            if r == rounds_of.get(scenario.name):
                bar.update(task, advance=1)

        result = run_benchmark(
            loaded, names, rounds=rounds, seed=seed, noise=noise, on_round=tick,
            step_runner=runner, decision_cost=cost, declare=mode,
            scheduler_options=scheduler_options,
        )
    result.skipped.update(skipped)
    return report(result, console, json_path=json_path, plots=plots)


def run_real_bench_command(
    *,
    scenarios: Path | None = None,
    schedulers: Sequence[str] | None = None,
    rounds: int | None = None,
    json_path: Path | None = None,
    plots: Path | None = None,
) -> BenchResult:
    """``devsched bench --real``: real tools timed on this machine (see `bench.real`)."""
    from rich.console import Console

    from langgraph_devsched.bench.real import load_real_scenarios, run_real_benchmark

    console = Console()
    loaded = load_real_scenarios(scenarios)
    if rounds is not None:
        loaded = [s.model_copy(update={"rounds": rounds}) for s in loaded]
    names = validate_scheduler_names(schedulers or ["all_gpu", "static", "monitor", "oracle"])
    result = run_real_benchmark(
        loaded,
        names,
        on_round=lambda s, n, r: console.print(f"[dim]{s.name} · {n} · {r}[/]"),
        say=lambda text: console.print(f"[yellow]{text}[/]"),
    )
    return report(result, console, json_path=json_path, plots=plots,
                  where="real tools on this machine")


def report(
    result: BenchResult, console: Any, *, json_path: Path | None, plots: Path | None,
    where: str = "simulated testbed",
) -> BenchResult:
    """Print the tables (laid out for the console's width) and, in red, every round a
    scheduler ended below the reference (`report.beaten_lines`), then write the JSON and the
    plots where asked (``where``: what ran, for the plots' titles)."""
    for table in tables(result, width=console.width):
        console.print(table)
    for line in beaten_lines(result):  # never, unless the reference is wrong
        console.print(f"[bold red]{line}[/]")
    for name in result.schedulers:  # the agentic scheduler's consultations, where it ran
        total = merge(s.results[name].agentic for s in result.scenarios if name in s.results)
        if total is not None:
            console.print(format_agentic(name, total))
    if json_path is not None:
        console.print(f"JSON: {write_json(result, json_path)}")
    if plots is not None:
        from langgraph_devsched.bench.plots import write_plots

        for path in write_plots(result, plots, where=where):
            console.print(f"plot: {path}")
    return result
