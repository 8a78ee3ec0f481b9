"""Loads as investments, for a policy: each model's economics, the loads worth buying in a
step, and the loads worth running between steps.

A policy feeds `Investments` what it sees (`note`: a batch's models and the policy's own
cost estimates; `paid`: an executed step) and asks two questions:

* `to_buy`: which cold models of a batch the rent-or-buy rule (`rent_or_buy.buy`, with the
  use forecast of `monitor.forecast`) says to load now, although the step alone does not
  repay the load. The policy then prices their load as already repaid.
* `preloads`: between two steps (the agent's LLM thinks for seconds), which models to load
  on which GPU so the next step finds them warm: a model the forecast expects, whose load
  fits in the idle time, that saves time warm, on a GPU with room or with room after
  evicting only idle models worth less (`rent_or_buy.worth_ms`). Such a load costs device
  time, not the user's.

Every table is bounded (`MAX_MODELS`).

>>> from langgraph_devsched.telemetry import DeviceState
>>> inv = Investments()
>>> inv.note({"sst": 2}, {"sst": Economics(saving_ms=112, load_ms=800, weights_mb=6000)})
>>> device = DeviceState(True, "gpu", 16000, 0, 0.0, 8)
>>> [(p.model, p.gpu) for p in inv.preloads(device, idle_ms=3000)]
[('sst', 0)]
>>> inv.preloads(device, idle_ms=500)   # the load would not end before the next step
[]
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from langgraph_devsched.hints import ToolDeviceSpec
from langgraph_devsched.monitor.forecast import UseForecast
from langgraph_devsched.options import is_gpu
from langgraph_devsched.residency import WarmModel
from langgraph_devsched.schedulers.base import Batch, CallRequest, Preload
from langgraph_devsched.schedulers.lru import LruTable
from langgraph_devsched.schedulers.policy.foresight import Foresight
from langgraph_devsched.schedulers.policy.rent_or_buy import TRUST, buy, worth_ms
from langgraph_devsched.telemetry import DeviceState, GpuDevice
from langgraph_devsched.testbed import ToolParams

MAX_MODELS = 64
"""At most this many models' economics are remembered."""
DECLARED_USES = 0.5
"""The uses a declared model never used yet is expected to have over the coming steps (a
prior: the app declared the tool because it calls it), what warming it is worth."""
MAX_PRELOADS = 1
"""At most this many loads between two steps, one after another (the bench's whole-run
reference searches the same)."""


@dataclass(frozen=True)
class Economics:
    """What one model's warm GPU copy saves, as the policy estimates it."""

    saving_ms: float
    """Per use: the best cold side's cost less a warm GPU call's."""
    load_ms: float
    """Its GPU load time."""
    weights_mb: float
    working_mb: float = 0.0
    """The working memory of its calls (the largest)."""
    gpus: tuple[int, ...] | None = None
    """The GPUs its tools may run on (None: any)."""
    cpu_load_ms: float = 0.0
    """Its load time into host memory (what a cold CPU call waits for)."""
    per_tool: tuple[tuple[str, float], ...] = ()
    """Each tool's own saving per use (the tools that share the model each have theirs)."""


def economics(batch: Batch, params: Mapping[str, ToolParams],
              known: Callable[[CallRequest], bool]) -> dict[str, Economics]:
    """Each model's economics from a policy's estimated parameters of ``batch``'s tools:
    only models whose every call may run on the GPU and is ``known`` (both sides measured
    or declared), the saving per use averaged over its calls."""
    calls: dict[str, list[CallRequest]] = {}
    for call in batch.calls:
        model = call.spec.model_name(call.tool)
        if model is not None:
            calls.setdefault(model, []).append(call)
    out = {}
    for model, used in calls.items():
        if not all(known(c) and any(is_gpu(o) for o in c.spec.allowed_options())
                   for c in used):
            continue
        ps = [params[c.tool] for c in used]
        # a warm copy never forces a call onto the GPU: a call faster cold saves nothing
        savings = [max(0.0, p.cpu_ms - p.gpu_ms - p.transfer_ms) for p in ps]
        gpus = used[0].spec.gpus
        out[model] = Economics(saving_ms=sum(savings) / len(savings),
                               load_ms=ps[0].load_gpu_ms, weights_mb=ps[0].weights_mb,
                               working_mb=max(p.vram_mb for p in ps), gpus=gpus,
                               cpu_load_ms=ps[0].load_cpu_ms,
                               per_tool=tuple(dict(zip((c.tool for c in used), savings,
                                                       strict=True)).items()))
    return out


@dataclass
class _Rent:
    paid_ms: float = 0.0


@dataclass
class Investments:
    """A policy's view of its models' loads (see the module)."""

    trust: float = TRUST
    forecast: UseForecast = field(default_factory=UseForecast)
    _economics: LruTable[str, Economics] = field(
        default_factory=lambda: LruTable[str, Economics](MAX_MODELS))
    _rent: LruTable[str, _Rent] = field(default_factory=lambda: LruTable[str, _Rent](MAX_MODELS))
    _declared: dict[str, Economics] = field(default_factory=dict)
    """Models the app declared (at most `MAX_MODELS`), for warming before a first use."""
    _tool_gpus: dict[str, dict[str, tuple[int, ...] | None]] = field(default_factory=dict)
    """Per declared model, the GPUs each declared tool of it may run on (None: any)."""
    think_ms: float = 0.0
    """The idle time between two steps, as last seen (`preloads`' ``idle_ms``)."""
    crowded: frozenset[str] = frozenset()
    """Models whose calls shared their GPU with other calls in the last executed step
    (`crowd`): a host copy lets such a call run on the CPU beside the GPU's queue."""
    foresight: Foresight = field(default_factory=Foresight)
    """The latest forecast from words (the user's request), and how far it earned belief."""

    def __len__(self) -> int:
        return len(self._economics)

    def note(self, uses: Mapping[str, int],
             economics: Mapping[str, Economics] | None = None) -> None:
        """One decided step: its models' uses (model -> calls), and their economics where
        known (`learn`)."""
        self.forecast.step(uses)
        self.foresight.step(m for m, n in uses.items() if n > 0)
        self.learn(economics or {})

    def learn(self, economics: Mapping[str, Economics]) -> None:
        """The policy's current estimates of these models' economics. A model that several
        declared tools share saves, per use, the mean of its tools' savings (the measured
        ones where known): a use is as likely any of them."""
        for model, eco in economics.items():
            declared = self._declared.get(model)
            if declared is not None and declared.per_tool:
                tools = dict(declared.per_tool) | dict(eco.per_tool)
                eco = dataclasses.replace(eco, saving_ms=sum(tools.values()) / len(tools),
                                          per_tool=tuple(tools.items()))
            self._economics[model] = eco

    def declare(self, specs: Mapping[str, ToolDeviceSpec]) -> None:
        """The app's tools as declared (the node knows them all before any step): the
        models whose profile and load times are declared can be warmed while the machine is
        idle before their first use (`preloads`); what a step measures replaces them."""
        self.foresight.declare({tool: spec.model_name(tool) for tool, spec in specs.items()})
        for tool, spec in specs.items():
            model = spec.model_name(tool)
            profile, load = spec.profile, spec.load_ms
            if (model is None or profile is None or profile.cpu_ms is None
                    or profile.gpu_ms is None or load is None or load.gpu_ms is None
                    or (model not in self._declared and len(self._declared) >= MAX_MODELS)):
                continue
            saving = max(0.0, profile.cpu_ms - profile.gpu_ms)
            known = self._declared.get(model)
            tools = (dict(known.per_tool) if known else {}) | {tool: saving}
            if len(tools) > MAX_MODELS:
                continue
            reach = self._tool_gpus.setdefault(model, {})
            reach[tool] = tuple(spec.gpus) if spec.gpus is not None else None
            self._declared[model] = Economics(
                saving_ms=sum(tools.values()) / len(tools), load_ms=load.gpu_ms,
                weights_mb=spec.weights_mb, working_mb=max(
                    spec.vram_mb or 0.0, known.working_mb if known else 0.0),
                gpus=_union(reach.values()), cpu_load_ms=load.cpu_ms or 0.0,
                per_tool=tuple(tools.items()))

    def economics(self, model: str) -> Economics | None:
        return self._economics.get(model)

    def expect(self, probabilities: Mapping[str, float]) -> None:
        """A forecast from words (tool -> probability that the coming work calls it): see
        `foresight`. The models the monitor's forecast expects are those its misses are
        counted over."""
        self.foresight.expect(probabilities, in_play=self.forecast.models())

    def prior(self, model: str) -> float:
        """The uses a model never used yet is expected to have over the coming steps: what
        the forecast from words in force believes (`Foresight.uses`: high where it predicts
        the model, low where not, as its record allows), else `DECLARED_USES`."""
        said = self.foresight.uses(model)
        return DECLARED_USES if said is None else said

    def yields(self, model: str, *, idle_ms: float) -> float:
        """What evicting idle ``model`` to make room for a model the forecast from words
        predicts gives up (`lost`): cheaper where the forecast does not predict it, by
        half at most, less as its belief in a use grows."""
        lost = self.lost(model, idle_ms=idle_ms)
        said = self.foresight.uses(model)
        if said is None or self.foresight.predicts(model):
            return lost
        return lost * (0.5 + 0.5 * min(1.0, 2 * said))

    def worth(self, model: str) -> float:
        """What keeping ``model`` resident is worth to the coming steps (0: unknown): its
        forecast uses' savings; where the forecast from words in force predicts it, at least
        one use at its belief (`Foresight.uses`)."""
        eco = self._economics.get(model)
        if eco is None:
            return 0.0
        worth = worth_ms(saving_ms=eco.saving_ms, coming_uses=self.forecast.coming(model))
        if self.foresight.predicts(model):
            return max(worth, max(0.0, eco.saving_ms) * (self.foresight.uses(model) or 0.0))
        return worth

    def paid(self, uses: Iterable[tuple[str, bool]]) -> None:
        """An executed step's calls on models: (model, ran on a GPU, warm or loaded there).
        A call served off the GPU pays its saving as rent; a GPU call resets it (the model
        was bought, or was already there)."""
        for model, on_gpu in uses:
            eco = self._economics.get(model)
            if eco is None:
                continue
            rent = self._rent.setdefault_with(model, _Rent)
            if on_gpu:
                rent.paid_ms = 0.0
            else:
                rent.paid_ms += max(0.0, eco.saving_ms)

    def crowd(self, models: Iterable[str]) -> None:
        """The models whose GPU calls shared their GPU in the step just executed."""
        self.crowded = frozenset(itertools.islice(models, MAX_MODELS))

    def to_buy(self, cold: Iterable[str]) -> set[str]:
        """Of these models (cold on every GPU), those whose load the rule buys now."""
        out = set()
        for model in cold:
            eco = self._economics.get(model)
            rent = self._rent.get(model)
            if eco is None or rent is None:
                continue
            if buy(price_ms=eco.load_ms, rent_paid_ms=rent.paid_ms, saving_ms=eco.saving_ms,
                   coming_uses=self.forecast.coming(model), trust=self.trust):
                out.add(model)
        return out

    def preloads(self, device: DeviceState, idle_ms: float) -> list[Preload]:
        """The loads to run in ``idle_ms`` of idle time before the next step (see the
        module), one after another, most gain first.

        A GPU load's gain is what the next step saves with the model warm (its forecast
        uses next times its saving). Evicting an idle model loses the same figure for it
        when its own load also fits in an idle time (it can come back before it is needed
        again), else its whole worth; a load evicts only models that lose less. A model
        expected next whose calls are better served on the CPU (warm there), or that gets
        no GPU, loads into host memory instead, so that its first CPU call does not wait
        for it."""
        self.think_ms = max(0.0, idle_ms)
        if idle_ms <= 0 or not device.devices:
            return []
        gpus = {g.index: _Room(g) for g in device.devices}
        host = {w.model for w in device.resident if w.side == "cpu"}
        busy = 0.0
        candidates = dict.fromkeys((*self.forecast.models(), *(
            m for m in self.foresight.predicted() if m in self._economics)))
        wanted = sorted(((self.gain(m), m) for m in candidates
                         if not any(r.holds(m) for r in gpus.values())), reverse=True)
        # a declared model never used yet, worth more to warm than a forecast one, goes first
        warm = self._warm_ups({g.index: _Room(g) for g in device.devices}, host, idle_ms, 1,
                              set())
        first = warm[0].worth_ms if warm and warm[0].side == "gpu" else 0.0
        out: list[Preload] = []
        for gain, model in wanted:
            eco = self._economics.get(model)
            if eco is None or gain <= 0 or gain < first or len(out) >= MAX_PRELOADS:
                continue
            if busy + eco.load_ms > idle_ms:
                continue
            lost = functools.partial(self.lost, idle_ms=idle_ms)
            best: tuple[tuple[float, float], Preload] | None = None
            for index, room in gpus.items():
                if eco.gpus is not None and index not in eco.gpus:
                    continue
                evict = room.evictions(eco.weights_mb + eco.working_mb, gain, lost)
                if evict is None:
                    continue
                key = (sum(lost(m) for m in evict), -room.free_mb)
                if best is None or key < best[0]:
                    best = key, Preload(model, index, eco.load_ms, gain, evict)
            if best is not None:
                chosen = best[1]
                gpus[chosen.gpu].add(chosen, eco.weights_mb)
                busy += chosen.load_ms
                out.append(chosen)
        if self.foresight.active and first > 0:  # a predicted model's warm-up on a GPU is
            # worth more than host copies of models the monitor's forecast expects
            out += self._warm_ups(gpus, host, idle_ms - busy, MAX_PRELOADS - len(out),
                                  {p.model for p in out})
        out += self._host_loads(gpus, host, idle_ms - busy, MAX_PRELOADS - len(out),
                                on_gpu=False)
        left = idle_ms - sum(p.load_ms for p in out)  # one after another
        out += self._warm_ups(gpus, host, left, MAX_PRELOADS - len(out), {p.model for p in out})
        left = idle_ms - sum(p.load_ms for p in out)
        # last, with what is left: a host copy of a model warm on a GPU whose calls shared
        # it (queued, memory bound), so that such a call can run on the CPU beside them
        return out + self._host_loads(gpus, host, left, MAX_PRELOADS - len(out), on_gpu=True)

    def _host_loads(self, gpus: dict[int, _Room], host: set[str], idle_ms: float, most: int,
                    *, on_gpu: bool) -> list[Preload]:
        """Host loads of models the forecast expects next, not in host memory, whose load
        fits in ``idle_ms``, at most ``most``: of models warm on a GPU whose calls shared it
        in the last step (``on_gpu``, `crowded`), or of the others (what runs on the CPU
        next: its first CPU call does not wait for the load)."""
        out: list[Preload] = []
        for model in self.forecast.models():
            eco = self._economics.get(model)
            if (eco is None or model in host or len(out) >= most
                    or eco.cpu_load_ms <= 0 or eco.cpu_load_ms > idle_ms
                    or self.forecast.next_rate(model) <= 0
                    or on_gpu != (eco.saving_ms > 0
                                  and any(r.holds(model) for r in gpus.values()))
                    or (on_gpu and model not in self.crowded)):
                continue
            out.append(Preload(model, 0, eco.cpu_load_ms,
                               eco.cpu_load_ms * min(1.0, self.forecast.next_rate(model)),
                               side="cpu"))
            idle_ms -= eco.cpu_load_ms
        return out

    def background(self, device: DeviceState, *, busy_gpus: Iterable[int],
                   beside_mb: Mapping[int, float], step_ms: float,
                   renting: Mapping[str, int], loading: Iterable[str] = ()) -> list[Preload]:
        """The load to start with a step, beside its calls, so the next steps find the
        model warm (at most `MAX_PRELOADS`): ``step_ms`` is the step's predicted makespan,
        ``renting`` its calls served cold (model -> calls), ``loading`` the models its GPU
        calls use (warm or loaded by the step: never loaded again). On a GPU the step uses
        (``busy_gpus``) the load evicts nothing and needs free room for its weights beside
        the working memory ``beside_mb`` names for that GPU (its index -> MB; a busy GPU it
        does not name: unknown, so no load there), and room for its own calls' working
        memory later (else its first call evicts what the step keeps warm).

        The load runs while the step runs and then while the agent thinks (`think_ms`, the
        idle time last seen); what it takes beyond both delays the next step. That delay is
        the load's price in the user's time, bought by the rent-or-buy rule with the rent
        this step pays included (`buy`). A load the think time alone holds is left to the
        loads between steps (`preloads`: chosen once the step's outcome is known). A load
        that ends in time costs only what it evicts,
        and is worth what the model's forecast uses save (`worth`). A declared model never
        used yet is worth its prior (`prior`), loads only into free room, and delays
        the next step by at most ``trust`` times that worth."""
        busy = set(busy_gpus)
        best: tuple[float, Preload] | None = None
        rooms = {g.index: _Room(g) for g in device.devices
                 if g.index not in busy or g.index in beside_mb}
        window = step_ms + self.think_ms
        skip = set(loading)
        forecast = self.forecast.models()
        for model in dict.fromkeys((*forecast, *self._declared)):  # each model once
            if model in skip or any(r.holds(model) for r in rooms.values()):
                continue
            used = model in forecast
            eco = self._economics.get(model) if used else self._declared.get(model)
            if eco is None or eco.saving_ms <= 0 or eco.load_ms <= self.think_ms:
                continue  # a load the think time holds is chosen between steps, knowing more
            delay = max(0.0, eco.load_ms - window)
            gain = 0.0
            if used:
                rent = self._rent.get(model)
                paid = (rent.paid_ms if rent else 0.0) + eco.saving_ms * renting.get(model, 0)
                gain = self.worth(model)
                if not buy(price_ms=delay, rent_paid_ms=paid, saving_ms=eco.saving_ms,
                           coming_uses=self.forecast.coming(model), trust=self.trust):
                    continue
            else:  # never used yet: its prior worth, and a delay only its trusted part repays
                # beside a step: the load serves the steps after this request too, which a
                # forecast of this request does not speak for
                gain = eco.saving_ms * max(DECLARED_USES, self.prior(model))
                if delay > self.trust * gain:
                    continue
            for index, room in rooms.items():
                if eco.gpus is not None and index not in eco.gpus:
                    continue
                if index in busy:  # beside the step's calls: free room only, and room for
                    # its own calls later without evicting what the step keeps warm
                    fits = eco.weights_mb + max(beside_mb[index], eco.working_mb) <= room.free_mb
                    evict: tuple[str, ...] | None = () if fits else None
                elif used:  # never a model the next step is expected to use
                    evict = room.evictions(eco.weights_mb + eco.working_mb, gain, lambda m: (
                        math.inf if self.forecast.next_rate(m) > 0 else self.worth(m)))
                else:
                    evict = () if eco.weights_mb + eco.working_mb <= room.free_mb else None
                if evict is None:
                    continue
                net = gain - delay - sum(self.worth(m) for m in evict)
                if best is None or net > best[0]:
                    best = net, Preload(model, index, eco.load_ms, gain, evict)
        return [best[1]] if best is not None else []

    def unreached(self, model: str, gpus: Mapping[int, _Room]) -> list[tuple[int, ...] | None]:
        """The GPUs allowed to each declared tool of ``model`` that can reach no GPU holding
        it (None: any GPU); one entry per such tool. A model warm on a GPU its tool may not
        run on is cold for that tool: a model shared by a tool pinned to GPU 1 and one pinned
        to GPUs 2-3, warm on GPU 1 only, left the second to load it on its first call
        (2.1 s of a 1.5 s whole-run reference, gen-s2-93)."""
        held = {i for i, r in gpus.items() if r.holds(model)}
        tools = self._tool_gpus.get(model, {})  # filled with `_declared`, by `declare`
        return [allowed for allowed in tools.values()
                if not held & (set(gpus) if allowed is None else set(allowed))]

    def _warm_ups(self, gpus: dict[int, _Room], host: set[str], idle_ms: float, most: int,
                  planned: set[str]) -> list[Preload]:
        """Declared models, warmed with what idle time and room are left, most worth first
        (`first_use_ms` at their `prior`):
        one never used yet onto a GPU with free room (evicting nothing) where warm GPU calls
        save time, else into host memory; and a model warm on some GPU that a declared tool
        of it cannot reach there (`unreached`: its ``gpus`` hint excludes them) onto a GPU
        that tool may run on, with free room. Among the GPUs that fit, the one the most such
        tools may use, then the fastest, then the freest."""
        out: list[Preload] = []
        for model, eco in sorted(self._declared.items(),
                                 key=lambda kv: -first_use_ms(kv[1]) * self.prior(kv[0])):
            if len(out) >= most or model in planned:
                continue
            held = any(r.holds(model) for r in gpus.values())
            if model in self.forecast.models() and not held:
                continue  # used and cold: the forecast's loads (`preloads`) decide
            tools = self.unreached(model, gpus)  # held nowhere: every declared tool of it
            if not tools:
                continue
            reach = {i: sum(1 for allowed in tools if allowed is None or i in allowed)
                     for i in gpus}
            gain = first_use_ms(eco) * self.prior(model)
            need = eco.weights_mb + eco.working_mb
            evict: dict[int, tuple[str, ...]] = {}
            for i, r in gpus.items():
                if reach[i] <= 0:
                    continue
                if need <= r.free_mb:
                    evict[i] = ()
                elif self.foresight.predicts(model):
                    # predicted from words: idle models worth less may make room
                    made = r.evictions(need, gain,
                                       functools.partial(self.yields, idle_ms=idle_ms))
                    if made is not None:
                        evict[i] = made
            room = max((gpus[i] for i in evict), key=lambda r: (
                -len(evict[r.gpu.index]), reach[r.gpu.index], r.gpu.speed, r.free_mb),
                default=None)
            if eco.saving_ms > 0 and room is not None and eco.load_ms <= idle_ms:
                chosen = Preload(model, room.gpu.index, eco.load_ms, gain,
                                 evict[room.gpu.index])
                room.add(chosen, eco.weights_mb)
            elif not held and model not in host and 0 < eco.cpu_load_ms <= idle_ms:
                chosen = Preload(model, 0, eco.cpu_load_ms, 0.0, side="cpu")
            else:
                continue
            out.append(chosen)
            idle_ms -= chosen.load_ms
        return out

    def gain(self, model: str) -> float:
        """What the next step saves with ``model`` warm (0: unknown): its forecast uses
        next, or, where the forecast from words predicts it, its hit rate if more."""
        eco = self._economics.get(model)
        if eco is None:
            return 0.0
        uses = self.forecast.next_rate(model)
        if self.foresight.predicts(model):
            uses = max(uses, self.foresight.uses(model) or 0.0)
        return max(0.0, eco.saving_ms) * uses

    def lost(self, model: str, *, idle_ms: float) -> float:
        """What evicting idle ``model`` now costs (see `preloads`)."""
        eco = self._economics.get(model)
        if eco is None:
            return 0.0
        return self.gain(model) if eco.load_ms <= idle_ms else self.worth(model)


@dataclass
class _Room:
    """One GPU's room as the preloads planned so far leave it."""

    gpu: GpuDevice
    busy_ms: float = 0.0
    added: list[WarmModel] = field(default_factory=list)
    gone: set[str] = field(default_factory=set)

    @property
    def resident(self) -> list[WarmModel]:
        return [w for w in (*self.gpu.resident, *self.added) if w.model not in self.gone]

    @property
    def free_mb(self) -> float:
        return self.gpu.budget_mb - self.gpu.used_mb - sum(w.weights_mb for w in self.resident)

    def holds(self, model: str) -> bool:
        return any(w.model == model for w in self.resident)

    def evictions(self, need_mb: float, worth: float,
                  worth_of: Callable[[str], float]) -> tuple[str, ...] | None:
        """The idle models to evict, least ``worth_of`` first, each under ``worth``, so that
        ``need_mb`` fits; None when that cannot make room."""
        free = self.free_mb
        if need_mb <= free:
            return ()
        added = {w.model for w in self.added}
        candidates = sorted((worth_of(w.model), i, w) for i, w in enumerate(self.resident)
                            if not w.keep_warm and w.in_use == 0 and w.model not in added)
        evict: list[str] = []
        for v, _, w in candidates:
            if v >= worth or free >= need_mb:
                break
            evict.append(w.model)
            free += w.weights_mb
        return tuple(evict) if free >= need_mb else None

    def add(self, preload: Preload, weights_mb: float) -> None:
        self.busy_ms += preload.load_ms
        self.gone.update(preload.evict)
        self.added.append(WarmModel(preload.model, weights_mb))


def first_use_ms(eco: Economics) -> float:
    """What a model warm before its first use saves that use at most: a cold first call
    either loads the model inside its step (it waits ``load_ms``) or runs on the CPU (it
    loses ``saving_ms``), whichever costs less. A warm-up is worth that, not the saving of
    every later use: once loaded, the later uses are warm either way. (A diffusion model
    saving 117 s a use on the CPU but loading in 1.4 s is worth 1.4 s warm, not 117 s.)

    >>> first_use_ms(Economics(saving_ms=117_000, load_ms=1_370, weights_mb=4_000))
    1370
    >>> first_use_ms(Economics(saving_ms=280, load_ms=740, weights_mb=1_500))
    280
    """
    return min(eco.saving_ms, eco.load_ms)


def _union(allowed: Iterable[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    """The GPUs any of several tools may run on (None: one of them may run on any).

    >>> _union([(1,), (2, 3)]), _union([(1,), None])
    ((1, 2, 3), None)
    """
    out: set[int] = set()
    for gpus in allowed:
        if gpus is None:
            return None
        out.update(gpus)
    return tuple(sorted(out))
