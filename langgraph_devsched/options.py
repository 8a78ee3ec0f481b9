"""The three device options a tool call can be given.

>>> from langgraph_devsched.options import DEVICE_OPTIONS, parse_option
>>> DEVICE_OPTIONS
('gpu_now', 'gpu_queued', 'cpu')
>>> parse_option("cpu")
'cpu'
"""

from __future__ import annotations

from typing import Literal, cast, get_args

DeviceOption = Literal["gpu_now", "gpu_queued", "cpu"]
"""`gpu_now` starts on the GPU at once (sharing it), `gpu_queued` waits for GPU admission,
`cpu` offloads to the CPU executor."""

DEVICE_OPTIONS: tuple[DeviceOption, ...] = get_args(DeviceOption)
GPU_OPTIONS: tuple[DeviceOption, ...] = ("gpu_now", "gpu_queued")

FallbackCause = Literal[
    "oom",
    "gpu_busy",
    "no_gpu",
    "vram_over_budget",
    "queue_timeout",
    "scheduler_error",
    "invalid_decision",
]
"""Why a call did not run where the scheduler put it (recorded, traced, counted)."""


def parse_option(value: object, *, where: str = "option") -> DeviceOption:
    """Return ``value`` as a `DeviceOption`, or raise `ValueError` naming the valid ones."""
    if value not in DEVICE_OPTIONS:
        valid = ", ".join(DEVICE_OPTIONS)
        raise ValueError(f"{where}: unknown device option {value!r}; valid options: {valid}")
    return cast(DeviceOption, value)


def is_gpu(option: DeviceOption) -> bool:
    """True for the two GPU options."""
    return option != "cpu"
