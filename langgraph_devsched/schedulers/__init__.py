"""Schedulers behind one protocol; `make_scheduler` builds one by name."""

from langgraph_devsched.schedulers.base import (
    Batch,
    CallRequest,
    Decision,
    Scheduler,
    SchedulerBase,
    SchedulerView,
)
from langgraph_devsched.schedulers.classic.static import AllGpuScheduler, StaticHintScheduler
from langgraph_devsched.schedulers.protocols import (
    AsyncScheduler,
    Capabilities,
    SchedulerOptions,
    capabilities,
)
from langgraph_devsched.schedulers.registry import (
    make_scheduler,
    register,
    scheduler_names,
    unregister,
)

__all__ = [
    "AllGpuScheduler",
    "AsyncScheduler",
    "Batch",
    "CallRequest",
    "Capabilities",
    "Decision",
    "Scheduler",
    "SchedulerBase",
    "SchedulerOptions",
    "SchedulerView",
    "StaticHintScheduler",
    "capabilities",
    "make_scheduler",
    "register",
    "scheduler_names",
    "unregister",
]
