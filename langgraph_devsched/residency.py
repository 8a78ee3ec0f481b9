"""Resident model weights: the vocabulary and the eviction rule shared by the runtime model
cache (`langgraph_devsched.models`) and the simulated testbed.

A GPU tool keeps its model's weights on the device between calls. Those weights are a
long-lived reservation, apart from a call's working memory (its ``vram_mb``): they stay
after the call ends, until they are evicted to make room for another model's weights, or
the cache is closed. A tool names its weights with the ``model`` hint (tools that share a
model share one copy); ``weights_mb`` says how big they are, ``load_ms`` how long a load
takes on each side, ``keep_warm`` that they are never evicted for another model.

`plan_room` is the one eviction rule: least recently used first, never a model in use or
kept warm, and nothing at all when even evicting every candidate would not make room. A
step *demotes* the models it uses only off a GPU (`demoted`: a call placed on the CPU or on
another GPU): their copy on that GPU counts as the least recently used from the step's start,
so that the weights the scheduler just moved away are evicted before weights it keeps
using. Seen with nothing declared (`residency_visual_suite`): a VQA model that a step ran on
the CPU kept its GPU copy, and the next load evicted a 6.6 GB diffusion model instead,
which the step after loaded again (2.8 s).

>>> plan_room([WarmModel("ocr", 900), WarmModel("asr", 2400, in_use=1)],
...           need_mb=1500, free_mb=1000)
('ocr',)
>>> plan_room([WarmModel("asr", 2400, in_use=1)], need_mb=1500, free_mb=1000) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

ModelSide = Literal["gpu", "cpu"]
_EPS = 1e-9


@dataclass(frozen=True)
class WarmModel:
    """One model's weights resident on one side, as the cache (or the testbed) holds them."""

    model: str
    weights_mb: float
    side: ModelSide = "gpu"
    in_use: int = 0
    """Calls running on these weights now (a model in use is never evicted)."""
    keep_warm: bool = False
    """Never evicted to make room for another model (released only at close)."""


def plan_room(
    resident: Sequence[WarmModel], *, need_mb: float, free_mb: float,
    protect: frozenset[str] = frozenset(),
) -> tuple[str, ...] | None:
    """Which resident models to evict so that ``need_mb`` fits in ``free_mb`` more.

    ``resident`` is in least-recently-used order (oldest first); models in use, kept warm
    or named in ``protect`` (e.g. the ones a step is about to use) are never candidates.
    Returns the models to evict, oldest first and no more than needed (``()`` when it
    already fits), or None when evicting every candidate would still not make room."""
    if need_mb <= free_mb + _EPS:
        return ()
    evict: list[str] = []
    room = free_mb
    for warm in resident:
        if warm.in_use > 0 or warm.keep_warm or warm.model in protect:
            continue
        evict.append(warm.model)
        room += warm.weights_mb
        if need_mb <= room + _EPS:
            return tuple(evict)
    return None


def demoted(uses: Iterable[tuple[str | None, int | None]], gpu: int = 0) -> frozenset[str]:
    """The models a step uses only off GPU ``gpu``: ``uses`` holds, per call, its model (None
    without one) and the GPU it is placed on (None: the CPU). Their copies on that GPU are
    the first eviction candidates from the step's start (see the module).

    >>> sorted(demoted([("vqa", None), ("sd", 0), ("ocr", 1), ("sd", None), (None, None)]))
    ['ocr', 'vqa']
    """
    used: set[str] = set()
    here: set[str] = set()
    for model, where in uses:
        if model is None:
            continue
        used.add(model)
        if where == gpu:
            here.add(model)
    return frozenset(used - here)
