"""The main job (`make demo`'s first half) runs and prints every decision."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo_app.py"


@pytest.mark.parametrize("scheduler", [None, "static", "all_gpu"])
def test_demo_app_prints_one_line_per_call_and_the_ledger(
    scheduler: str | None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["demo_app.py", *([] if scheduler is None else ["--scheduler", scheduler])]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit:
        runpy.run_path(str(DEMO), run_name="__main__")
    assert exit.value.code == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("  makespan ")]
    assert len(steps) == 3
    assert out.count("ledger at end 0 MB") == 3
    assert "12 tool calls answered" in out
    for call in ("r0-asr", "r1-ocr", "r2-emb", "r2-cap"):
        assert call in out
    expected = scheduler or "monitor"
    assert f"scheduler={expected}" in out
    if scheduler == "all_gpu":
        assert "fallback: oom" in out  # everything at once does not fit in 6 GB


def test_demo_app_output_fits_100_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old: ``make demo`` printed the decisions' reasons on lines of up to 186 columns."""
    monkeypatch.setattr(sys, "argv", ["demo_app.py"])
    with pytest.raises(SystemExit):
        runpy.run_path(str(DEMO), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert any(line.startswith("    ") and "ms" in line for line in lines)  # a reason wrapped
