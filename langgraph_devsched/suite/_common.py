"""Shared plumbing for the suite: sizes, the resident model handles, seeded inputs, tool
metadata.

>>> check_size("small")
'small'
>>> check_size("huge")
Traceback (most recent call last):
...
ValueError: unknown suite size 'huge'; valid sizes: small, full
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast, get_args

from langchain_core.tools import BaseTool

from langgraph_devsched.hints import device_hints
from langgraph_devsched.models import ResidentModel, default_cache
from langgraph_devsched.profiling.profiler import EXAMPLE_ARGS_KEY

SuiteSize = Literal["small", "full"]
"""``small``: tens of ms per call on a laptop CPU (tests, docs). ``full``: real-size models."""

SUITE_SIZES: tuple[SuiteSize, ...] = get_args(SuiteSize)
M = TypeVar("M")

MODEL_SEED = 1234
"""Seed of every randomly initialised model, so outputs are the same in every process."""


def check_size(size: str) -> SuiteSize:
    if size not in SUITE_SIZES:
        raise ValueError(f"unknown suite size {size!r}; valid sizes: {', '.join(SUITE_SIZES)}")
    return cast(SuiteSize, size)


def require_torch() -> Any:
    """Import torch, or fail with a message saying how to install it."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the suite extra brings torch
        raise ImportError(
            "the built-in tool suite needs torch: pip install torch transformers "
            "(from a clone: pip install -e '.[suite]')"
        ) from exc
    return torch


def require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:  # pragma: no cover
        raise ImportError(
            "this suite tool needs transformers: pip install torch transformers "
            "(from a clone: pip install -e '.[suite]')"
        ) from exc
    return transformers


SUITE_MODELS_MAX = 32
"""Bound on the suite's model handles (13 models x 2 sizes, MiniLM shared: 25)."""

_HANDLES: dict[str, ResidentModel[Any]] = {}
_GUARD = threading.Lock()
HOST_CACHE_MAX = 4
"""Bound on the host-side helpers kept between calls (e.g. the archive, one per size)."""
_HOST: OrderedDict[tuple[str, str], Any] = OrderedDict()


def _placed(obj: Any, device: str) -> Any:
    """``obj`` on ``device``: modules moved and put in eval mode, tensors moved, the items of
    a tuple placed one by one, anything else (a tokenizer, a label) as it is."""
    torch = require_torch()
    if isinstance(obj, torch.nn.Module):
        return obj.to(device).eval()
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple):
        return tuple(_placed(item, device) for item in obj)
    return obj


def _release(obj: Any) -> None:
    """Free an instance the cache drops: a module's parameters and buffers go to the ``meta``
    device (no copy back to the host; its device memory is freed at once, even where a stray
    reference remains). A plain tensor is freed when the cache drops its reference."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if isinstance(obj, tuple):
        for item in obj:
            _release(item)
    elif isinstance(obj, torch.nn.Module):
        obj.to("meta")


def suite_model(name: str, build: Callable[[], Any], weights_mb: float) -> ResidentModel[Any]:
    """The suite's `ResidentModel` named ``name`` (one handle per name, made on first use).

    Its ``load(device)`` runs ``build()`` (which returns the object on the CPU) under the
    fixed seed `MODEL_SEED`, so the weights are the same in every process, then moves it to
    ``device`` (modules in eval mode; see `_placed`); its ``release`` frees it (`_release`).
    ``weights_mb`` is declared: the parameter and buffer bytes of the built object, rounded
    up to the MB (``tests/test_suite_resident.py`` checks it against the built models; on
    CUDA the cache also measures the load with ``torch.cuda.memory_allocated``).
    """
    with _GUARD:
        handle = _HANDLES.get(name)
        if handle is None:
            if len(_HANDLES) >= SUITE_MODELS_MAX:
                raise RuntimeError(f"more than {SUITE_MODELS_MAX} suite models: {name!r}")

            def load(device: str) -> Any:
                torch = require_torch()
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(MODEL_SEED)
                    obj = build()
                return _placed(obj, device)

            handle = ResidentModel(name, load, weights_mb=weights_mb, release=_release)
            _HANDLES[name] = handle
        return handle


def suite_models() -> tuple[ResidentModel[Any], ...]:
    """The suite's model handles made so far."""
    with _GUARD:
        return tuple(_HANDLES.values())


def host_cached(name: str, size: SuiteSize, build: Callable[[], M]) -> M:
    """A host-side helper (not a model: e.g. a buffer the tool reads), built once per
    (name, size) and kept, at most `HOST_CACHE_MAX` of them (least recently used dropped)."""
    key = (name, size)
    with _GUARD:
        if key in _HOST:
            _HOST.move_to_end(key)
            return cast(M, _HOST[key])
    obj = build()
    with _GUARD:
        obj = _HOST.setdefault(key, obj)
        _HOST.move_to_end(key)
        while len(_HOST) > HOST_CACHE_MAX:
            _HOST.popitem(last=False)
    return cast(M, obj)


def clear_cache() -> None:
    """Drop the suite's models from the process-wide model cache (`default_cache`, the one
    tools use outside a node) and its host-side helpers; the next call loads again. A
    node's models are freed by ``node.close()``."""
    names = [h.name for h in suite_models()]
    cache = default_cache()
    cache.drop(names, "cpu")
    cache.drop(names, "gpu")
    with _GUARD:
        _HOST.clear()


def generator(seed: int) -> Any:
    """A CPU `torch.Generator` seeded with ``seed``: inputs are synthesised on the host."""
    torch = require_torch()
    return torch.Generator().manual_seed(int(seed))


def finish(
    tool: BaseTool, *, example: Mapping[str, Any], model: ResidentModel[Any] | None = None,
    **hints: Any,
) -> BaseTool:
    """Attach device hints and the profiler's example arguments to a suite tool; a tool on a
    resident ``model`` gets its ``model``/``weights_mb`` hints too (`ResidentModel.hints`).
    Every suite tool is side-effect free (a pure computation on synthesised inputs): it says
    ``idempotent: true``, so the policy may run a call on both sides to measure one."""
    hints.setdefault("idempotent", True)
    tool = device_hints(**(model.hints(**hints) if model is not None else hints))(tool)
    tool.metadata = {**(tool.metadata or {}), EXAMPLE_ARGS_KEY: dict(example)}
    return tool


def sync(device: str) -> None:
    """Wait for queued CUDA work, so a tool's latency covers its kernels."""
    if device.startswith("cuda"):
        require_torch().cuda.synchronize(device)


def checksum(values: Any) -> float:
    """A short, rounded checksum of a tensor (sum of absolute values, 4 significant digits)."""
    total = float(values.detach().abs().double().sum().cpu())
    return float(f"{total:.4g}")
