"""The ``devsched`` command line. Each command is a thin call into its package.

    devsched bench --rounds 20 --json out/bench.json --plots out/
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from langgraph_devsched.output_paths import check_output_paths

FLAG = ""
"""The metavar of an on/off flag: none (typer would print ``<bool>``, as if it took a value:
``--real``, not ``--real true``)."""

app = typer.Typer(
    help="langgraph_devsched: schedule LangGraph tool calls on GPU now, GPU queue or CPU.",
    no_args_is_help=True,
    add_completion=False,
)


def _show_version(value: bool) -> None:
    if value:
        from langgraph_devsched import __version__

        typer.echo(f"devsched (langgraph-devsched) {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, metavar=FLAG,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """langgraph_devsched command line."""


def _use_llm(llm: str | None, base_url: str | None, names: list[str] | None) -> list[str] | None:
    """``--llm``/``--llm-base-url``: configure the agentic scheduler for this run, check that
    it builds, and add its row; `ValueError` with the reason when it cannot be built."""
    import os

    from langgraph_devsched.schedulers.agentic import ENV_BASE_URL, ENV_MODEL
    from langgraph_devsched.schedulers.registry import make_scheduler

    if llm is not None:
        os.environ[ENV_MODEL] = llm
    if base_url is not None:
        os.environ[ENV_BASE_URL] = base_url
    if llm is None and (names is None or "agentic" not in names):
        return names
    try:
        make_scheduler("agentic")
    except (ImportError, RuntimeError) as exc:
        raise ValueError(f"the agentic scheduler is unavailable: {exc}") from None
    if names is not None and "agentic" not in names:
        names = [*names, "agentic"]
    return names


@app.command()
def bench(
    scenarios: Annotated[
        Path | None,
        typer.Option(help="scenario file, folder of *.yaml, or built-in scenario names, "
                     "comma-separated (default: every built-in)"),
    ] = None,
    schedulers: Annotated[
        str | None,
        typer.Option(help="comma-separated names, e.g. all_gpu,heft,dmda,ucb,oracle "
                     "(default: every scheduler buildable without arguments, and the oracle)"),
    ] = None,
    rounds: Annotated[
        int | None, typer.Option(min=1, help="rounds per scenario (default: the scenario's, 20)")
    ] = None,
    seed: Annotated[int | None, typer.Option(
        help="noise seed (default: the scenario's; a generated workload's, gen-sS-N, is S)",
    )] = None,
    noise: Annotated[
        float | None,
        typer.Option(min=0.0, max=0.99, help="relative latency noise sigma (override)"),
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the results as JSON here")
    ] = None,
    plots: Annotated[
        Path | None, typer.Option(help="write accuracy/regret/ratio PNG plots into this folder")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(help="local, or ray: every simulated call also runs as a Ray task "
                     "(on RAY_ADDRESS, else a local instance with a logical GPU)"),
    ] = "local",
    real: Annotated[
        bool,
        typer.Option("--real", metavar=FLAG,
                     help="run real tools on this machine's devices and time them (default "
                     "scenarios: the built-in real ones; the oracle executes every mapping)"),
    ] = False,
    declare: Annotated[
        str,
        typer.Option(help="what tools declare to the schedulers: exact (the ground truth's "
                     "solo profiles), none, noisy(SIGMA) or stale(FACTOR)"),
    ] = "exact",
    decision_cost: Annotated[
        str,
        typer.Option(help="measured: a round's wall time is its decision time plus its "
                     "makespan; none: the makespan alone"),
    ] = "measured",
    physics: Annotated[
        str | None,
        typer.Option(help="ground-truth contention physics: processor_sharing, time_slicing, "
                     "idle_queue, bandwidth, a comma-separated list, or all (results "
                     "labelled scenario@physics; default: the scenarios' own)"),
    ] = None,
    llm: Annotated[
        str | None,
        typer.Option(help="chat model name: adds the agentic scheduler's row "
                     "(sets DEVSCHED_LLM_MODEL for this run)"),
    ] = None,
    llm_base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible endpoint for --llm, e.g. http://localhost:8080/v1 "
                     "(sets DEVSCHED_LLM_BASE_URL)"),
    ] = None,
    llm_timeout: Annotated[
        float | None,
        typer.Option(min=0.001, help="agentic consultation timeout, s (sets DEVSCHED_LLM_TIMEOUT)"),
    ] = None,
    llm_max_tokens: Annotated[
        int | None,
        typer.Option(min=1, help="completion tokens per agentic turn (sets "
                     "DEVSCHED_LLM_MAX_TOKENS; default: sized to the batch)"),
    ] = None,
    llm_mode: Annotated[
        str | None, typer.Option(help="agent, one_shot or pick (sets DEVSCHED_LLM_MODE)")
    ] = None,
    llm_answer: Annotated[
        str | None,
        typer.Option(help="auto, tool_required, tool_named, json_schema or text "
                     "(sets DEVSCHED_LLM_ANSWER)"),
    ] = None,
    llm_candidates: Annotated[
        int | None,
        typer.Option(min=0, help="pick mode: the candidates shown (default 3); the other "
                     "modes show none (sets DEVSCHED_LLM_CANDIDATES)"),
    ] = None,
    generate: Annotated[
        int | None,
        typer.Option(min=1, help="run this many generated agent workloads of --seed instead "
                     "of --scenarios (a miss replays by its name: --scenarios gen-s1-17)"),
    ] = None,
    taskbench: Annotated[
        Path | None,
        typer.Option(help="a TaskBench domain directory (data.json, tool_desc.json): run "
                     "--conversations of its requests, or replay --scenarios tb-s1-3"),
    ] = None,
    conversations: Annotated[
        int | None,
        typer.Option(min=1, help="with --taskbench: run this many conversations of --seed "
                     "(each named tb-sS-I, replayed by that name)"),
    ] = None,
    profiles: Annotated[
        Path | None,
        typer.Option(help="with --taskbench: the tools' simulated ground truth, a YAML "
                     "table (default: the packaged bench/taskbench_profiles.yaml)"),
    ] = None,
) -> None:
    """Run schedulers on benchmark scenarios and compare them with the brute-force optimum."""
    from langgraph_devsched.bench.command import run_bench_command

    names = None
    if schedulers is not None:
        names = [n.strip() for n in schedulers.split(",") if n.strip()]
    try:
        check_output_paths(("--json", json_path, "file"), ("--plots", plots, "folder"))
        options = (llm_timeout, llm_max_tokens, llm_mode, llm_answer, llm_candidates)
        if any(v is not None for v in options):
            from langgraph_devsched.schedulers.agentic.config import apply_llm_options

            apply_llm_options(
                timeout_s=llm_timeout, max_tokens=llm_max_tokens, mode=llm_mode,
                answer=llm_answer, candidates=llm_candidates,
            )
        names = _use_llm(llm, llm_base_url, names)
        result = run_bench_command(
            scenarios=scenarios, schedulers=names, rounds=rounds, seed=seed, noise=noise,
            json_path=json_path, plots=plots, backend=backend, real=real, declare=declare,
            decision_cost=decision_cost, physics=physics, generate=generate,
            taskbench=taskbench, conversations=conversations, profiles=profiles,
        )
    except ValueError as exc:  # ScenarioError, unknown scheduler names, bad --declare/paths
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    from langgraph_devsched.bench.report import beaten_lines

    if beaten_lines(result):  # a scheduler ended below the reference: the reference is wrong
        typer.echo("Error: a scheduler ended below the reference (see REFERENCE BEATEN above)",
                   err=True)
        raise typer.Exit(code=1)



@app.command()
def profile(
    suite: Annotated[
        str, typer.Option(help="'builtin' (the 19-tool suite) or MODULE:ATTR (tools or a callable)")
    ] = "builtin",
    devices: Annotated[str, typer.Option(help="comma-separated: cpu, cuda, cuda:<index>")] = (
        "cpu,cuda"
    ),
    size: Annotated[str, typer.Option(help="suite size: small or full")] = "small",
    repeats: Annotated[int, typer.Option(min=1, help="timed runs per tool and device")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="untimed runs first")] = 1,
    threads: Annotated[
        int | None, typer.Option(min=1, help="torch CPU threads (default: torch's)")
    ] = None,
    tools: Annotated[str | None, typer.Option(help="comma-separated subset of tool names")] = None,
    example_args: Annotated[
        str | None,
        typer.Option(help="arguments to call each tool with: a JSON/YAML file or inline JSON, "
                     "tool name -> {arg: value} (else tool.metadata['devsched_example_args'])"),
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the profile here")] = None,
    hints_out: Annotated[
        Path | None,
        typer.Option(help="write device hints from the profile here (YAML; JSON for *.json), "
                     "for DeviceToolNode(hints=...)"),
    ] = None,
    plots: Annotated[Path | None, typer.Option(help="write profile_scatter.png here")] = None,
    scenario_out: Annotated[
        Path | None, typer.Option(help="write bench scenarios built from the profile here")
    ] = None,
    cpu_only: Annotated[
        str,
        typer.Option(help="tools measured on the CPU only, in --scenario-out: skip (leave out) "
                     "or pin (keep, pinned to the CPU)"),
    ] = "skip",
    budget_s: Annotated[
        float | None, typer.Option(min=0, help="stop measuring new tools after this many s")
    ] = None,
    assume_idempotent: Annotated[
        bool,
        typer.Option("--assume-idempotent", metavar=FLAG,
                     help="warm up and repeat every tool on every device; without it a tool "
                     "not declared side-effect free (idempotent: true) is called once in all"),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", metavar=FLAG,
                           help="no progress bar, no table: only errors")
    ] = False,
) -> None:
    """Profile tools on each device (median, IQR, transfer, VRAM) and classify them.

    Exit code 0 when every tool was measured, 1 when one was not (the files hold the
    others), 2 on a bad option."""
    from langgraph_devsched.profiling.command import NothingMeasured, run_profile_command

    try:
        check_output_paths(
            ("--json", json_path, "file"), ("--hints-out", hints_out, "file"),
            ("--plots", plots, "folder"), ("--scenario-out", scenario_out, "folder"),
        )
        run_profile_command(
            suite=suite, devices=devices, size=size, repeats=repeats, warmup=warmup,
            threads=threads, tools=tools, example_args=example_args, json_path=json_path,
            hints_out=hints_out, plots=plots, scenario_out=scenario_out, cpu_only=cpu_only,
            budget_s=budget_s, assume_idempotent=assume_idempotent, quiet=quiet,
        )
    except NothingMeasured as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    except ValueError as exc:  # unknown device/size/tool, bad MODULE:ATTR, no GPU rows, paths
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=2) from None


@app.command()
def stress(
    calls: Annotated[int, typer.Option(min=1, help="tool calls to send in all")] = 1000,
    seed: Annotated[int, typer.Option(help="random seed (steps, faults, decisions)")] = 0,
    backend: Annotated[
        str, typer.Option(help="simulated (virtual testbed), local (declared GPU, real ledger "
                          "and threads) or both")
    ] = "both",
    fault_rate: Annotated[
        list[str] | None,
        typer.Option(
            "--fault-rate", help="KIND=P, repeatable (e.g. hang=0.05); see docs/reliability.md"
        ),
    ] = None,
    max_seconds: Annotated[
        float, typer.Option(min=1, help="stop sending new steps after this many seconds")
    ] = 540.0,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="write the report as JSON here")
    ] = None,
    gpus: Annotated[
        int, typer.Option(min=1, max=8, help="GPUs of each backend's machine (several: "
                          "alternately full-size at speed 1 and half-size at speed 2)")
    ] = 1,
    processes: Annotated[
        int, typer.Option(min=0, help="N OS processes against one declared GPU and one "
                          "machine-wide ledger, killed mid-call and mid-load (--backend and "
                          "--gpus do not apply; fault kinds: kill_call, kill_load, error, "
                          "slow); 0: one process")
    ] = 0,
) -> None:
    """Drive DeviceToolNode with injected faults; exit 1 if an answer was lost or duplicated,
    a ledger went over budget or did not return to zero, or an invariant broke."""
    from langgraph_devsched._dev.stress.command import run_stress_command

    try:
        check_output_paths(("--json", json_path, "file"))
        if processes:
            from langgraph_devsched._dev.stress.processes_command import run_process_stress_command

            proc_report = run_process_stress_command(
                processes=processes, calls=calls, seed=seed, fault_rates=fault_rate or (),
                max_seconds=max_seconds, json_path=json_path)
            if not proc_report.ok:
                raise typer.Exit(code=1)
            return
        report = run_stress_command(
            calls=calls, seed=seed, backend=backend, fault_rates=fault_rate or (),
            max_seconds=max_seconds, json_path=json_path, gpus=gpus,
        )
    except ValueError as exc:  # unknown backend or fault kind, bad rate, bad --json path
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=2) from None
    if not report.ok:
        raise typer.Exit(code=1)

from langgraph_devsched._dev.perf.command import perf_command  # noqa: E402

app.command(name="perf")(perf_command)

if __name__ == "__main__":  # pragma: no cover
    app()
