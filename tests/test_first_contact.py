"""First contact, as a new user on a CPU-only machine: profile an app's own tools from the app
folder, turn the profile into hints, and run them in a compiled graph; the profile command's
options and messages agree; ``devsched --version``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from rich.console import Console
from typer.testing import CliRunner

import langgraph_devsched
from langgraph_devsched import DeviceToolNode
from langgraph_devsched.cli import app
from langgraph_devsched.profiling.command import run_profile_command
from langgraph_devsched.profiling.to_testbed import simulated_gpu

DEVSCHED = Path(sys.executable).with_name("devsched")

TORCH_TOOLS = '''
from typing import Annotated

import torch
from langchain_core.tools import tool

from langgraph_devsched import InjectedDevice


@tool
def score(n: int, device: Annotated[str, InjectedDevice] = "cpu") -> str:
    """Score n random rows with a tiny linear layer."""
    layer = torch.nn.Linear(4, 2).to(device)
    return f"{tuple(layer(torch.ones(n, 4, device=device)).shape)} on {device}"


@tool
def ping() -> str:
    """No arguments at all."""
    return "pong"


TOOLS = [score, ping]
'''

PLAIN_TOOLS = '''
from langchain_core.tools import tool


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


@tool
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


TOOLS = [shout, add]
'''


def write_app(folder: Path, module: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return folder


def graph_of(node: DeviceToolNode):  # type: ignore[no-untyped-def]
    return StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()


def test_documented_sequence_profile_hints_out_then_node_in_a_graph(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    folder = write_app(tmp_path / "my_app", "tools", TORCH_TOOLS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(langgraph_devsched.__file__).resolve().parents[1])  # this one
    done = subprocess.run(
        [str(DEVSCHED), "profile", "--suite", "tools:TOOLS", "--devices", "cpu",
         "--repeats", "2", "--warmup", "0", "--example-args", '{"score": {"n": 3}}',
         "--json", "prof.json", "--hints-out", "hints.yaml"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hints: hints.yaml" in done.stdout
    profile = json.loads((folder / "prof.json").read_text())
    assert [t["tool"] for t in profile["tools"]] == ["score", "ping"]
    assert profile["tools"][0]["runs"]["cpu"]["output_preview"] == "(3, 2) on cpu"
    cpu_ms = profile["tools"][0]["runs"]["cpu"]["latency"]["median_ms"]

    hints = yaml.safe_load((folder / "hints.yaml").read_text())["tools"]
    assert hints == {
        "score": {"profile": {"cpu_ms": round(cpu_ms, 4)}},
        "ping": {"gpu_capable": False, "profile": {"cpu_ms": hints["ping"]["profile"]["cpu_ms"]}},
    }

    sys.path.insert(0, str(folder))
    try:
        import tools  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(folder))
    step = AIMessage("", tool_calls=[
        {"name": "score", "args": {"n": 2}, "id": "1"},
        {"name": "ping", "args": {}, "id": "2"},
    ])
    for source in (folder / "hints.yaml", folder / "prof.json"):  # both are accepted
        node = DeviceToolNode(tools.TOOLS, hints=source)
        assert node.device_specs["score"].profile.cpu_ms == round(cpu_ms, 4)  # type: ignore[union-attr]
        assert node.device_specs["ping"].allowed_options() == ("cpu",)
        result = graph_of(node).invoke({"messages": [step]})
        assert [m.content for m in result["messages"][1:]] == ["(2, 2) on cpu", "pong"]

    # the same hints drive a simulated GPU (a CPU-only profile needs a GPU speed-up guess)
    bed = simulated_gpu(folder / "prof.json", vram_budget_mb=4000, gpu_speedup=10,
                        run_tools_on="cpu")
    node = DeviceToolNode(tools.TOOLS, hints=folder / "prof.json", testbed=bed,
                          scheduler="all_gpu")
    result = graph_of(node).invoke({"messages": [step]})
    assert [m.content for m in result["messages"][1:]] == ["(2, 2) on cpu", "pong"]
    (score_call, _) = node.history[-1].record.calls
    assert (score_call.option, score_call.device) == ("gpu_now", "cuda:0")


def test_module_attr_imports_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_app(tmp_path, "first_contact_cwd_tools", PLAIN_TOOLS)
    monkeypatch.chdir(folder)
    before = list(sys.path)
    done = CliRunner().invoke(app, [
        "profile", "--suite", "first_contact_cwd_tools:TOOLS", "--devices", "cpu",
        "--repeats", "1", "--warmup", "0", "--tools", "shout",
        "--example-args", '{"shout": {"text": "hi"}}', "--json", "p.json",
    ])
    assert done.exit_code == 0, done.output
    assert json.loads(Path("p.json").read_text())["tools"][0]["runs"]["cpu"][
        "output_preview"] == "HI"
    assert sys.path == before  # the working directory was only added for the command
    missing = CliRunner().invoke(app, ["profile", "--suite", "no_such_app_tools:TOOLS"])
    assert missing.exit_code == 2
    assert f"the working directory {folder} included: run from the folder" in missing.output


def test_example_args_from_a_file_and_errors_that_name_the_valid_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_app(tmp_path, "first_contact_args_tools", PLAIN_TOOLS)
    monkeypatch.chdir(folder)
    Path("args.yaml").write_text("shout: {text: hey}\nadd: {a: 2, b: 3}\n")
    base = ["profile", "--suite", "first_contact_args_tools:TOOLS", "--devices", "cpu",
            "--repeats", "1", "--warmup", "0"]
    done = CliRunner().invoke(app, [*base, "--example-args", "args.yaml", "--json", "p.json"])
    assert done.exit_code == 0, done.output
    previews = [t["runs"]["cpu"]["output_preview"]
                for t in json.loads(Path("p.json").read_text())["tools"]]
    assert previews == ["HEY", "5"]

    for value, message in [
        ('{"nope": {}}', "unknown tool(s) nope; known tools: shout, add"),
        ('{"shout": "hey"}', "the arguments of shout must be a mapping"),
        ("missing.json", "--example-args file missing.json: cannot read"),
        ("{not json", "not valid JSON/YAML"),
    ]:
        bad = CliRunner().invoke(app, [*base, "--example-args", value])
        assert bad.exit_code == 2, bad.output
        assert message in bad.output


def test_a_profile_that_measured_nothing_exits_1_and_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_app(tmp_path, "first_contact_none_tools", PLAIN_TOOLS)
    monkeypatch.chdir(folder)
    done = CliRunner().invoke(app, [
        "profile", "--suite", "first_contact_none_tools:TOOLS", "--devices", "cpu",
        "--repeats", "1", "--plots", "plots", "--json", "p.json",
    ])
    assert done.exit_code == 1, done.output
    assert "no tool was measured on any device:" in done.output
    assert "shout: cpu: no example arguments for tool 'shout' (it requires text)" in done.output
    assert "--example-args" in done.output
    assert not Path("p.json").exists() and not Path("plots").exists()  # no empty plot


def test_cpu_only_option_exists_and_the_message_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_app(tmp_path, "first_contact_pin_tools", PLAIN_TOOLS)
    monkeypatch.chdir(folder)
    base = ["profile", "--suite", "first_contact_pin_tools:TOOLS", "--devices", "cpu",
            "--repeats", "1", "--warmup", "0", "--example-args",
            '{"shout": {"text": "a"}, "add": {"a": 1, "b": 2}}', "--scenario-out", "sc"]
    skipped = CliRunner().invoke(app, base)
    assert skipped.exit_code == 2
    assert "--cpu-only pin" in skipped.output
    pinned = CliRunner().invoke(app, [*base, "--cpu-only", "pin"])
    assert pinned.exit_code == 0, pinned.output
    assert sorted(p.name for p in Path("sc").iterdir()) == [
        "profiled_custom_memory.yaml", "profiled_custom_parallel.yaml",
        "profiled_custom_serial.yaml"]
    wrong = CliRunner().invoke(app, [*base, "--cpu-only", "keep"])
    assert wrong.exit_code == 2 and "valid: skip, pin" in wrong.output
    quiet = CliRunner().invoke(app, [*base, "--cpu-only", "pin", "--quiet"])
    assert (quiet.exit_code, quiet.output) == (0, "")  # a flag: no table, no paths


def test_progress_on_a_terminal_stderr_only_and_never_when_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_app(tmp_path, "first_contact_bar_tools", PLAIN_TOOLS)
    monkeypatch.chdir(folder)
    args = dict(suite="first_contact_bar_tools:TOOLS", devices="cpu", repeats=1, warmup=0,
                example_args='{"shout": {"text": "a"}, "add": {"a": 1, "b": 2}}')

    def run(quiet: bool, terminal: bool) -> tuple[str, str]:
        out, err = io.StringIO(), io.StringIO()
        run_profile_command(
            **args, quiet=quiet,  # type: ignore[arg-type]
            console=Console(file=out, width=200),
            errors=Console(file=err, force_terminal=terminal, width=200),
        )
        return out.getvalue(), err.getvalue()

    out, err = run(quiet=False, terminal=True)
    assert "add on cpu" in err or "profiling" in err  # the live bar, on stderr
    assert "2/2" in err and "shout" in out and "2/2" not in out
    out, err = run(quiet=False, terminal=False)
    assert err == "" and "shout" in out  # not a terminal: the table, no bar
    out, err = run(quiet=True, terminal=True)
    assert (out, err) == ("", "")


def test_version_flag_and_attribute() -> None:
    assert langgraph_devsched.__version__ == metadata.version("langgraph-devsched")
    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0
    assert done.output == f"devsched (langgraph-devsched) {langgraph_devsched.__version__}\n"
