"""Hedged calls: one call of a side-effect-free tool run on both sides, answered once.

Three parts, one per place a hedge lives: `settle` (the records: a step that ran each hedged
call twice settled into one answer per call, the outcomes kept), `race` (the node's side: both
runs at once, the first good answer wins, the loser cancelled at its bound) and `simulated`
(the bench's side: hedged steps and idle-time runs on the simulated testbed). When a call is
hedged is the policy's to say (`schedulers/policy/hedge_rule.py`). The names below are the
records' vocabulary, imported from here by the node, the monitor and the schedulers.
"""

from langgraph_devsched.hedging.settle import (
    HEDGE_BOUND,
    HEDGE_SUFFIX,
    HEDGES_KEY,
    HedgeOutcome,
    check_hedges,
    checked_hedges,
    hedge_id,
    hedge_ids,
    hedge_outcomes,
    hedged_calls,
    settle,
)

__all__ = [
    "HEDGES_KEY",
    "HEDGE_BOUND",
    "HEDGE_SUFFIX",
    "HedgeOutcome",
    "check_hedges",
    "checked_hedges",
    "hedge_id",
    "hedge_ids",
    "hedge_outcomes",
    "hedged_calls",
    "settle",
]
