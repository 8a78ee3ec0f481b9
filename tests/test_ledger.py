"""The VRAM ledger: never over budget, FIFO admission, zero at rest on every exit path."""

from __future__ import annotations

import asyncio
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_devsched.ledger import QueueTimeoutError, VramLedger, VramOverBudgetError

BUDGET = 1000.0


class Watched(VramLedger):
    """A ledger that checks the budget invariant at every grant."""

    violations = 0

    def _grant_locked(self, mb: float, share: float, need=None, *, call=True):  # type: ignore[no-untyped-def]
        res = super()._grant_locked(mb, share, need, call=call)
        if self._in_use_mb > self.budget_mb + 1e-6:
            Watched.violations += 1
        return res


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.floats(min_value=0, max_value=BUDGET), min_size=1, max_size=12),
    shares=st.lists(st.floats(min_value=0.05, max_value=1.0), min_size=12, max_size=12),
    kinds=st.lists(st.sampled_from(["now", "queued", "fail"]), min_size=12, max_size=12),
)
def test_concurrent_use_never_exceeds_budget_and_returns_to_zero(sizes, shares, kinds):
    ledger = Watched(BUDGET)
    Watched.violations = 0
    barrier = threading.Barrier(len(sizes))
    answered: list[int] = []

    def worker(i: int, mb: float) -> None:
        barrier.wait()
        kind = kinds[i]
        if kind == "now":
            res = ledger.try_reserve(mb, shares[i])
            if res is not None:
                ledger.release(res)
        else:
            try:
                with ledger.hold(mb, shares[i]):
                    if kind == "fail":
                        raise RuntimeError("tool failed")
            except RuntimeError:
                pass
        answered.append(i)

    threads = [threading.Thread(target=worker, args=(i, mb)) for i, mb in enumerate(sizes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(answered) == list(range(len(sizes)))
    assert Watched.violations == 0
    assert ledger.in_use_mb == 0 and ledger.active == 0 and ledger.queued == 0
    assert ledger.peak_mb <= BUDGET


def test_fifo_admission_head_blocks_smaller_followers():
    ledger = VramLedger(BUDGET)
    first = ledger.try_reserve(800)
    assert first is not None
    granted: list[tuple[int, str]] = []  # (grant ticket, name): tickets count grants in order

    def take(mb: float, name: str) -> None:
        res = ledger.reserve(mb)
        granted.append((res.ticket, name))
        ledger.release(res)

    big = threading.Thread(target=take, args=(600, "big"))
    big.start()
    while ledger.queued < 1:
        pass
    small = threading.Thread(target=take, args=(100, "small"))
    small.start()
    while ledger.queued < 2:
        pass
    assert granted == [] and ledger.fits(100)  # 100 MB would fit, but waits behind the head
    ledger.release(first)
    big.join(5)
    small.join(5)
    assert [name for _, name in sorted(granted)] == ["big", "small"]  # admitted in FIFO order
    assert ledger.in_use_mb == 0


def test_queued_admission_waits_for_gpu_share():
    ledger = VramLedger(BUDGET)
    a = ledger.reserve(100, share=0.7)
    assert not ledger.admissible(100, 0.5)  # 0.7 + 0.5 oversubscribes the GPU
    assert ledger.try_reserve(100, share=0.5) is not None  # gpu_now shares anyway
    ledger.release(a)


def test_over_budget_and_negative_requests_are_rejected_with_the_numbers():
    ledger = VramLedger(BUDGET, reserved_mb=300)
    with pytest.raises(VramOverBudgetError, match="800 MB can never fit: budget 1000 MB, 300 MB"):
        ledger.reserve(800)
    with pytest.raises(ValueError, match=">= 0 MB"):
        ledger.try_reserve(-1)
    assert ledger.capacity_mb == 700 and ledger.in_use_mb == 0


def test_sync_queue_timeout_leaves_no_waiter_and_no_reservation():
    ledger = VramLedger(BUDGET)
    held = ledger.try_reserve(900)
    assert held is not None
    with pytest.raises(QueueTimeoutError):
        ledger.reserve(500, timeout=0.01)
    assert ledger.queued == 0
    ledger.release(held)
    ledger.release(held)  # idempotent
    assert ledger.in_use_mb == 0 and ledger.active == 0


async def test_async_cancellation_and_timeout_release_everything():
    ledger = VramLedger(BUDGET)
    held = ledger.try_reserve(900)
    assert held is not None
    waiter = asyncio.create_task(ledger.areserve(500))
    await asyncio.sleep(0)
    assert ledger.queued == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert ledger.queued == 0
    with pytest.raises(QueueTimeoutError):
        await ledger.areserve(500, timeout=0.01)
    granted = asyncio.create_task(ledger.areserve(500))
    await asyncio.sleep(0)
    ledger.release(held)
    res = await granted
    assert ledger.in_use_mb == 500
    async with ledger.ahold(400):
        assert ledger.in_use_mb == 900
    ledger.release(res)
    assert ledger.in_use_mb == 0 and ledger.active == 0
