"""The stress harness's live-instance ledger: it finds uncounted, phantom and over-budget weights.

`LiveLedger` must catch each of these on its own (a checker that cannot fail is a defect),
and must stay quiet through an ordinary load, eviction and close of the real `ModelCache`.
"""

from __future__ import annotations

import threading

from langgraph_devsched._dev.stress.live import LiveLedger, LiveModels, LoadPlan, live_backend
from langgraph_devsched.ledger import WeightsNeed


def test_an_instance_the_ledger_does_not_count_is_found_at_the_next_grant() -> None:
    models = LiveModels()
    ledger = LiveLedger(8000, models)
    models.handle("a", 5000).load("fake:0")  # loaded with no weights reserved
    assert any("not counted by the ledger (5000 MB)" in p for p in ledger.problems)
    ledger.problems.clear()
    res = ledger.try_reserve(4000)  # 5000 MB really held + 4000 MB working: over 8000
    assert res is not None
    assert any("9000 MB really held" in p for p in ledger.problems), ledger.problems
    ledger.release(res)
    assert ledger.at_rest_problems() == [
        "live instance(s) ['a'] not resident in the ledger (5000 MB uncounted)"]


def test_weights_with_no_instance_are_phantom_at_rest() -> None:
    models = LiveModels()
    ledger = LiveLedger(8000, models)
    res = ledger.try_hold_weights(WeightsNeed("ghost", 3000))
    assert res is not None
    ledger.release(res)
    assert ledger.problems == []  # reserved before a load: not a problem while it may load
    assert ledger.at_rest_problems() == [
        "resident in the ledger with no instance: ['ghost'] (3000 MB phantom)"]


def test_a_load_in_progress_is_counted_from_its_start() -> None:
    models = LiveModels()
    ledger = LiveLedger(8000, models)
    gate = threading.Event()
    models.plans["slow"] = LoadPlan(gate=gate)
    loader = threading.Thread(target=models.handle("slow", 5000).load, args=("fake:0",))
    loader.start()
    assert models.load_started.wait(5.0)
    ledger.release(ledger.try_reserve(100))  # type: ignore[arg-type]
    assert any("'slow'" in p and "not counted" in p for p in ledger.problems), ledger.problems
    gate.set()
    loader.join(5.0)
    assert models.loading() == 0 and models.live_gpu_mb() == {"slow": 5000.0}


def test_ordinary_loads_evictions_and_close_are_quiet() -> None:
    models = LiveModels()
    backend, ledger = live_backend(models)
    cache = backend.models
    a, b = models.handle("a", 5000), models.handle("b", 4000)
    for handle in (a, b, a):  # b evicts a, then a evicts b
        need = cache.need(handle.name, 5000 if handle is a else 4000, False)
        res = ledger.try_reserve(500, need=need)
        assert res is not None
        cache.drop(res.evicted)
        with cache.scope("fake:0", handle.name, res.evicted, cold=res.loaded):
            handle.get()
        ledger.release(res)
    assert ledger.problems == [] and models.problems == []
    assert ledger.at_rest_problems() == []
    assert models.live_gpu_mb() == {"a": 5000.0}
    backend.close()
    assert ledger.problems == [] and models.live_gpu_mb() == {}
    assert ledger.at_rest_problems() == []


def test_a_failing_load_leaves_no_instance_and_a_double_release_is_named() -> None:
    models = LiveModels()
    models.plans["bad"] = LoadPlan(raises=True)
    handle = models.handle("bad", 1000)
    try:
        handle.load("fake:0")
    except RuntimeError as exc:
        assert "injected load error" in str(exc)
    assert models.failed == 1 and models.held_gpu() == []
    inst = models.handle("ok", 10).load("cpu")
    assert handle.release is not None
    handle.release(inst)
    handle.release(inst)
    assert models.problems == [f"instance ok#{inst.token} released twice"]


def test_an_evicted_instance_counts_once_a_load_starts_beside_it() -> None:
    """The admitting thread frees what its admission evicted before its call runs: that
    window alone is quiet; a load starting while the evicted instance is still there is
    really over the budget."""
    models = LiveModels()
    backend, ledger = live_backend(models)
    cache = backend.models
    a, b = models.handle("a", 5000), models.handle("b", 4000)
    res = ledger.try_reserve(500, need=cache.need("a", 5000, False))
    assert res is not None
    with cache.scope("fake:0", "a", res.evicted, cold=res.loaded):
        a.get()
    ledger.release(res)
    res = ledger.try_reserve(500, need=cache.need("b", 4000, False))
    assert res is not None and res.evicted == ("a",)
    assert ledger.problems == []  # a is evicted, not freed yet: nothing loads beside it
    with cache.scope("fake:0", "b", (), cold=True):
        b.get()  # b loads before a is freed
    assert any("9500 MB really held" in p and "a (evicted)" in p for p in ledger.problems)
    cache.drop(res.evicted)
    ledger.release(res)
    assert models.live_gpu_mb() == {"b": 4000.0}
