"""Executor backends: this machine (`LocalBackend`), the simulated testbed, Ray (optional)."""

from langgraph_devsched.executors.base import Backend, PlacementError, PlannedCall, StepExecution
from langgraph_devsched.executors.local import GpuConfig, LocalBackend
from langgraph_devsched.executors.ray_backend import RayBackend, RemoteCallLost
from langgraph_devsched.executors.simulated import SimulatedBackend

__all__ = [
    "Backend",
    "GpuConfig",
    "LocalBackend",
    "PlacementError",
    "PlannedCall",
    "RayBackend",
    "RemoteCallLost",
    "SimulatedBackend",
    "StepExecution",
]
