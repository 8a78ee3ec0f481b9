"""The ecosystem examples run as ``python examples/X.py`` would (on the simulated testbed,
offline) and print what their docstrings promise. (``demo_app.py`` and ``ray_cluster.py`` are
tested by their own test modules.)"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

EXPECTED: dict[str, list[str]] = {
    "react_one_line_switch.py": [
        "call-1 transcribe: gpu_queued on cuda:0, 85 ms (simulated)",
        "call-2 embed: cpu on cpu, 40 ms (simulated)",
        "answer: The meeting was about the quarterly plan.",
    ],
    "hints_from_yaml.py": [
        "transcribe: allowed gpu_now, gpu_queued, cpu",
        "embed: allowed cpu",
        "detect: allowed gpu_queued",
        "read_text: text of scan.png on cuda:0",
        "embed: vector of 'hello' on cpu",
        "detect: boxes in street.jpg on cuda:0",
        "rejected: invalid device hints for tool 'detect':",
    ],
    "langsmith_tracing.py": [
        "tool run 'transcribe'  tags: ['devsched:gpu_now']",
        "    devsched.device = 'cuda:0'",
        "    devsched.scheduler = 'all_gpu'",
        "    devsched.observed_ms = 85.0",
        "tool run 'read_text'  tags: ['devsched:gpu_now']",
        "    devsched.fallback = 'oom'",
        "    devsched.observed_ms = 320.0",
    ],
    "create_agent_middleware.py": [
        "one decision by 'heft' for calls c1, c2, c3",
        "  c1 transcribe: gpu_now on cuda:0, 85 ms",
        "  c2 read_text: gpu_queued on cuda:0, 125 ms",
        "  c3 embed: cpu on cpu, 40 ms",
        "transcribe: transcript of a.wav (ran on cuda:0)",
        "embed: vector of 'hello' (ran on cpu)",
        "answer: All three are done.",
    ],
}


@pytest.fixture(autouse=True)
def no_langsmith(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def test_the_expected_examples_are_there() -> None:
    assert all((EXAMPLES / name).is_file() for name in EXPECTED)
    assert (EXAMPLES / "hints.yaml").is_file()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_prints_what_it_promises(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if name == "create_agent_middleware.py":
        pytest.importorskip("langchain.agents", reason="needs the 'agents' extra (langchain)")
    monkeypatch.chdir(tmp_path)  # examples must not depend on the working directory
    monkeypatch.setattr(sys, "argv", [name])
    try:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    except SystemExit as exit:  # `raise SystemExit(main())` style scripts
        assert exit.code in (0, None), f"{name} exited with {exit.code!r}"
    lines = capsys.readouterr().out.splitlines()
    for expected in EXPECTED[name]:
        assert expected in lines, f"{name} did not print {expected!r}; printed:\n" + "\n".join(
            lines
        )


def test_an_example_runs_as_a_script() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "hints_from_yaml.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "detect: allowed gpu_queued" in done.stdout.splitlines()


def test_resident_models_example_loads_once_then_finds_its_models_warm(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="needs the 'suite' extra (torch)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["resident_models.py"])
    runpy.run_path(str(EXAMPLES / "resident_models.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    # where each call ran is the scheduler's choice on a GPU machine: compare without it
    where = [re.sub(r" on [^;\s]+", "", re.sub(r" \((cpu|gpu)\)", "", line)) for line in lines]
    assert where == [
        "step 1: embed loaded 'encoder'; classify loaded 'classifier'",
        "step 2: embed warm 'encoder'; classify warm 'classifier'",
        "resident: classifier, encoder",
        "after close: nothing resident",
    ]


def test_simulated_gpu_app_schedules_real_torch_tools_on_a_simulated_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("torch", reason="needs the 'suite' extra (torch)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["simulated_gpu_app.py"])
    runpy.run_path(str(EXAMPLES / "simulated_gpu_app.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[:6] == [
        "one decision by 'monitor' for 4 calls:",
        "  c1 classify_image: gpu_queued on cuda:0 (simulated), 85 ms",
        "  c2 classify_image: gpu_now on cuda:0 (simulated), 55 ms",
        "  c3 classify_image: gpu_now on cuda:0 (simulated), 55 ms",
        "  c4 embed_text: cpu on cpu (simulated), 12 ms",
        "simulated makespan: 85 ms, VRAM peak 6000 of 8000 MB",
    ]
    answers = lines[6:]
    assert len(answers) == 4
    assert all(a.startswith("classify_image: image ") for a in answers[:3])
    assert all(a.endswith("(computed on cpu)") for a in answers)  # real torch code, here
    assert answers[3] == "embed_text: embedding of 'hello': 32 numbers (computed on cpu)"


TASKBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "taskbench"


@pytest.mark.skipif(not (TASKBENCH / "data.json").is_file(),
                    reason=f"no TaskBench data at {TASKBENCH} (../shared/taskbench)")
def test_the_words_example_reads_a_real_request_and_runs_its_steps() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVSCHED_LLM")}
    out = subprocess.run([sys.executable, str(EXAMPLES / "words_taskbench.py"), str(TASKBENCH),
                          "0"], capture_output=True, text=True, timeout=300, env=env,
                         check=True).stdout
    assert "no model server configured" in out
    assert re.search(r"^request \S+: true tools .+$", out, re.M)
    assert re.search(r"^read \(lexical, \d+ ms\): predicted .+$", out, re.M)
    assert re.search(r"^to load in the agent's first turn \(4 s\): .+$", out, re.M)
    assert re.search(r"^step 1: .+ on (cuda:0|cpu) ", out, re.M)
