"""Manual figures: a resident model's calls through `RayBackend`, per GPU slot actor or per task.

A local Ray instance (2 CPUs, 2 logical GPUs, no CUDA needed): one tool on a `ResidentModel`
(a torch MLP of about 33 M parameters, built on the CPU when CUDA is absent) is called
``--calls`` times, one step each, on GPU 0 and then GPU 1, through ``RayBackend()`` (the
actors) and ``RayBackend(model_actors=False)`` (Ray tasks, each worker's own cache). Prints
per call: the latency the record measured, ``loaded``, ``load_ms``, the answering pid.

Run: ``.venv/bin/python scripts/ray_actor_figures.py`` (about a minute). Not part of the
test suite: it starts its own Ray instance.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import ray
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from ray import cloudpickle

from langgraph_devsched import DeviceToolNode, ResidentModel, StepReport
from langgraph_devsched.executors import RayBackend
from langgraph_devsched.schedulers import Batch, Decision, SchedulerBase, SchedulerView

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def build(device: str) -> Any:
    import torch

    torch.set_num_threads(1)
    layers = [torch.nn.Linear(2048, 2048) for _ in range(8)]
    where = device if torch.cuda.is_available() else "cpu"
    return torch.nn.Sequential(*layers).eval().to(where)


MLP = ResidentModel("mlp", build, weights_mb=130)


@tool
def infer(text: str) -> str:
    """Run the MLP once (reports the pid)."""
    import torch

    model = MLP.get()
    with torch.no_grad():
        model(torch.zeros(1, 2048, device=next(model.parameters()).device))
    return str(os.getpid())


class OnGpu(SchedulerBase):
    name = "on_gpu"

    def __init__(self) -> None:
        self.gpu = 0

    def decide(self, batch: Batch, view: SchedulerView) -> Decision:
        ids = [c.call_id for c in batch.calls]
        return self._decision(dict.fromkeys(ids, "gpu_now"), "figures",
                              gpus=dict.fromkeys(ids, self.gpu))


def run(actors: bool, calls: int) -> None:
    reports: list[StepReport] = []
    scheduler = OnGpu()
    backend = RayBackend(model_actors=actors)
    node = DeviceToolNode([infer], hints={"infer": MLP.hints(vram_mb=200)}, backend=backend,
                          scheduler=scheduler, on_step=reports.append)
    app = StateGraph(MessagesState).add_node("tools", node).add_edge(START, "tools").compile()
    for gpu in (0, 1):
        scheduler.gpu = gpu
        for i in range(calls):
            out = app.invoke({"messages": [AIMessage("", tool_calls=[
                {"name": "infer", "args": {"text": "x"}, "id": f"g{gpu}c{i}"}])]})
            record = reports[-1].record
            assert record is not None
            c = record.calls[0]
            print(f"{'actors' if actors else 'tasks ':6} gpu{gpu} call {i + 1}: "
                  f"{c.end_ms - c.start_ms:8.1f} ms  loaded={c.loaded!s:5} "
                  f"load_ms={c.load_ms:7.1f}  device={c.device}  pid={out['messages'][-1].content}")
    node.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    ray.init(num_cpus=2, num_gpus=2, resources={"VRAM_MB": 16000}, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        run(True, args.calls)
        run(False, args.calls)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
