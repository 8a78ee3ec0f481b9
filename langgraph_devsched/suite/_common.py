"""Shared plumbing for the suite: sizes, the model cache, seeded inputs, tool metadata.

>>> check_size("small")
'small'
>>> check_size("huge")
Traceback (most recent call last):
...
ValueError: unknown suite size 'huge'; valid sizes: small, full
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, cast, get_args

from langchain_core.tools import BaseTool

from langgraph_devsched.hints import device_hints
from langgraph_devsched.profiling.profiler import EXAMPLE_ARGS_KEY

SuiteSize = Literal["small", "full"]
"""``small``: tens of ms per call on a laptop CPU (tests, docs). ``full``: real-size models."""

SUITE_SIZES: tuple[SuiteSize, ...] = get_args(SuiteSize)

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


_CACHE: dict[tuple[str, str, str], Any] = {}
_LOCKS: dict[tuple[str, str, str], threading.Lock] = {}
_GUARD = threading.Lock()

M = TypeVar("M")


def cached(name: str, size: SuiteSize, device: str, build: Callable[[], M]) -> M:
    """Build ``name`` once per (name, size, device): seeded, in eval mode, on ``device``.

    ``build`` returns the object on the CPU; modules are moved to ``device`` and put in eval
    mode, anything else (tensors, tuples of tensors) is stored as built.
    """
    key = (name, size, device)
    if key in _CACHE:
        return cast(M, _CACHE[key])
    with _GUARD:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _CACHE:
            torch = require_torch()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(MODEL_SEED)
                obj = build()
            if isinstance(obj, torch.nn.Module):
                obj = obj.to(device).eval()
            _CACHE[key] = obj
    return cast(M, _CACHE[key])


def clear_cache() -> None:
    """Drop every cached model (frees memory; the next call rebuilds)."""
    with _GUARD:
        _CACHE.clear()
        _LOCKS.clear()


def generator(seed: int) -> Any:
    """A CPU `torch.Generator` seeded with ``seed``: inputs are synthesised on the host."""
    torch = require_torch()
    return torch.Generator().manual_seed(int(seed))


def finish(
    tool: BaseTool, *, example: Mapping[str, Any], **hints: Any
) -> BaseTool:
    """Attach device hints and the profiler's example arguments to a suite tool."""
    tool = device_hints(**hints)(tool)
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
