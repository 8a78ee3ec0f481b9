"""The hand-written constructors of the per-call records stay their dataclass's own."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from langgraph_devsched.executors.base import PlannedCall
from langgraph_devsched.records import CallRecord
from langgraph_devsched.schedulers.base import CallRequest


@pytest.mark.parametrize("cls", [CallRecord, PlannedCall, CallRequest])
def test_the_constructor_takes_every_field_in_order_with_its_default(cls: type) -> None:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        assert p.default == (inspect.Parameter.empty if f.default is dataclasses.MISSING
                             else f.default), f.name


def test_a_record_is_still_a_frozen_hashable_dataclass() -> None:
    a = CallRecord("c", "ocr", "gpu_now", "cuda:0", None, 1.0, 5.0, 100.0, 1, model="m",
                   loaded=True, evicted=("x",))
    b = dataclasses.replace(a)
    assert a == b and hash(a) == hash(b) and a is not b
    assert (a.run_ms, a.on_gpu, a.evicted) == (4.0, True, ("x",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.device = "cpu"  # type: ignore[misc]
    assert dataclasses.asdict(a)["model"] == "m"
