"""The agentic scheduler: an LLM sub-agent that decides a device option per call.

Where to look: `scheduler` (the decision: probe, cache, consultation, guard, repair),
`modes` (one strategy per consultation mode), `consult` (the consultation loop and the
runner that bounds it), `prompts` (every text the model reads besides observations, the
first messages), `observations` (the monitor's observation tools), `answers` (reading what
the model said), `model` (the chat model, the answer channels), `constraints` (the hard
rules and the repair), `guard`, `cache`, `classical` (the classical policy beside the
model), `record` (what a decision records), `slots` (bounded threads), `config`;
on a machine with several GPUs `gpu_choice` (the answer names the GPU: ``gpu_now@1``) and
`gpu_outcomes` (executed mappings with their GPUs).
"""

from langgraph_devsched.schedulers.agentic.config import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    AgenticNotConfiguredError,
)
from langgraph_devsched.schedulers.agentic.model import openai_model
from langgraph_devsched.schedulers.agentic.prompts import ANSWER_PROMPT, FORCE_PROMPT, SYSTEM_PROMPT
from langgraph_devsched.schedulers.agentic.record import AgenticDecision, ConsultationRecord
from langgraph_devsched.schedulers.agentic.scheduler import AgenticScheduler, make_agentic

__all__ = [
    "ANSWER_PROMPT",
    "ENV_API_KEY",
    "ENV_BASE_URL",
    "ENV_MODEL",
    "FORCE_PROMPT",
    "SYSTEM_PROMPT",
    "AgenticDecision",
    "AgenticNotConfiguredError",
    "AgenticScheduler",
    "ConsultationRecord",
    "make_agentic",
    "openai_model",
]
