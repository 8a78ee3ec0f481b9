"""scripts/foresight_split.py: the whole-run reference without foresight of first uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from langgraph_devsched.bench.generate import generated_scenario
from langgraph_devsched.bench.runner import scenario_whole_run

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "foresight_split.py"


def _script() -> object:
    spec = importlib.util.spec_from_file_location("foresight_split", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_first_uses_the_reference_cannot_load_ahead_of_a_first_call() -> None:
    """gen-s1-190 (one GPU): the clairvoyant reference loads a model before its first call;
    without that foresight the reference pays more, and never less than the clairvoyant one.
    On several GPUs the script leaves the workload out."""
    split = _script()
    clairvoyant = scenario_whole_run(generated_scenario(1, 190), 1).total_ms
    unforeseen = split.unforeseen_total(1, 190)  # type: ignore[attr-defined]
    assert unforeseen is not None and unforeseen > 1.3 * clairvoyant
    several = next(i for i in range(200) if generated_scenario(1, i).testbed.gpus)
    assert split.unforeseen_total(1, several) is None  # type: ignore[attr-defined]
