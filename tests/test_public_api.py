"""The top level exports what an application touches (at most 15 names); every name it used
to export still works for one release, with one `DeprecationWarning` naming its new home."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import langgraph_devsched

OLD_ALL = [
    "DEVICE_OPTIONS", "AgenticScheduler", "BackgroundLoad", "Batch", "CallRecord", "Decision",
    "DeviceOption", "DeviceToolNode", "GpuConfig", "InjectedDevice", "LocalBackend",
    "ModelCache", "Placement", "ResidentModel", "Scheduler", "SchedulerView",
    "SimulatedBackend", "SimulatedTestbed", "SoloProfile", "StepRecord", "StepReport",
    "ToolDeviceSpec", "ToolParams", "VramLedger", "__version__", "current_device",
    "current_placement", "device_hints", "load_hints_file", "make_scheduler",
]
MOVED = sorted(set(OLD_ALL) - set(langgraph_devsched.__all__))


def test_all_is_small_and_importable() -> None:
    assert len(langgraph_devsched.__all__) <= 15
    assert set(langgraph_devsched.__all__) <= set(OLD_ALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in langgraph_devsched.__all__:
            getattr(langgraph_devsched, name)


def test_importing_the_node_warns_nothing() -> None:
    """Run in a fresh interpreter: nothing this process imported before can hide a warning."""
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c",
         "from langgraph_devsched import DeviceToolNode"],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", MOVED)
def test_each_old_name_works_with_one_warning(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(langgraph_devsched, "_warned", set())
    home = langgraph_devsched._MOVED[name]
    with pytest.warns(DeprecationWarning, match=f"langgraph_devsched.{name} moved: .*{home}"):
        value = getattr(langgraph_devsched, name)
    assert value is getattr(importlib.import_module(home), name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(langgraph_devsched, name) is value  # the second use is silent


def test_old_names_cover_the_old_all_and_unknown_names_fail() -> None:
    assert len(MOVED) == len(OLD_ALL) - len(langgraph_devsched.__all__) == 15
    assert set(MOVED) == set(langgraph_devsched._MOVED)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        langgraph_devsched.NoSuchThing  # noqa: B018
    assert set(MOVED) <= set(dir(langgraph_devsched))
