"""Where `schedulers/agentic/scheduler.py` still imports the static rule from.

The static schedulers live in `schedulers/classic/static.py`; this module goes when the agentic
package's imports name that place.
"""

from langgraph_devsched.schedulers.classic.static import AllGpuScheduler, StaticHintScheduler

__all__ = ["AllGpuScheduler", "StaticHintScheduler"]
