"""``devsched bench`` and the agentic scheduler: skipped with why, or added by ``--llm``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from typer.testing import CliRunner

from langgraph_devsched.cli import app
from langgraph_devsched.schedulers.agentic import config
from langgraph_devsched.schedulers.agentic import scheduler as agentic
from tests.agentic_fakes import ToolScriptModel, submit

TINY = """\
name: tiny
category: parallel
testbed: {vram_budget_mb: 8000, cpu_cores: 2, noise: 0.0, seed: 1}
tools:
  a: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}
  b: {params: {cpu_ms: 150, gpu_ms: 100, vram_mb: 1000, gpu_share: 1.0}}
workload: {kind: parallel, calls: [a, b], rounds: 3}
"""

runner = CliRunner()


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # the command sets DEVSCHED_LLM_* for its process: keep that inside this test
    monkeypatch.setattr(os, "environ", dict(os.environ))
    for var in (config.ENV_MODEL, config.ENV_BASE_URL, config.ENV_API_KEY):
        os.environ.pop(var, None)
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY, encoding="utf-8")
    return path


class AnswersEveryCall(ToolScriptModel):
    """Submits a on the GPU now and b on the CPU, whatever the call ids."""

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        calls = next(json.loads(str(m.content)) for m in messages
                     if getattr(m, "name", None) == "step_calls")
        ids = {row.get("tool", cid): cid for cid, row in calls.items()}
        self.script[:] = [submit({ids["a"]: "gpu_now", ids["b"]: "cpu"}, "a then b")]
        return super()._generate(messages, stop, run_manager, **kw)


def test_without_a_model_agentic_is_skipped_with_the_reason(scenario: Path) -> None:
    out = scenario.parent / "bench.json"
    result = runner.invoke(
        app, ["bench", "--scenarios", str(scenario), "--rounds", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "skipped agentic" in result.output
    data = json.loads(out.read_text())
    assert "agentic" not in data["summary"]
    assert data["config"]["skipped"]["agentic"].startswith(
        "AgenticNotConfiguredError: the agentic scheduler is not configured"
    )


def test_asking_for_agentic_without_a_model_is_a_plain_error(scenario: Path) -> None:
    result = runner.invoke(app, ["bench", "--scenarios", str(scenario), "--schedulers", "agentic"])
    assert result.exit_code == 2
    assert "the agentic scheduler is unavailable" in result.output
    assert "DEVSCHED_LLM_MODEL" in result.output


def test_llm_option_adds_the_agentic_row(scenario: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[str | None, str | None]] = []
    model = AnswersEveryCall(script=[])

    def fake_openai_model(
        name: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        **kw: Any,
    ) -> ToolScriptModel:
        built.append(
            (
                name or os.environ.get(config.ENV_MODEL),
                base_url or os.environ.get(config.ENV_BASE_URL),
            )
        )
        return model

    monkeypatch.setattr(agentic, "openai_model", fake_openai_model)
    out = scenario.parent / "bench.json"
    result = runner.invoke(
        app,
        [
            "bench",
            "--scenarios",
            str(scenario),
            "--schedulers",
            "all_gpu",
            "--rounds",
            "3",
            "--llm",
            "qwen2.5:7b",
            "--llm-base-url",
            "http://localhost:11434/v1",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert set(built) == {("qwen2.5:7b", "http://localhost:11434/v1")}
    row = json.loads(out.read_text())["scenarios"][0]["results"]["agentic"]
    # the model answered every consultation; the monitor's reprobes ran without asking it,
    # and so did a step where the evidence admits the policy's mapping alone (the symmetric
    # mapping never ran, and no win funds exploring it)
    stats = row["agentic"]
    # answered: used, or vetoed by the evidence (an unfunded exploration runs the policy's)
    assert stats["answered"] == stats["consultations"] == row["llm_calls"]
    assert stats["consultations"] + stats["skipped"].get("one_admitted", 0) >= 1
    assert stats["consultations"] + stats["cached_decisions"] + sum(
        stats["skipped"].values()) == 3


def test_llm_candidates_sets_the_pick_candidates_and_is_checked(
    scenario: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[int] = []

    class Picks(ToolScriptModel):
        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            shown.append(len(re.findall(r"^\d\) ", str(messages[1].content), re.M)))
            self.script[:] = [AIMessage('{"pick": 1}')]
            return super()._generate(messages, stop, run_manager, **kw)

    monkeypatch.setattr(agentic, "openai_model", lambda *a, **k: Picks(script=[]))
    base = ["bench", "--scenarios", str(scenario), "--schedulers", "agentic", "--rounds", "3",
            "--llm", "m", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm-mode", "pick"]
    result = runner.invoke(app, [*base, "--llm-candidates", "2"])
    assert result.exit_code == 0, result.output
    assert shown and max(shown) == 2
    assert os.environ[config.ENV_CANDIDATES] == "2"
    bad = runner.invoke(app, [*base, "--llm-candidates", "-1"])
    assert bad.exit_code == 2 and "llm-candidates" in bad.output
