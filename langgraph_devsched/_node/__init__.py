"""The node's private helpers: only `node.py` and `middleware.py` import these.

`planning` (which calls form a step, its one checked decision), `call_runner` (one call under
its placement), `lean_step` (a step of plain CPU calls run without placement or ledger),
`idle` (idle-time calibration runs), `checks` (the node's arguments checked), `aio`
(sync/async bridges) and `step_text` (a step report as text). A hedged call's race is in
`hedging/race.py`, beside the settling it feeds.
"""
