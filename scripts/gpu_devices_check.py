#!/usr/bin/env python3
"""Every visible GPU through the node: one `DeviceToolNode` + `LocalBackend` step per GPU.

    python scripts/gpu_devices_check.py [--declared N] [--json PATH]

On a CUDA machine the backend detects every visible device (``CUDA_VISIBLE_DEVICES`` says
which). For each GPU k a step pins one call to k (``Decision.gpus``): the tool allocates a
tensor of its declared VRAM there and loads a resident model there; the check compares, while
it runs, the ledger of GPU k with ``torch.cuda.memory_allocated(k)`` (the call's tensor and
the model's weights) and that no other GPU's memory moved; after ``close()`` every ledger is
at 0 and every device's allocated memory back at its baseline. One GPU: the one-device path.

``--declared N`` runs the same steps on N declared GPUs (`GpuConfig` list, no CUDA: the
tools allocate nothing and the torch comparisons are skipped); the tests run it that way so
that the script does not rot. Exit status 0 when every check passed, 1 when one failed, 2
when no CUDA device is visible and ``--declared`` is not given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALL_MB, WEIGHTS_MB = 256.0, 512.0
SLACK_MB = 64.0
"""Allocated memory vs the ledger: the caching allocator rounds up, cuBLAS keeps a workspace."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--declared", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph

    from langgraph_devsched import (
        DeviceToolNode,
        GpuConfig,
        LocalBackend,
        ResidentModel,
        current_device,
    )
    from langgraph_devsched.schedulers.base import Batch, Decision, SchedulerBase, SchedulerView
    from langgraph_devsched.telemetry import cuda_device_count

    torch: Any = None
    count = args.declared
    if not count:
        count = cuda_device_count()
        if count == 0:
            print("gpu devices check: no CUDA device visible (use --declared N without one)")
            return 2
        import torch as torch_module

        torch = torch_module
    results: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str) -> None:
        results.append({"check": name, "ok": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")

    def allocated() -> list[float]:
        if torch is None:
            return [0.0] * count
        return [torch.cuda.memory_allocated(i) / 2**20 for i in range(count)]

    def load(device: str) -> Any:
        if torch is None:
            return device
        return torch.ones(int(WEIGHTS_MB * 2**20 / 4), device=device)

    model = ResidentModel("check_model", load=load, weights_mb=WEIGHTS_MB)
    seen: dict[int, dict[str, Any]] = {}
    target = {"gpu": 0}

    @tool
    def work(k: int) -> str:
        """Allocate the call's memory on its device and use the resident model there."""
        device = current_device()
        weights = model.get()
        tensor = None if torch is None else torch.empty(
            int(CALL_MB * 2**20 / 4), device=device)
        seen[k] = {"device": device, "allocated": allocated(),
                   "ledgers": [ledger.in_use_mb for ledger in backend.ledgers]}
        del tensor, weights
        return device

    class OnGpu(SchedulerBase):
        name = "on_gpu"

        def decide(self, batch: Batch, view: SchedulerView) -> Decision:
            return self._decision(dict.fromkeys(batch.call_ids, "gpu_now"), "pinned",
                                  gpus=dict.fromkeys(batch.call_ids, target["gpu"]))

    gpus = [GpuConfig(24000, f"cuda:{i}") for i in range(count)] if args.declared else None
    backend = LocalBackend(gpu=gpus)
    hints = {"work": {"vram_mb": CALL_MB, "model": "check_model", "weights_mb": WEIGHTS_MB}}
    node = DeviceToolNode([work], hints=hints, scheduler=OnGpu(), backend=backend)
    graph = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    check("devices", len(backend.ledgers) == count,
          f"{len(backend.ledgers)} ledger(s) for {count} GPU(s): "
          + ", ".join(f"{d.device} {d.name} {d.budget_mb:.0f} MB"
                      for d in backend.device_state().devices))
    base = allocated()
    for k in range(count):
        target["gpu"] = k
        before = allocated()
        step = AIMessage("", tool_calls=[{"name": "work", "args": {"k": k}, "id": f"c{k}"}])
        answer = graph.invoke({"messages": [step]})["messages"][-1].content
        got = seen.get(k, {})
        check(f"cuda:{k} placement", answer == f"cuda:{k}" and got.get("device") == f"cuda:{k}",
              f"the tool ran on {got.get('device')}, answered {answer!r}")
        ledgers = got.get("ledgers", [])
        want = CALL_MB + WEIGHTS_MB
        check(f"cuda:{k} ledger", len(ledgers) == count and abs(ledgers[k] - want) < 1e-6
              and all(mb == (WEIGHTS_MB if i < k else 0.0) for i, mb in enumerate(ledgers)
                      if i != k),
              f"ledgers while it ran {ledgers} (GPU {k}: its call {CALL_MB:.0f} + weights "
              f"{WEIGHTS_MB:.0f} MB; GPUs before it: their weights)")
        if torch is not None:
            during = got["allocated"]
            grew = during[k] - before[k]
            others = [during[i] - before[i] for i in range(count) if i != k]
            check(f"cuda:{k} memory_allocated", abs(grew - want) <= SLACK_MB
                  and all(abs(mb) <= SLACK_MB for mb in others),
                  f"GPU {k} grew {grew:.0f} MB (ledger {want:.0f}); others {others}")
    node.close()
    check("close", all(ledger.in_use_mb == 0 for ledger in backend.ledgers),
          f"ledgers after close: {[ledger.in_use_mb for ledger in backend.ledgers]}")
    if torch is not None:
        after = allocated()
        check("close frees every device", all(abs(a - b) <= SLACK_MB
                                               for a, b in zip(after, base, strict=True)),
              f"allocated after close {[round(a) for a in after]} MB vs before "
              f"{[round(b) for b in base]} MB")
    failed = [r for r in results if not r["ok"]]
    print(f"gpu devices check: {len(results) - len(failed)}/{len(results)} passed on "
          f"{count} GPU(s){' (declared)' if args.declared else ''}")
    if args.json is not None:
        args.json.write_text(json.dumps({"gpus": count, "checks": results}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
