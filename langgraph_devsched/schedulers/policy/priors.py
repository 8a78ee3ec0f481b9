"""Device priors from words: for a tool that declares no profile and no ``device_prior``,
the device a forecast from words says it prefers (`words.WordsForecast.classes`, read from
the tool's description), until measurements replace it.

A prior only sets where a tool known not at all starts (`model._guess` and the policy's
first choices): once a side is measured, the measurement rules. A tool that declares a
profile or its own ``device_prior`` keeps them: the app's word wins over the sub-agent's.
The table is bounded (`MAX_TOOLS`, least recently told dropped); a value that is not a
prior (``gpu``, ``cpu``, ``neutral``) or a name that is not a string is ignored.

>>> from langgraph_devsched.hints import SoloProfile, ToolDeviceSpec
>>> from langgraph_devsched.schedulers.base import Batch
>>> priors = DevicePriors()
>>> priors.learn({"table": "cpu", "draw": "gpu", "x": "fast", 3: "cpu"})
>>> batch = Batch.of([("c0", "table", ToolDeviceSpec()),
...                   ("c1", "ocr", ToolDeviceSpec(profile=SoloProfile(cpu_ms=9, gpu_ms=3)))])
>>> [c.spec.device_prior for c in priors.apply(batch).calls]
['cpu', None]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from langgraph_devsched.hints import DevicePrior
from langgraph_devsched.schedulers.base import Batch, CallRequest
from langgraph_devsched.schedulers.lru import LruTable

MAX_TOOLS = 256
"""At most this many tools' priors are kept."""
_PRIORS = frozenset(get_args(DevicePrior))


class DevicePriors:
    """The device priors words gave, per tool (see the module)."""

    def __init__(self) -> None:
        self._table: LruTable[str, DevicePrior] = LruTable(MAX_TOOLS)

    def __len__(self) -> int:
        return len(self._table)

    def learn(self, classes: Mapping[Any, Any]) -> None:
        """A forecast's device classes (tool -> ``gpu``, ``cpu`` or ``neutral``)."""
        for tool, prior in list(classes.items())[:MAX_TOOLS]:
            if isinstance(tool, str) and prior in _PRIORS:
                self._table[tool] = prior

    def apply(self, batch: Batch) -> Batch:
        """``batch`` with each call's hints given the prior words gave its tool, where the
        hints declare neither a solo time nor a prior (the same batch when none applies)."""
        if not len(self._table):
            return batch
        calls = []
        changed = False
        for call in batch.calls:
            prior = self._table.get(call.tool)
            if prior is None or call.spec.declares_time or call.spec.device_prior is not None:
                calls.append(call)
                continue
            changed = True
            calls.append(CallRequest(call.call_id, call.tool,
                                     call.spec.model_copy(update={"device_prior": prior})))
        return Batch(tuple(calls)) if changed else batch
