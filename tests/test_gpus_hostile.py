"""Hostile inputs on a machine with several GPUs: bad `GpuConfig` values are refused at
construction (the field and the GPU named), and an LLM answer whose GPU part uses Unicode
digits is repaired for that call alone, never the whole step."""

from __future__ import annotations

import json
import math

import pytest
from langchain_core.messages import AIMessage

from langgraph_devsched import GpuConfig, LocalBackend
from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.schedulers.agentic import AgenticScheduler
from langgraph_devsched.schedulers.base import Batch, SchedulerView
from langgraph_devsched.telemetry import DeviceState, GpuDevice
from tests.agentic_fakes import ToolScriptModel

BAD = [("speed", 0), ("speed", -1), ("speed", math.inf), ("speed", math.nan),
       ("vram_budget_mb", math.inf), ("vram_budget_mb", math.nan), ("vram_budget_mb", 0),
       ("background_mb", -5), ("background_mb", math.inf)]


@pytest.mark.parametrize(("field", "value"), BAD)
def test_a_bad_gpu_config_is_refused_at_construction_naming_field_and_gpu(field, value):
    with pytest.raises(ValueError, match=rf"cuda:1.*{field} must be"):
        LocalBackend(gpu=[GpuConfig(8000, "cuda:0"),
                          GpuConfig(**{"vram_budget_mb": 8000, "device": "cuda:1",
                                       field: value})])


def test_good_gpu_configs_still_build():
    backend = LocalBackend(gpu=[GpuConfig(8000, "cuda:0", background_mb=0),
                                GpuConfig(24000, "cuda:1", speed=2.5)])
    assert [ledger.capacity_mb for ledger in backend.ledgers] == [8000, 24000]


def two_gpus() -> SchedulerView:
    gpus = (GpuDevice(0, "L4", 24000), GpuDevice(1, "H100", 80000, speed=2.0))
    return SchedulerView(DeviceState(True, "L4", 24000, 0, 0.0, 8, gpus=gpus))


@pytest.mark.parametrize("value", ["gpu_now@\u00b2", "gpu_now@cuda:\u00b9", "gpu_now@\u0661"])
def test_unicode_digits_in_an_answer_are_repaired_for_that_call_alone(value):
    model = ToolScriptModel(script=[AIMessage(json.dumps({"o": value, "e": "gpu_now@1"}))])
    # about reading the values, not the exploration budget (unmeasured on several GPUs, the
    # answer would run only where funded)
    scheduler = AgenticScheduler(model, timeout_s=5, fallback="static", max_explorations=None)
    spec = ToolDeviceSpec(vram_mb=500)
    d = scheduler.decide(Batch.of([("o", "ocr", spec), ("e", "embed", spec)]), two_gpus())
    assert dict(d.mapping) == {"o": "gpu_now", "e": "gpu_now"}
    assert dict(d.gpus) == {"e": 1}  # the other call keeps the GPU it was given
    assert scheduler.last_fallbacks == {"o": "gpu_not_allowed"}
