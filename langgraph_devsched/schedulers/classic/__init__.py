"""The classical schedulers the default is measured against: static rules, HEFT, StarPU's dmda,
UCB1 bandits and the brute-force oracle.

Each is one module registered by one line in `schedulers.registry`; a new one is a module
plus a `register()` call.
"""
