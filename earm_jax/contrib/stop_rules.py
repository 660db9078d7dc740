r"""Stop rules of the adaptive policy that were measured and rejected.

They are kept to rerun their measurements, outside the package's traced path:
the shipped rule (``settle_or_spill``, :mod:`earm_jax.policies.adaptive.stop_rules`)
and its ledger know nothing of them. Pass one as the configuration's
``stop_rule``:

>>> import earm_jax.policies.adaptive as ad
>>> from earm_jax.contrib.stop_rules import REJECTED_STOP_RULES
>>> config = ad.AdaptiveConfig(pool_size=8, stop_rule=REJECTED_STOP_RULES["price"])
>>> ledger = ad.adaptive_policy(config).init()
>>> round(float(ledger.stop_state), 4)  # the paced price, before any query
0.05

The price rules carry their paced price :math:`\lambda` in
``Ledger.stop_state`` (:func:`price_pacing`); the others carry nothing.

Measured with ``best`` on the LoCoMo evidence stand-in (discrete choices
picked on 4 conversations and judged on the other 3, all 35 splits) and with a
trained cross-encoder, the budget-pacing price rules and the other stop rules
were no better than ``settle_or_spill`` at any point:

* ``settle`` (stop once settled): Recall@10 0.786 / 0.706 / 0.771 at scorer
  noise 0.1, 0.3 and graded 0.5, against ``settle_or_spill``'s
  0.788 / 0.707 / 0.772 at about the same calls: the calls the carry cap
  would discard are worth spending.
* ``settle_or_marginal`` (settled, but go on while the round beats the deepest
  round's rate with nothing found): 0.277 against 0.286 Recall@10 with the
  trained cross-encoder.
* ``price``, ``settle_and_price``, ``settle_or_price`` (a call is worth its
  paced price :math:`\lambda`), ``settle_or_overflow`` (a settled query scores
  a round only when the carry cap would discard it whole) and
  ``settle_or_expected`` (settled, but go on while the round is expected to
  find one more): worse everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp

from earm_jax.policies.adaptive.config import UNITS
from earm_jax.policies.adaptive.stop_rules import StopRule, keep_size
from earm_jax.types import Array


def price_pacing(
    initial_price: float = 0.05, pacing_rate: float = 0.1
) -> tuple[Callable[[Any], Array], Callable[..., Array]]:
    r"""``(init, close)`` of a :class:`StopRule` that carries the paced price of
    a call, :math:`\lambda` (a relevance rate; ``float32[]``).

    After each query the price moves by dual ascent on the overspend,
    :math:`\lambda \leftarrow \mathrm{clip}(\lambda\, e^{\eta\, o}, 10^{-4}, 1)`
    with :math:`o = (\text{calls} - a) / \max(a, 1)`, ``a`` the query's
    accrual in calls.

    Args:
      initial_price: the price before any query, in (0, 1).
      pacing_rate: :math:`\eta` >= 0, the step of the dual ascent.
    """
    if not 0.0 < initial_price < 1.0:
        raise ValueError(f"initial_price must be in (0, 1), got {initial_price!r}")
    if pacing_rate < 0:
        raise ValueError(f"pacing_rate must be >= 0, got {pacing_rate!r}")

    def init(config) -> Array:
        return jnp.asarray(initial_price, jnp.float32)

    def close(config, ledger, rs) -> Array:
        accrual = rs.allowance.astype(jnp.float32) / UNITS
        overspend = (rs.calls.astype(jnp.float32) - accrual) / jnp.maximum(accrual, 1.0)
        price = ledger.stop_state * jnp.exp(pacing_rate * overspend)
        return jnp.clip(price, 1e-4, 1.0)

    return init, close


def _expected_rate(model, ledger, rs, chosen):
    """Mean relevance rate of the chosen candidates (their table cells at the
    query's current found-state) and how many were chosen."""
    rate = model.rates(ledger)[model.bucket_of(rs.rank), model.found_state(ledger, rs)]
    num_chosen = jnp.sum(chosen, dtype=rate.dtype)
    expected = jnp.sum(jnp.where(chosen, rate, 0.0)) / jnp.maximum(num_chosen, 1.0)
    return expected, num_chosen


def _priced(model, ledger, rs, chosen):
    expected, _ = _expected_rate(model, ledger, rs, chosen)
    return expected >= ledger.stop_state


def settle(config, model, ledger, rs, chosen, unsettled):
    return unsettled


def price(config, model, ledger, rs, chosen, unsettled):
    return _priced(model, ledger, rs, chosen)


def settle_and_price(config, model, ledger, rs, chosen, unsettled):
    return unsettled & _priced(model, ledger, rs, chosen)


def settle_or_price(config, model, ledger, rs, chosen, unsettled):
    return unsettled | _priced(model, ledger, rs, chosen)


def settle_or_expected(config, model, ledger, rs, chosen, unsettled):
    # Settled, but the next round is still expected to find one more.
    expected, num_chosen = _expected_rate(model, ledger, rs, chosen)
    return unsettled | (expected * num_chosen >= 1.0)


def settle_or_overflow(config, model, ledger, rs, chosen, unsettled):
    # Use it or lose it: calls the carry cap would discard cost nothing.
    num_chosen = jnp.sum(chosen)
    after = ledger.balance + rs.allowance - (rs.calls + num_chosen) * UNITS
    return unsettled | (after >= config.carry_cap * UNITS)


def settle_or_marginal(config, model, ledger, rs, chosen, unsettled):
    # After settling, a round is still worth it when its rate beats the least
    # valuable call an unsettled search would make: the deepest round's rate
    # with nothing found.
    expected, _ = _expected_rate(model, ledger, rs, chosen)
    marginal = model.rates(ledger)[config.num_rounds - 1, 0]
    return unsettled | (expected >= marginal)


PRICED = {
    "price": price,
    "settle_and_price": settle_and_price,
    "settle_or_price": settle_or_price,
}
"""The rules that read the paced price (``Ledger.stop_state``)."""


def rejected_stop_rule(
    name: str, initial_price: float = 0.05, pacing_rate: float = 0.1
) -> StopRule:
    """The rejected stop rule called ``name`` (a key of
    :data:`REJECTED_STOP_RULES`); the price rules pace their price with
    ``initial_price`` and ``pacing_rate`` (:func:`price_pacing`)."""
    if name in PRICED:
        init, close = price_pacing(initial_price, pacing_rate)
        return StopRule(cut=keep_size, worth=PRICED[name], init=init, close=close)
    unpriced = {
        "settle_or_overflow": settle_or_overflow,
        "settle": settle,
        "settle_or_marginal": settle_or_marginal,
        "settle_or_expected": settle_or_expected,
    }
    if name not in unpriced:
        raise ValueError(
            f"name must be one of {sorted(unpriced | PRICED)}, got {name!r}"
        )
    return StopRule(cut=keep_size, worth=unpriced[name])


REJECTED_STOP_RULES: dict[str, StopRule] = {
    name: rejected_stop_rule(name)
    for name in (
        "settle_or_overflow",
        "settle",
        "price",
        "settle_and_price",
        "settle_or_price",
        "settle_or_marginal",
        "settle_or_expected",
    )
}
"""The rejected stop rules by name, the price rules at the pacing they were
measured with (``initial_price=0.05``, ``pacing_rate=0.1``)."""


__all__ = ["REJECTED_STOP_RULES", "price_pacing", "rejected_stop_rule"]
