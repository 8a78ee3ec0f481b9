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
