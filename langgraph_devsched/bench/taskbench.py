"""TaskBench's tool graphs as agent conversations (``devsched bench --taskbench DIR``).

`load_taskbench` reads a TaskBench domain directory in the official format: ``data.json``
(one JSON record a line: ``id``, ``type``, ``n_tools``, ``instruction``, ``task_nodes``,
``task_links``) and ``tool_desc.json`` (``{"nodes": [{"id", "desc", "input-type",
"output-type"}]}``). What the real files hold besides the format is handled and reported:
a record naming a tool the domain lacks is skipped and counted (``skipped``); links given as
node indices, a ``destination`` key instead of ``target``, an ``n_tools`` unlike the node
count, a tool named twice (one node) and a cycle (its closing link dropped, in file order)
are mapped and counted (``mapped``).

A request's **steps** are its tool graph's topological levels: a tool runs once every tool
feeding it has run, the tools of one level are one step's parallel calls (at most
`MAX_STEP_CALLS`; a wider level is cut into several steps).

`taskbench_conversation` draws a **conversation**: 3-15 requests served back to back on one
simulated machine, one round of a ``sequence`` workload. Before each step the idle time of
the agent's LLM turn (0.5-4 s); before a request's first step also the gap since the last
request (0-30 s; none before the first). Each request is a `Request` at its first step,
arriving one LLM turn before it. The scenario's tools are all the domain's tools, each with
its description and the row of a profile table (`bench.taskbench_profiles`). Conversation
``i`` of seed ``S`` (named ``tb-s{S}-{i}``) depends only on (S, i) and the directory.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_devsched.batchsim import PHYSICS
from langgraph_devsched.bench.scenario import Scenario, ScenarioError
from langgraph_devsched.bench.taskbench_profiles import ProfileTable, load_profiles

DATA_FILE = "data.json"
TOOLS_FILE = "tool_desc.json"
MAX_STEP_CALLS = 3
"""The most calls a step holds (a wider level is cut): the whole-run reference simulates
every mapping of a step from every resident-model state."""
_NAME = re.compile(r"^tb-s(-?\d+)-(\d+)$")


@dataclass(frozen=True)
class TaskBenchTool:
    """One tool of the domain (a node of ``tool_desc.json``)."""

    name: str
    description: str
    input_types: tuple[str, ...] = ()
    output_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskBenchRequest:
    """One record of ``data.json``: a user's request and the tool graph that serves it."""

    id: str
    type: str
    instruction: str
    tools: tuple[str, ...]
    """The graph's tools, each once, in the order of ``task_nodes``."""
    links: tuple[tuple[str, str], ...]
    """(source, target) by name, the cycles' closing links dropped."""
    levels: tuple[tuple[str, ...], ...]
    """Topological levels: a tool's is one past the deepest tool feeding it."""

    def steps(self, cap: int = MAX_STEP_CALLS) -> list[list[str]]:
        """The levels as steps of at most ``cap`` calls (a wider level cut in order).

        >>> TaskBenchRequest("r", "dag", "", ("a", "b", "c"), (), (("a", "b", "c"),)).steps(2)
        [['a', 'b'], ['c']]
        """
        return [list(level[k:k + cap]) for level in self.levels
                for k in range(0, len(level), cap)]


@dataclass
class TaskBench:
    """A TaskBench domain as loaded: its tools, its usable requests and what was done to fit
    the format (``skipped``: records left out, by reason; ``mapped``: what was read
    differently from the format, by kind; each a count)."""

    source: str
    tools: dict[str, TaskBenchTool]
    requests: list[TaskBenchRequest]
    skipped: Counter[str] = field(default_factory=Counter)
    mapped: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        """One line: the counts, and every skip and mapping."""
        parts = [f"{self.source}: {len(self.tools)} tools, {len(self.requests)} requests"]
        parts += [f"skipped {n} ({why})" for why, n in sorted(self.skipped.items())]
        parts += [f"mapped {n} ({what})" for what, n in sorted(self.mapped.items())]
        return "; ".join(parts)


def levels_of(nodes: list[str], links: list[tuple[str, str]]) -> tuple[
        tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...], int]:
    """Topological levels of a graph, its links kept, and how many were dropped to break a
    cycle (in order, a link closing a cycle, a self-link included, is dropped).

    >>> levels_of(["a", "b", "c", "d"], [("a", "b"), ("b", "a"), ("a", "c"), ("b", "c")])
    ((('a', 'd'), ('b',), ('c',)), (('a', 'b'), ('a', 'c'), ('b', 'c')), 1)
    """
    feeds: dict[str, list[str]] = {n: [] for n in nodes}
    kept: list[tuple[str, str]] = []
    dropped = 0
    for source, target in dict.fromkeys(links):
        if source == target or _reaches(feeds, target, source):
            dropped += 1
            continue
        feeds[source].append(target)
        kept.append((source, target))
    depth: dict[str, int] = {}

    def level(node: str) -> int:
        if node not in depth:
            depth[node] = max((level(s) + 1 for s, t in kept if t == node), default=0)
        return depth[node]

    count = max((level(n) for n in nodes), default=-1) + 1
    out = tuple(tuple(n for n in nodes if depth[n] == k) for k in range(count))
    return out, tuple(kept), dropped


def _reaches(feeds: dict[str, list[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in feeds[node]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def load_taskbench(path: str | Path) -> TaskBench:
    """Read a TaskBench domain directory (see the module); `ScenarioError` naming the file
    (and the line) for a missing directory or file, a line that is not JSON, or a record or
    tool that lacks a field of the format."""
    folder = Path(path)
    if not folder.is_dir():
        raise ScenarioError(f"TaskBench directory {folder}: no such directory (it holds "
                            f"{DATA_FILE} and {TOOLS_FILE})")
    tools = _tools(folder / TOOLS_FILE)
    bench = TaskBench(str(folder), tools, [])
    data = folder / DATA_FILE
    for number, line in enumerate(_read(data).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"TaskBench file {data}, line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not JSON ({exc.msg})") from None
        request = _request(record, tools, bench, where)
        if request is not None:
            bench.requests.append(request)
    if not bench.requests:
        raise ScenarioError(f"TaskBench file {data}: no usable request "
                            f"({bench.summary()})")
    return bench


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"TaskBench file {path}: missing (a TaskBench directory holds "
                            f"{DATA_FILE} and {TOOLS_FILE})") from None
    except OSError as exc:
        raise ScenarioError(f"TaskBench file {path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"TaskBench file {path}: not UTF-8 text ({exc.reason})") from None


def _tools(path: Path) -> dict[str, TaskBenchTool]:
    try:
        nodes = json.loads(_read(path))["nodes"]
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"TaskBench file {path}: not JSON ({exc.msg}, line "
                            f"{exc.lineno})") from None
    except (KeyError, TypeError):
        raise ScenarioError(f"TaskBench file {path}: expected an object with 'nodes' (a "
                            f"list of {{'id', 'desc', 'input-type', 'output-type'}})") from None
    tools: dict[str, TaskBenchTool] = {}
    for k, node in enumerate(nodes if isinstance(nodes, list) else [None]):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            raise ScenarioError(f"TaskBench file {path}: nodes[{k}] needs 'id' (a tool name) "
                                f"and 'desc'; got {node!r:.80}")
        tools[node["id"]] = TaskBenchTool(
            node["id"], str(node.get("desc", "")), tuple(node.get("input-type") or ()),
            tuple(node.get("output-type") or ()))
    if not tools:
        raise ScenarioError(f"TaskBench file {path}: 'nodes' lists no tool")
    return tools


def _request(record: Any, tools: dict[str, TaskBenchTool], bench: TaskBench,
             where: str) -> TaskBenchRequest | None:
    """One record as a request, or None (skipped and counted in ``bench.skipped``)."""
    fields = ("id", "instruction", "task_nodes", "task_links")
    if not isinstance(record, dict) or any(f not in record for f in fields):
        got = sorted(record) if isinstance(record, dict) else record
        raise ScenarioError(f"{where}: a record needs {', '.join(fields)} (and type, "
                            f"n_tools); got {got!r:.80}")
    try:
        names = [str(n["task"]) for n in record["task_nodes"]]
    except (KeyError, TypeError):
        raise ScenarioError(f"{where}: task_nodes must be a list of {{'task': NAME}}") from None
    if not names:
        bench.skipped["no task_nodes"] += 1
        return None
    if any(n not in tools for n in names):
        bench.skipped[f"names a tool not in {TOOLS_FILE}"] += 1
        return None
    links: list[tuple[str, str]] = []
    for link in record["task_links"] or ():
        pair = _link(link, names, bench)
        if pair is None:
            bench.skipped["a link names no node of its record"] += 1
            return None
        links.append(pair)
    nodes = list(dict.fromkeys(names))
    if len(nodes) < len(names):
        bench.mapped["a tool named twice in a record: one node"] += 1
    if record.get("n_tools") != len(names):
        bench.mapped["n_tools unlike the node count: the nodes kept"] += 1
    levels, kept, dropped = levels_of(nodes, links)
    if dropped:
        bench.mapped["link closing a cycle (or a self-link) dropped"] += dropped
    return TaskBenchRequest(str(record["id"]), str(record.get("type", "")),
                            str(record["instruction"]), tuple(nodes), kept, levels)


def _link(link: Any, names: list[str], bench: TaskBench) -> tuple[str, str] | None:
    """A link's (source, target) by name, or None (it names no node of the record)."""
    if not isinstance(link, dict):
        return None
    if "target" not in link and "destination" in link:
        bench.mapped["link key 'destination' read as 'target'"] += 1
        link = {**link, "target": link["destination"]}
    pair = []
    for key in ("source", "target"):
        value = link.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(names):
                return None
            bench.mapped["link end given as a node index: mapped to its name"] += 1
            value = names[value]
        if not isinstance(value, str) or value not in names:
            return None
        pair.append(value)
    return pair[0], pair[1]


# --- conversations ---------------------------------------------------------------------------

REQUESTS = (3, 15)
"""The requests of a conversation (one GPU)."""
GPU_REQUESTS = (2, 4)
"""The requests of a conversation on two GPUs (every placement of every state is simulated
for the whole-run reference: `bench.horizon_gpus`)."""
MODELS = {1: 3, 2: 2}
"""The most tools (each its own model) a conversation uses, per GPU count: the whole-run
reference searches every load of every model into every idle time, so its states grow
with them. Requests that would exceed it are passed over."""
GPU_STEPS = 8
"""The most steps of a conversation on two GPUs."""
TWO_GPUS_SHARE = 0.25
BUDGETS_MB = (8000.0, 12000.0, 16000.0, 24000.0)
CORES = (4, 8, 16)
THINK_MS = (500.0, 4000.0)
"""The agent's LLM turn before a step."""
GAP_MS = (0.0, 30000.0)
"""The idle time between two requests (beyond the next one's first LLM turn)."""
SERVER_SHARE = 0.3
"""The share of machines with an LLM server beside (4-6 GB, a fifth of the GPU)."""


def parse_taskbench_name(name: str) -> tuple[int, int] | None:
    """``(seed, index)`` of a conversation's name, or None.

    >>> parse_taskbench_name("tb-s1-3"), parse_taskbench_name("gen-s1-3")
    ((1, 3), None)
    """
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def taskbench_conversations(bench: TaskBench, n: int, seed: int,
                            profiles: ProfileTable | None = None) -> list[Scenario]:
    """Conversations 0 to ``n - 1`` of seed ``seed`` (see `taskbench_conversation`)."""
    if n < 1:
        raise ValueError(f"--conversations takes a count >= 1, got {n}")
    table = profiles if profiles is not None else load_profiles()
    return [taskbench_conversation(bench, seed, i, table) for i in range(n)]


def taskbench_conversation(bench: TaskBench, seed: int, index: int,
                           profiles: ProfileTable | None = None) -> Scenario:
    """Conversation ``index`` of seed ``seed``, named ``tb-s{seed}-{index}`` (see the
    module); `ScenarioError` naming the tools ``profiles`` (default: the packaged table)
    lacks."""
    table = profiles if profiles is not None else load_profiles()
    table.check(bench.tools, where=f"TaskBench directory {bench.source}")
    rng = random.Random(f"devsched-taskbench:{seed}:{index}")
    testbed, gpus = _machine(rng, index)
    low, high = REQUESTS if gpus == 1 else GPU_REQUESTS
    picked = _requests(rng, bench, rng.randint(low, high), MODELS[gpus],
                       GPU_STEPS if gpus > 1 else None)
    batches: list[list[str]] = []
    idle: list[float] = []
    requests: list[dict[str, Any]] = []
    for r in picked:
        turn = round(rng.uniform(*THINK_MS), 1)
        gap = round(rng.uniform(*GAP_MS), 1) if batches else 0.0
        requests.append({"step": len(batches), "text": r.instruction, "tools": list(r.tools),
                         "arrival_ms": turn, "name": r.id})
        for k, step in enumerate(r.steps()):
            idle.append(round(gap + turn, 1) if k == 0 else round(rng.uniform(*THINK_MS), 1))
            batches.append(step)
    return Scenario.model_validate({
        "name": f"tb-s{seed}-{index}",
        "category": "residency",
        "description": f"TaskBench conversation {index} of seed {seed}: {len(requests)} "
                       f"requests of {bench.source} (bench.taskbench)",
        "testbed": testbed,
        "tools": {name: {"params": _params(table, name),
                         "description": tool.description}
                  for name, tool in bench.tools.items()},
        "workload": {"kind": "sequence", "batches": batches, "rounds": 1, "idle_ms": idle,
                     "requests": requests},
    })


def _requests(rng: random.Random, bench: TaskBench, count: int, models: int,
              max_steps: int | None) -> list[TaskBenchRequest]:
    """Up to ``count`` requests in a random order, passing over any that would take the
    conversation's tools beyond ``models`` (or its steps beyond ``max_steps``)."""
    picked: list[TaskBenchRequest] = []
    tools: set[str] = set()
    steps = 0
    for r in rng.sample(bench.requests, len(bench.requests)):
        more = len(r.steps())
        if len(tools | set(r.tools)) <= models and (max_steps is None
                                                    or steps + more <= max_steps):
            picked.append(r)
            tools |= set(r.tools)
            steps += more
            if len(picked) == count:
                break
    return picked


def _params(table: ProfileTable, tool: str) -> dict[str, Any]:
    """A tool's params from the table: every tool keeps its model, called or not, so a load
    on a wrong forecast takes room as it would (the references load only models a later
    step uses: `bench.horizon_gpus.later_models`)."""
    return table.tools[tool].model_dump(exclude_defaults=True)


def _machine(rng: random.Random, index: int) -> tuple[dict[str, Any], int]:
    """A testbed (one GPU, or two of their own budgets) and its GPU count."""
    count = 2 if rng.random() < TWO_GPUS_SHARE else 1
    budgets = [rng.choice(BUDGETS_MB) for _ in range(count)]
    server = rng.random() < SERVER_SHARE and budgets[0] >= 12000
    background = ({"vram_mb": rng.choice((4000.0, 5000.0, 6000.0)), "gpu_share": 0.2}
                  if server else {})
    physics = "processor_sharing" if rng.random() < 0.7 else rng.choice(PHYSICS)
    testbed: dict[str, Any] = {"cpu_cores": rng.choice(CORES), "physics": physics,
                               "seed": index}
    if count == 1:
        testbed.update(vram_budget_mb=budgets[0], background=background)
    else:
        testbed["gpus"] = [{"vram_mb": mb, "name": f"gpu{k}",
                            **({"background": background} if k == 0 and server else {})}
                           for k, mb in enumerate(budgets)]
    return testbed, count


__all__ = [
    "MAX_STEP_CALLS",
    "TaskBench",
    "TaskBenchRequest",
    "TaskBenchTool",
    "levels_of",
    "load_taskbench",
    "parse_taskbench_name",
    "taskbench_conversation",
    "taskbench_conversations",
]
