"""Reserve plus release on a GPU slot's ledger: in-process `VramLedger` against the shared
slot ledger actor of ``RayBackend(cluster_slots=True)`` (`executors.ray_ledger`).

Starts a local Ray instance (one logical GPU, 8000 MB of VRAM_MB) and times ``try_reserve``
then ``release`` of a 500 MB call, ``--n`` times each way; prints p50 and p99 in ms.

    PYTHONPATH=. .venv/bin/python scripts/ray_ledger_figures.py --n 2000
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray

from langgraph_devsched.executors.ray_ledger import SlotLedgerClient, close_cluster_slots
from langgraph_devsched.ledger import VramLedger


def timed(ledger: VramLedger, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        res = ledger.try_reserve(500.0, 0.5)
        assert res is not None
        res.release()
        out.append((time.perf_counter() - t) * 1000.0)
    return out


def quantiles(ms: list[float]) -> str:
    cuts = statistics.quantiles(ms, n=100)
    return f"p50 {cuts[49]:.3f} ms, p99 {cuts[98]:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    n = parser.parse_args().n
    ray.init(num_cpus=2, num_gpus=1, resources={"VRAM_MB": 8000}, include_dashboard=False,
             log_to_driver=False, configure_logging=False, object_store_memory=100 * 2**20)
    try:
        node = ray.nodes()[0]["NodeID"]
        shared = SlotLedgerClient(node, 0, 8000.0, "devsched-figures")
        timed(shared, 50)  # warm up the actor
        print(f"in-process VramLedger:        {quantiles(timed(VramLedger(8000.0), n))}")
        print(f"shared slot ledger (actor):   {quantiles(timed(shared, n))}")
        close_cluster_slots("devsched-figures")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
