"""The default scheduler (registered as ``monitor``) and the parts it is built from.

`scheduler.DefaultPolicy` decides from the calls' hints and the runtime monitor's
observations through a twin of the machine (`model`): it searches the mappings of a batch
(`search`), scores them (`scores`, `first_contact`, `eviction`, `near_tie`), reuses a decision
while its inputs hold (`reuse`), hedges idempotent calls (`hedge_rule`), places calls on several
GPUs (`gpu_placement`, `gpu_fit`) and treats model loads as investments (`investments`,
`rent_or_buy`).
"""
