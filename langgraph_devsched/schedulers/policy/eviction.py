"""What a step's evictions cost the steps after it: the reload of a model still in use.

A step's makespan does not show what it evicts. Placing a small call on the GPU can be
free for this step and evict a model that the next step needs again, which then pays its
whole load (seen: `residency_visual_suite` with noisy profiles reloaded a diffusion model on
every step, 2.2x the optimum, because its VQA call was 100 ms faster on the GPU). The
policy therefore charges each mapping the GPU load time of every resident model it evicts
that a recent step used (`RELOAD_HORIZON` decisions): the model is likely needed again and
will pay that load then. A model no recent step used costs nothing to evict. A load time is
learned where it is seen (the policy feeds every GPU load of an executed step), not only
when its model's batch is decided: with nothing declared, two alternating shapes each saw
the other's model as free to evict (its load unknown when that batch was decided).

A model whose load was never seen (declared nothing, resident before the first step) is
not free to evict either: its reload is priced from its size, at the load rate (ms per MB)
of the loads seen on this machine, or `DEFAULT_LOAD_MS_PER_MB` before any. Seen with
nothing declared: an OCR model loaded beside a hot ASR model evicted it, its reload
"unknown" and so costed 0, and the next step paid 2.5 s to load the ASR model again.

>>> use = RecentModels(horizon=2)
>>> use.note(["sd"]); use.learn({"sd": 2900.0})
>>> use.note(["vqa"]); use.learn({"vqa": 1100.0})
>>> use.reload_ms(("sd",)), use.reload_ms(("vqa", "old"))
(2900.0, 1100.0)
>>> use.note([]); use.note([])
>>> use.reload_ms(("sd", "vqa"))
0.0
>>> fresh = RecentModels()
>>> fresh.note(["asr"], weights_mb={"asr": 3000.0})
>>> fresh.reload_ms(("asr",))   # never seen loading: its size at the default rate
1500.0
>>> fresh.note(["ocr"], weights_mb={"ocr": 3600.0}); fresh.learn({"ocr": 900.0})
>>> fresh.reload_ms(("asr",))   # at the rate seen: 0.25 ms per MB
750.0
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

RELOAD_HORIZON = 4
"""A model used by a batch of one of the last this many decisions counts as in use."""

MAX_MODELS = 64
"""At most this many models are remembered (least recently used dropped)."""

DEFAULT_LOAD_MS_PER_MB = 0.5
"""The load rate assumed before any load was seen: 2 GB of weights a second (reading
safetensors from a local disk's page cache and copying them to the device)."""


class RecentModels:
    """Which models recent decisions' batches used, and each one's estimated GPU load time;
    bounded by `MAX_MODELS`."""

    def __init__(self, horizon: int = RELOAD_HORIZON, max_models: int = MAX_MODELS) -> None:
        self.horizon = horizon
        self.max_models = max_models
        self._step = 0
        self._last: OrderedDict[str, int] = OrderedDict()
        """Per model, the decision that last used it, least recent first."""
        self._load: dict[str, float] = {}
        """Per remembered model, its estimated GPU load time."""
        self._weights: dict[str, float] = {}
        """Per remembered model, the size of its weights (MB) where known."""

    def __len__(self) -> int:
        return len(self._last)

    def note(self, models: Iterable[str], *, weights_mb: Mapping[str, float] | None = None,
             ) -> None:
        """One decision's batch uses these models (``weights_mb``: sizes where known)."""
        self._step += 1
        for model in models:
            self._last[model] = self._step
            self._last.move_to_end(model)
        self._sizes(weights_mb)
        while len(self._last) > self.max_models:
            gone = self._last.popitem(last=False)[0]
            self._load.pop(gone, None)
            self._weights.pop(gone, None)

    def _sizes(self, weights_mb: Mapping[str, float] | None) -> None:
        for model, mb in (weights_mb or {}).items():
            if model in self._last and mb > 0:
                self._weights[model] = float(mb)

    def learn(self, load_gpu_ms: Mapping[str, float], *,
              weights_mb: Mapping[str, float] | None = None) -> None:
        """The current GPU load time estimates of remembered models (0, no estimate yet,
        keeps one learned before: a load seen on an earlier step)."""
        for model, ms in load_gpu_ms.items():
            if model in self._last and (ms > 0 or model not in self._load):
                self._load[model] = max(0.0, float(ms))
        self._sizes(weights_mb)

    def rate_ms_per_mb(self) -> float:
        """The median load rate of the remembered models seen loading (ms per MB of
        weights), else `DEFAULT_LOAD_MS_PER_MB`."""
        rates = sorted(ms / self._weights[m] for m, ms in self._load.items()
                       if ms > 0 and self._weights.get(m))
        return rates[len(rates) // 2] if rates else DEFAULT_LOAD_MS_PER_MB

    def reload_ms(self, evicted: Iterable[str]) -> float:
        """The load time the steps after pay again for evicting these models: the sum over
        those a batch of the last `horizon` decisions used (a load never seen: priced from
        the model's size at `rate_ms_per_mb`)."""
        total = 0.0
        rate: float | None = None
        for model in evicted:
            last = self._last.get(model)
            if last is None or self._step - last >= self.horizon:
                continue
            ms = self._load.get(model, 0.0)
            if ms <= 0 and model in self._weights:
                rate = self.rate_ms_per_mb() if rate is None else rate
                ms = self._weights[model] * rate
            total += ms
        return total
