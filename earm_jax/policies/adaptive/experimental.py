r"""Stop rules that were measured and rejected, kept as options off the default path.

Only a configuration whose ``stop_rule`` names one of these imports this module;
the default (``settle_or_spill``, :mod:`earm_jax.policies.adaptive.stop_rules`)
never traces them. Measured with ``best`` on the LoCoMo evidence stand-in
(discrete choices picked on 4 conversations and judged on the other 3, all 35
splits) and with a trained cross-encoder, the budget-pacing price rules and the
other stop rules were no better than ``settle_or_spill`` at any point:

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

import jax.numpy as jnp

from earm_jax.policies.adaptive.config import UNITS
from earm_jax.policies.adaptive.stop_rules import StopRule, keep_size


def _expected_rate(model, ledger, rs, chosen):
    """Mean relevance rate of the chosen candidates (their table cells at the
    query's current found-state) and how many were chosen."""
    rate = model.rates(ledger)[model.bucket_of(rs.rank), model.found_state(ledger, rs)]
    num_chosen = jnp.sum(chosen)
    expected = jnp.sum(jnp.where(chosen, rate, 0.0)) / jnp.maximum(num_chosen, 1)
    return expected, num_chosen


def _priced(model, ledger, rs, chosen):
    expected, _ = _expected_rate(model, ledger, rs, chosen)
    return expected >= ledger.price


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


EXPERIMENTAL_STOP_RULES: dict[str, StopRule] = {
    name: StopRule(cut=keep_size, worth=worth)
    for name, worth in (
        ("settle_or_overflow", settle_or_overflow),
        ("settle", settle),
        ("price", price),
        ("settle_and_price", settle_and_price),
        ("settle_or_price", settle_or_price),
        ("settle_or_marginal", settle_or_marginal),
        ("settle_or_expected", settle_or_expected),
    )
}
"""The rejected stop rules by name."""


__all__ = ["EXPERIMENTAL_STOP_RULES"]
