"""The simulated testbed: exact virtual times for contention, queueing and OOM."""

import pytest

from langgraph_devsched import SimulatedTestbed, ToolParams
from langgraph_devsched.testbed import BackgroundLoad
from tests.fakes import PARAMS


def bed(**kw: object) -> SimulatedTestbed:
    return SimulatedTestbed(PARAMS, vram_budget_mb=kw.pop("vram", 4000), cpu_cores=4, **kw)  # type: ignore[arg-type]


def test_solo_gpu_call_pays_transfer_then_compute():
    out = bed().run_step([("a", "asr", "gpu_now")])
    (rec,) = out.calls
    assert (rec.device, rec.fallback, rec.start_ms, rec.end_ms) == ("cuda:0", None, 0.0, 70.0)


def test_gpu_sharing_slows_every_computing_call_by_total_demand():
    two = {
        "a": ToolParams(cpu_ms=1000, gpu_ms=100, gpu_share=0.75),
        "b": ToolParams(cpu_ms=1000, gpu_ms=100, gpu_share=0.75),
    }
    tb = SimulatedTestbed(two, vram_budget_mb=1000, cpu_cores=4)
    out = tb.run_step([("1", "a", "gpu_now"), ("2", "b", "gpu_now")])
    # demand 1.5 > 1: both progress at 1/1.5 until done together at 150 ms
    assert [c.end_ms for c in out.calls] == pytest.approx([150.0, 150.0])
    assert [c.gpu_peers for c in out.calls] == [1, 1]
    queued = tb.run_step([("1", "a", "gpu_queued"), ("2", "b", "gpu_queued")])
    assert [c.end_ms for c in queued.calls] == pytest.approx([100.0, 200.0])
    assert queued.calls[1].start_ms == pytest.approx(100.0)


def test_gpu_now_that_does_not_fit_falls_back_to_cpu_after_detection():
    out = bed().run_step([("a", "asr", "gpu_now"), ("b", "ocr", "gpu_now")])
    a, b = out.calls
    assert (a.device, a.end_ms) == ("cuda:0", 70.0)
    assert (b.device, b.fallback) == ("cpu", "oom")
    assert b.end_ms == pytest.approx(20.0 + 300.0)  # oom_detect_ms, then the CPU run


def test_queued_call_waits_in_fifo_order_for_vram():
    out = bed().run_step([("a", "ocr", "gpu_queued"), ("b", "asr", "gpu_queued")])
    a, b = out.calls
    assert (a.start_ms, a.end_ms) == (0.0, 45.0)
    assert (b.start_ms, b.end_ms) == (45.0, 115.0)
    assert out.vram_peak_mb == 3000.0


def test_cpu_cores_are_shared():
    heavy = {"x": ToolParams(cpu_ms=100, gpu_ms=10, cpu_threads=4)}
    tb = SimulatedTestbed(heavy, vram_budget_mb=100, cpu_cores=4)
    out = tb.run_step([("1", "x", "cpu"), ("2", "x", "cpu")])
    assert [c.end_ms for c in out.calls] == pytest.approx([200.0, 200.0])


def test_background_load_holds_vram_and_gpu_share():
    tb = bed(background=BackgroundLoad(vram_mb=2000, gpu_share=0.5))
    state = tb.device_state()
    assert (state.vram_used_mb, state.gpu_utilization) == (2000, 0.5)
    out = tb.run_step([("a", "ocr", "gpu_now")])  # 3000 MB > 2000 MB left
    assert out.calls[0].fallback == "oom"
    slow = SimulatedTestbed(
        {"g": ToolParams(cpu_ms=500, gpu_ms=100, gpu_share=1.0)},
        vram_budget_mb=1000,
        background=BackgroundLoad(gpu_share=0.5),
    ).run_step([("1", "g", "gpu_now")])
    assert slow.makespan_ms == pytest.approx(150.0)


def test_queued_call_larger_than_budget_goes_to_cpu():
    out = bed(vram=2000).run_step([("a", "ocr", "gpu_queued")])
    assert (out.calls[0].device, out.calls[0].fallback) == ("cpu", "vram_over_budget")


def test_virtual_clock_advances_by_makespan_and_noise_is_seeded():
    tb = bed()
    tb.run_step([("a", "asr", "gpu_now")])
    tb.run_step([("a", "embed", "cpu")])
    assert tb.now_ms == 120.0
    n1 = bed(noise=0.1, seed=7).run_step([("a", "asr", "cpu")]).makespan_ms
    n2 = bed(noise=0.1, seed=7).run_step([("a", "asr", "cpu")]).makespan_ms
    assert n1 == n2 != 800.0
    assert bed(noise=0.1).makespan([("a", "asr", "cpu")]) == 800.0  # ground truth is noise-free


def test_unknown_tool_names_the_known_ones():
    with pytest.raises(KeyError, match="no parameters for tool 'tts'; known: asr, embed, ocr"):
        bed().run_step([("a", "tts", "cpu")])


def test_hidden_parameters_are_not_in_the_device_state():
    state = bed().device_state()
    assert "asr" not in repr(state)


def test_batchsim_does_not_import_the_testbed() -> None:
    """The batched simulator reads parameters through protocols: no import circle."""
    import ast
    import inspect

    from langgraph_devsched import batchsim

    tree = ast.parse(inspect.getsource(batchsim))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "langgraph_devsched.testbed" not in imported


def test_explicit_mappings_and_bounds_match_the_event_simulation() -> None:
    import itertools
    import random

    pytest.importorskip("numpy")
    b = bed(vram=3000)
    tools = list(PARAMS)[:5]
    options = ("gpu_now", "gpu_queued", "cpu")
    rng = random.Random(7)
    mappings = [tuple(rng.choice(options) for _ in tools) for _ in range(40)]
    spans = b.mapping_makespans(tools, mappings).tolist()
    exact = [b.makespan([(str(i), t, o) for i, (t, o) in enumerate(zip(tools, m, strict=True))])
             for m in mappings]
    assert spans == exact  # bit-identical
    from langgraph_devsched.batchsim import product_codes

    choices = [options] * len(tools)
    lb = b.lower_bounds(tools, product_codes(choices)).tolist()
    all_spans = b.product_makespans(tools, choices).tolist()
    assert all(lo <= s for lo, s in zip(lb, all_spans, strict=True))
    assert len(lb) == len(list(itertools.product(*choices)))


def test_call_times_per_row_overrides_match_a_testbed_with_those_parameters() -> None:
    import numpy as np

    from langgraph_devsched.batchsim import mapping_codes

    params = {"a": ToolParams(cpu_ms=90, gpu_ms=40, vram_mb=500, gpu_share=0.7),
              "b": ToolParams(cpu_ms=60, gpu_ms=30, transfer_ms=5, vram_mb=800, gpu_share=0.6),
              "c": ToolParams(cpu_ms=50, gpu_ms=20, vram_mb=900, cpu_threads=2)}
    tools = ["a", "b", "c", "a"]
    mapping = ("gpu_now", "gpu_now", "cpu", "gpu_queued")
    base = SimulatedTestbed(params, vram_budget_mb=1800, cpu_cores=2)
    shares = [0.3, 0.9]
    rows = {"gpu_share": np.array([[s, 0.6, 1.0, s] for s in shares])}
    starts, ends = base.call_times(tools, np.tile(mapping_codes([mapping], 4), (2, 1)),
                                   rows=rows)
    for r, share in enumerate(shares):
        changed = dict(params, a=params["a"].model_copy(update={"gpu_share": share}))
        rec = SimulatedTestbed(changed, vram_budget_mb=1800, cpu_cores=2).simulate(
            [(str(i), t, o) for i, (t, o) in enumerate(zip(tools, mapping, strict=True))])
        assert starts[r].tolist() == [c.start_ms for c in rec.calls]
        assert ends[r].tolist() == [c.end_ms for c in rec.calls]
    assert ends[0].tolist() != ends[1].tolist()  # the share mattered


def test_call_times_repeated_rows_simulated_once_match_each_row_alone() -> None:
    import numpy as np

    from langgraph_devsched import batchsim
    from langgraph_devsched.batchsim import mapping_codes

    params = {"a": ToolParams(cpu_ms=90, gpu_ms=40, vram_mb=500, gpu_share=0.7),
              "b": ToolParams(cpu_ms=60, gpu_ms=30, transfer_ms=5, vram_mb=800, gpu_share=0.6),
              "c": ToolParams(cpu_ms=50, gpu_ms=20, vram_mb=900, cpu_threads=2)}
    tools = ["a", "b", "c"]
    mappings = [("gpu_now", "gpu_queued", "cpu"), ("cpu", "gpu_now", "gpu_now"),
                ("gpu_queued", "gpu_queued", "gpu_queued")]
    shares = [0.2, 0.5, 0.9]
    codes = np.tile(mapping_codes(mappings, 3), (len(shares) * 12, 1))  # 108 rows
    share = np.repeat(np.tile(shares, 12), len(mappings))
    rows = {"gpu_share": np.column_stack([np.full(len(share), 0.7), np.full(len(share), 0.6),
                                          share]),
            "cpu_threads": np.tile([1, 2, 2], (len(share), 1))}
    first, _ = batchsim._distinct_rows(np, codes, rows)
    # `c` on the cpu: its share is never read, those three variants are one row
    assert first is not None and len(first) == 7
    b = SimulatedTestbed(params, vram_budget_mb=1800, cpu_cores=2)
    starts, ends = b.call_times(tools, codes, rows=rows)
    for r in range(0, len(codes), 7):
        alone = b.call_times(tools, codes[r:r + 1], rows={f: v[r:r + 1] for f, v in rows.items()})
        assert starts[r].tobytes() == alone[0][0].tobytes()
        assert ends[r].tobytes() == alone[1][0].tobytes()


@pytest.mark.parametrize("seed", range(12))
def test_call_times_rows_of_several_contention_models_match_each_model_alone(seed: int) -> None:
    """``models``/``groups``: each row under its own physics, bit-identical to a batch run
    under that physics alone (OOMs, queues, background load, per-row shares and threads)."""
    import numpy as np

    from langgraph_devsched import batchsim
    from langgraph_devsched._dev.perf.generate import generate_tools

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    params = list(generate_tools(n, seed=seed).values())
    m = int(rng.integers(1, 60))
    codes = rng.integers(0, 3, size=(m, n)).astype(np.int8)
    rows = None if seed % 3 == 0 else {
        "gpu_share": rng.choice([0.1, 0.3, 0.5, 0.8, 1.0], size=(m, n)),
        "cpu_threads": rng.choice([1, 2, 4, 8], size=(m, n))}
    bound = tuple(float(rng.uniform(0.0, 1.0)) for _ in range(n))
    models = [None, batchsim.Contention("time_slicing", 0.0),
              batchsim.Contention("time_slicing", 0.1), batchsim.Contention("idle_queue"),
              batchsim.Contention("bandwidth", 0.0, bound)]
    groups = rng.integers(0, len(models), size=m)
    machine = {"vram_budget_mb": float(rng.choice([2000, 8000])),
               "cpu_cores": int(rng.choice([2, 8])), "oom_detect_ms": 20.0,
               "background": BackgroundLoad(vram_mb=float(rng.choice([0, 500])),
                                            gpu_share=float(rng.choice([0.0, 0.3])))}
    starts, ends = batchsim.call_times(params, codes, rows=rows, models=models, groups=groups,
                                       **machine)
    for g, model in enumerate(models):
        idx = np.flatnonzero(groups == g)
        if not len(idx):
            continue
        alone = batchsim.call_times(
            params, codes[idx], rows=None if rows is None else {f: v[idx] for f, v in rows.items()},
            contention=model, **machine)
        assert starts[idx].tobytes() == alone[0].tobytes()
        assert ends[idx].tobytes() == alone[1].tobytes()


def test_call_times_variants_of_a_cpu_field_of_a_call_that_never_reaches_the_cpu_are_one_row(
) -> None:
    """A call's CPU time and threads are never read where it cannot reach the CPU (queued
    within the budget, or started at once and fitting at launch): such variants are
    simulated once; a ``gpu_now`` call that does not fit falls back, and its differ."""
    import numpy as np

    from langgraph_devsched import batchsim
    from langgraph_devsched.batchsim import mapping_codes

    params = {"a": ToolParams(cpu_ms=90, gpu_ms=40, vram_mb=900, gpu_share=0.7),
              "b": ToolParams(cpu_ms=60, gpu_ms=30, vram_mb=800, gpu_share=0.6)}
    tools = ["a", "b"]
    b = SimulatedTestbed(params, vram_budget_mb=1000, cpu_cores=4)
    for mapping, distinct in [(("gpu_queued", "gpu_queued"), 1), (("gpu_now", "gpu_queued"), 1),
                              (("gpu_now", "gpu_now"), 4)]:  # the second gpu_now falls back
        codes = np.tile(mapping_codes([mapping], 2), (40, 1))
        threads = np.column_stack([np.tile([1, 2, 4, 8], 10),
                                   np.repeat(np.arange(1, 11), 4) % 4 + 1])
        rows = {"cpu_threads": threads, "cpu_ms": np.tile([90.0, 60.0], (40, 1))}
        first, _ = batchsim._distinct_rows(
            np, codes, rows, never_cpu=batchsim._never_on_cpu(np, codes, [900.0, 800.0], 1000.0,
                                                               0.0))
        assert (40 if first is None else len(first)) == distinct, mapping
        _, ends = b.call_times(tools, codes, rows=rows)
        for r in range(len(codes)):
            alone = b.call_times(tools, codes[r:r + 1],
                                 rows={f: v[r:r + 1] for f, v in rows.items()})
            assert ends[r].tobytes() == alone[1][0].tobytes()
