"""TaskBench conversations (`bench.taskbench`): the loader on a made-up directory, the levels,
the seeded conversations and their replay by name, the profile table, and the CLI; the real
data (``../shared/taskbench``) where it exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from langgraph_devsched.bench.scenario import ScenarioError
from langgraph_devsched.bench.taskbench import (
    levels_of,
    load_taskbench,
    parse_taskbench_name,
    taskbench_conversation,
    taskbench_conversations,
)
from langgraph_devsched.bench.taskbench_profiles import load_profiles
from langgraph_devsched.cli import app

REAL = Path(__file__).resolve().parents[1] / ".." / "shared" / "taskbench"
TOOLS = ["Automatic Speech Recognition", "Translation", "Summarization", "Text-to-Speech"]


def _fixture(folder: Path, records: list[dict[str, object]] | None = None) -> Path:
    """A made-up TaskBench directory: four tools of the packaged table, a few requests."""
    folder.mkdir(parents=True, exist_ok=True)
    nodes = [{"id": t, "desc": f"made-up tool number {k}", "input-type": ["text"],
              "output-type": ["text"]} for k, t in enumerate(TOOLS)]
    (folder / "tool_desc.json").write_text(json.dumps({"nodes": nodes}))
    if records is None:
        records = [
            {"id": "r1", "type": "chain", "n_tools": 3, "instruction": "hear it, shorten it",
             "task_nodes": [{"task": TOOLS[0]}, {"task": TOOLS[2]}],
             "task_links": [{"source": TOOLS[0], "target": TOOLS[2]}]},
            {"id": "r2", "type": "chain", "n_tools": 2, "instruction": "turn it, say it",
             "task_nodes": [{"task": TOOLS[1]}, {"task": TOOLS[3]}],
             "task_links": [{"source": 0, "target": 1}]},
            {"id": "r3", "type": "dag", "n_tools": 3, "instruction": "all at once",
             "task_nodes": [{"task": TOOLS[0]}, {"task": TOOLS[1]}, {"task": TOOLS[2]}],
             "task_links": [{"source": TOOLS[0], "destination": TOOLS[2]},
                            {"source": TOOLS[1], "target": TOOLS[2]}]},
            {"id": "r4", "type": "single", "n_tools": 1, "instruction": "a tool not here",
             "task_nodes": [{"task": "Made-up Missing Tool"}], "task_links": []},
            {"id": "r5", "type": "single", "n_tools": 1, "instruction": "just say it",
             "task_nodes": [{"task": TOOLS[3]}], "task_links": []},
        ]
    (folder / "data.json").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return folder


def test_the_loader_skips_and_maps_the_quirks_and_counts_them(tmp_path: Path) -> None:
    bench = load_taskbench(_fixture(tmp_path / "tb"))
    assert list(bench.tools) == TOOLS
    assert bench.tools[TOOLS[1]].description == "made-up tool number 1"
    assert [r.id for r in bench.requests] == ["r1", "r2", "r3", "r5"]
    assert sum(bench.skipped.values()) == 1
    assert any("not in tool_desc.json" in why for why in bench.skipped)
    mapped = " ".join(bench.mapped)
    assert "node index" in mapped and "destination" in mapped and "n_tools" in mapped
    by_id = {r.id: r for r in bench.requests}
    assert by_id["r2"].links == ((TOOLS[1], TOOLS[3]),)
    assert by_id["r3"].levels == ((TOOLS[0], TOOLS[1]), (TOOLS[2],))
    assert by_id["r3"].steps(1) == [[TOOLS[0]], [TOOLS[1]], [TOOLS[2]]]
    assert "skipped 1" in bench.summary()


def test_levels_break_a_cycle_by_its_closing_link_and_lone_nodes_are_level_zero() -> None:
    levels, kept, dropped = levels_of(["a", "b", "c"], [("a", "b"), ("b", "a"), ("b", "b")])
    assert levels == (("a", "c"), ("b",))
    assert kept == (("a", "b"),) and dropped == 2


@pytest.mark.parametrize("case, message", [
    ("no_dir", "no such directory"),
    ("no_data", "data.json: missing"),
    ("bad_line", "line 2: not JSON"),
    ("no_field", "line 1: a record needs"),
])
def test_a_bad_directory_is_an_error_naming_the_file(tmp_path: Path, case: str,
                                                     message: str) -> None:
    folder = tmp_path / "tb"
    if case != "no_dir":
        _fixture(folder)
    if case == "no_data":
        (folder / "data.json").unlink()
    elif case == "bad_line":
        good = (folder / "data.json").read_text().splitlines()[0]
        (folder / "data.json").write_text(good + "\n{not json\n")
    elif case == "no_field":
        (folder / "data.json").write_text(json.dumps({"id": "x"}) + "\n")
    with pytest.raises(ScenarioError, match=message) as info:
        load_taskbench(folder)
    assert str(folder) in str(info.value)


def test_conversations_depend_only_on_seed_and_index(tmp_path: Path) -> None:
    bench = load_taskbench(_fixture(tmp_path / "tb"))
    five, three = taskbench_conversations(bench, 5, 2), taskbench_conversations(bench, 3, 2)
    assert [s.model_dump() for s in five[:3]] == [s.model_dump() for s in three]
    assert [s.name for s in three] == ["tb-s2-0", "tb-s2-1", "tb-s2-2"]
    assert five[4] == taskbench_conversation(bench, 2, 4)
    assert taskbench_conversations(bench, 1, 3)[0] != five[0]
    assert parse_taskbench_name("tb-s2-4") == (2, 4) and parse_taskbench_name("x") is None
    with pytest.raises(ValueError, match="--conversations"):
        taskbench_conversations(bench, 0, 1)


def test_a_conversation_is_its_requests_levels_with_idle_times_before_each(
        tmp_path: Path) -> None:
    bench = load_taskbench(_fixture(tmp_path / "tb"))
    by_id = {r.id: r for r in bench.requests}
    for s in taskbench_conversations(bench, 8, 1):
        w = s.workload
        assert w.kind == "sequence" and w.rounds == 1 and s.category == "residency"
        assert set(s.tools) == set(TOOLS)  # every tool of the domain, described
        assert all(e.description for e in s.tools.values())
        assert w.idle_ms is not None and len(w.idle_ms) == len(s.batches())
        assert w.requests and w.requests[0].step == 0
        starts = [r.step for r in w.requests] + [len(s.batches())]
        for r, end in zip(w.requests, starts[1:], strict=True):
            assert s.batches()[r.step:end] == by_id[r.name].steps()
            assert r.text == by_id[r.name].instruction
            assert 500 <= r.arrival_ms <= w.idle_ms[r.step]
            for k in range(r.step + 1, end):  # a think time between a request's steps
                assert 500 <= w.idle_ms[k] <= 4000
        assert w.idle_ms[0] == w.requests[0].arrival_ms  # no gap before the first request
        used = {t for b in s.batches() for t in b}
        assert used <= set(s.tools)
        for entry in s.tools.values():  # every tool keeps its model, called or not
            assert entry.params.weights_mb > 0


def test_a_profile_table_lacking_a_tool_is_an_error_naming_it(tmp_path: Path) -> None:
    folder = _fixture(tmp_path / "tb")
    table = tmp_path / "profiles.yaml"
    row = ("    model: m{k}\n    cpu_ms: 100\n    gpu_ms: 10\n    weights_mb: 400\n"
           "    load_gpu_ms: 500\n")
    table.write_text("tools:\n" + "".join(f"  {t}:\n" + row.format(k=k)
                                          for k, t in enumerate(TOOLS[:3])))
    bench = load_taskbench(folder)
    with pytest.raises(ScenarioError, match="Text-to-Speech") as info:
        taskbench_conversation(bench, 1, 0, load_profiles(table))
    assert str(table) in str(info.value)
    run = CliRunner().invoke(app, ["bench", "--taskbench", str(folder), "--conversations",
                                   "1", "--profiles", str(table)])
    assert run.exit_code == 2 and "Text-to-Speech" in run.output


def test_the_packaged_table_holds_models_of_03_to_8_gb() -> None:
    table = load_profiles()
    assert len(table.tools) == 23
    sizes = [p.weights_mb for p in table.tools.values()]
    assert all(300 <= mb <= 8000 for mb in sizes) and sum(sizes) > 24000
    assert len({p.model for p in table.tools.values()}) == 23  # each tool its own model


@pytest.mark.parametrize("args, message", [
    (["--conversations", "2"], "need --taskbench"),
    (["--scenarios", "tb-s1-3"], "needs --taskbench"),
    (["--taskbench", "/nonexistent/taskbench", "--conversations", "1"], "no such directory"),
    (["--taskbench", "DIR"], "--conversations N, or --scenarios"),
    (["--taskbench", "DIR", "--scenarios", "serial_voice_assistant"], "no conversation name"),
    (["--taskbench", "DIR", "--conversations", "1", "--generate", "1"], "not both"),
])
def test_cli_errors_say_what_is_missing(tmp_path: Path, args: list[str], message: str) -> None:
    folder = str(_fixture(tmp_path / "tb"))
    run = CliRunner().invoke(app, ["bench", *[folder if a == "DIR" else a for a in args]])
    assert run.exit_code == 2, run.output
    assert message in run.output


def test_cli_runs_conversations_and_replays_one_by_name(tmp_path: Path) -> None:
    folder = str(_fixture(tmp_path / "tb"))
    out = tmp_path / "c.json"
    run = CliRunner().invoke(app, ["bench", "--taskbench", folder, "--conversations", "2",
                                   "--seed", "1", "--schedulers", "monitor",
                                   "--decision-cost", "none", "--json", str(out)])
    assert run.exit_code == 0, run.output
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["scenarios"]] == ["tb-s1-0", "tb-s1-1"]
    replay = tmp_path / "r.json"
    again = CliRunner().invoke(app, ["bench", "--taskbench", folder, "--scenarios", "tb-s1-1",
                                     "--schedulers", "monitor", "--decision-cost", "none",
                                     "--json", str(replay)])
    assert again.exit_code == 0, again.output
    (row,) = json.loads(replay.read_text())["scenarios"]
    assert row["total_reference_ms"] == data["scenarios"][1]["total_reference_ms"]
    assert row["results"]["monitor"]["total_ms"] == data["scenarios"][1]["results"][
        "monitor"]["total_ms"]


real_data = pytest.mark.skipif(
    not (REAL / "data.json").is_file(),
    reason=f"the TaskBench development split is not at {REAL} (../shared/taskbench from the "
           f"repository root)")


@real_data
def test_the_real_data_loads_and_its_conversations_build() -> None:
    bench = load_taskbench(REAL)
    assert len(bench.tools) == 23
    assert sum(bench.skipped.values()) > 0 and bench.requests
    load_profiles().check(bench.tools, where="the real data")
    for s in taskbench_conversations(bench, 5, 1):
        assert len(s.tools) == 23 and s.workload.requests


@real_data
def test_cli_bench_on_the_real_data(tmp_path: Path) -> None:
    out = tmp_path / "tb.json"
    run = CliRunner().invoke(app, ["bench", "--taskbench", str(REAL), "--conversations", "2",
                                   "--seed", "1", "--schedulers", "monitor", "--json",
                                   str(out)])
    assert run.exit_code == 0, run.output
    data = json.loads(out.read_text())
    assert len(data["scenarios"]) == 2
    assert all(s["total_reference_exact"] for s in data["scenarios"])
