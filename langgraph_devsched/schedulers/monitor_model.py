"""Where `schedulers/agentic/guard.py` still imports the policy's latency model from.

The model lives in `schedulers/policy/model.py`; this module goes when the agentic package's
imports name that place.
"""

from langgraph_devsched.schedulers.policy.model import (
    estimate_params,
    oom_detect_ms,
    predict_makespans,
    twin,
)

__all__ = ["estimate_params", "oom_detect_ms", "predict_makespans", "twin"]
