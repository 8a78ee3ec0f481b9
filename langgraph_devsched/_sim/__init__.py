"""The batched simulator's parts; `batchsim.py` (and `testbed.py` through it) is their face.

`physics` (how computing GPU calls slow each other: one small rule per physics),
`residency_rows` (each row's resident model weights: the GPU plan per group of rows) and
`lockstep` (the discrete-event simulation run on every mapping at once, in named steps).
"""
