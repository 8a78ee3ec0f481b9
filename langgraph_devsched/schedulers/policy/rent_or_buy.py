"""Loads as investments: when a model's load is worth paying, and what a resident model is
worth keeping.

Serving a model's calls cold (on the CPU, or on the GPU paying the load every time it was
evicted) is *renting*: each use pays ``saving_ms`` more than a warm GPU call would. Loading
it is *buying*: ``price_ms`` once, then every later use saves ``saving_ms``. A per-step rule
compares the price with one step's saving and never buys a model that every step uses.

`buy` is the learning-augmented ski-rental rule (Purohit, Svitkina and Kumar, NeurIPS
2018), with the use forecast (`monitor.forecast`) as the prediction and ``trust`` as the
parameter: when the forecast says the uses will repay the price, buy once the rent paid
reaches ``trust`` times the price; otherwise only once it reaches the price over ``trust``.
Whatever the future, the total paid is at most ``1 + 1/trust`` times the best in hindsight
(robust), and at most ``1 + trust`` times when the forecast is right (consistent). With
``trust = 1`` it is the classic rule: buy once the rent paid equals the price
(2-competitive).

A load that runs while the agent's LLM thinks between two steps costs the user no time:
its price is then only what it evicts. `worth_ms` is what keeping a resident model is worth
(its forecast savings), the figure an eviction gives up.

>>> buy(price_ms=800, rent_paid_ms=224, saving_ms=112, coming_uses=8)   # 8 x 112 > 800
False
>>> buy(price_ms=800, rent_paid_ms=448, saving_ms=112, coming_uses=8)   # rent >= 0.5 x 800
True
>>> buy(price_ms=800, rent_paid_ms=448, saving_ms=112, coming_uses=2)   # not repaid: wait
False
>>> buy(price_ms=800, rent_paid_ms=1600, saving_ms=112, coming_uses=2)  # rent >= 800 / 0.5
True
>>> worth_ms(saving_ms=112, coming_uses=8)
896.0
"""

from __future__ import annotations

TRUST = 0.5
"""How far the forecast is trusted: 1.5x the best when it is right, 3x at worst."""


def buy(*, price_ms: float, rent_paid_ms: float, saving_ms: float, coming_uses: float,
        trust: float = TRUST) -> bool:
    """Whether to load now: see the module. A load that saves nothing is never bought; a
    free one (``price_ms <= 0``) always is."""
    if not 0 < trust <= 1:
        raise ValueError(f"trust must be in (0, 1], got {trust}")
    if saving_ms <= 0:
        return False
    if price_ms <= 0:
        return True
    repaid = coming_uses * saving_ms >= price_ms
    return rent_paid_ms >= (trust * price_ms if repaid else price_ms / trust)


def worth_ms(*, saving_ms: float, coming_uses: float) -> float:
    """What keeping a resident model is worth to the coming steps: the time its forecast
    uses save over serving them cold."""
    return float(max(0.0, saving_ms) * max(0.0, coming_uses))
