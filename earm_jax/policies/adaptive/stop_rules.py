r"""Stop rules: how big a query's next round is, and whether it is scored.

The default, ``settle_or_spill``: a query is *settled* once the posterior
probability that none of its scored candidates is relevant,
:math:`\prod (1 - q)`, is at most ``settle_risk`` (0.1). Before that every
round is scored (within the ledger); after it, a round is cut to the calls the
carry cap would otherwise discard ("use it or lose it"), so an easy query stops
after its first round while calls are scarce, and spends what would be lost
when they are not. One noisy false hit (at noise 0.3, :math:`q \approx 1/2`)
does not settle a query.

The other stop rules that were measured were rejected; they live outside the
package's traced path, in :mod:`earm_jax.contrib.stop_rules`, and a
configuration uses one by passing the :class:`StopRule` itself
(``AdaptiveConfig(stop_rule=REJECTED_STOP_RULES["settle"])``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp

from earm_jax.policies.adaptive.answer_model import AnswerModel
from earm_jax.policies.adaptive.config import UNITS, AdaptiveConfig
from earm_jax.policies.adaptive.embedding_calls import (
    EMBEDDING_ORDERS,
    embedding_priority,
)
from earm_jax.policies.adaptive.order import unscored_tier
from earm_jax.policies.adaptive.state import Ledger, RoundState, similarity_ranks
from earm_jax.types import Array


def no_stop_state(config: AdaptiveConfig) -> Any:
    """A rule that carries nothing between queries: ``()``."""
    return ()


def keep_stop_state(config: AdaptiveConfig, ledger: Ledger, rs: RoundState) -> Any:
    """What the rule carried, unchanged by the query."""
    return ledger.stop_state


class StopRule(NamedTuple):
    """A stop rule's parts, all traced.

    Attributes:
      cut: ``(config, ledger, round_state, size, unsettled) -> int32[]`` the
        next round's size, given its size within the query's limit.
      worth: ``(config, model, ledger, round_state, chosen, unsettled) ->
        bool[]`` whether the chosen round is scored at all.
      init: ``(config) -> pytree`` what the rule carries from query to query
        (``Ledger.stop_state``) before the first; ``()`` (nothing) by default.
      close: ``(config, ledger, round_state) -> pytree`` what it carries after
        a query (``ledger`` is the one the query began with).
    """

    cut: Callable[..., Array]
    worth: Callable[..., Array]
    init: Callable[[AdaptiveConfig], Any] = no_stop_state
    close: Callable[..., Any] = keep_stop_state


def keep_size(config, ledger, rs, size, unsettled):
    """The round as the schedule and the limit give it."""
    return size


def spill_cut(config, ledger, rs, size, unsettled):
    """Once settled, score only the calls the carry cap would discard."""
    spill = ledger.balance + rs.allowance - rs.calls * UNITS - config.carry_cap * UNITS
    spill = jnp.maximum(spill // UNITS, 0)
    return jnp.where(unsettled, size, jnp.minimum(size, spill))


def always(config, model, ledger, rs, chosen, unsettled):
    """Every chosen round is worth its calls (the cut already decided)."""
    return jnp.ones((), bool)


SETTLE_OR_SPILL = StopRule(cut=spill_cut, worth=always)
"""The default stop rule (see the module docstring)."""

SPEND = StopRule(cut=keep_size, worth=always)
"""Every query spends what its allowance and the carried balance allow: no
query is judged settled, so calls are not moved between queries. A strong
trained scorer's confident hit says a question has evidence, not that it has
all of it; moving the calls it saves to other questions cost Recall@10 there
(docs/design-notes.md)."""


def stop_rule(config: AdaptiveConfig) -> StopRule:
    """The :class:`StopRule` of ``config``: ``config.stop_rule`` itself when it
    is one, else the rule it names (one of ``STOP_RULES``)."""
    if isinstance(config.stop_rule, StopRule):
        return config.stop_rule
    return {"settle_or_spill": SETTLE_OR_SPILL, "spend": SPEND}[config.stop_rule]


def round_selector(
    config: AdaptiveConfig, model: AnswerModel
) -> Callable[[Ledger, RoundState], Array]:
    """``select_round(ledger, round_state) -> bool[N]``: the next round's
    candidates, the most similar unscored ones, cut and judged by the
    configured stop rule (all False when the query is done)."""
    sizes = jnp.asarray(config.round_sizes, jnp.int32)
    num_rounds = config.num_rounds
    rule = stop_rule(config)

    def select_round(ledger: Ledger, rs: RoundState) -> Array:
        open_ = rs.usable & ~rs.scored
        # Next candidates: the most similar unscored ones (ranks among the open),
        # or after the first round the highest in the learned or the
        # embedding order.
        priority = -rs.rank.astype(jnp.float32)
        if config.call_order == "learned":
            learned = unscored_tier(config, ledger, rs)
            priority = jnp.where(
                rs.round >= config.similarity_rounds, learned, priority
            )
        elif config.call_order in EMBEDDING_ORDERS:
            texts = embedding_priority(
                config.call_order,
                ledger.embedding_fit,
                rs.phi,
                rs.values,
                rs.scored,
                rs.usable,
                config.embedding_ridge,
                config.top_k,
                config.embedding_prior_cosine,
            )
            in_head = in_similarity_head(config, rs)
            priority = jnp.where(in_head, priority, texts)
        open_rank = similarity_ranks(priority, open_)
        size = sizes[jnp.minimum(rs.round, num_rounds - 1)]
        size = jnp.minimum(size, rs.limit - rs.calls)
        if config.call_order in EMBEDDING_ORDERS and config.similarity_share > 0:
            # The round that reaches the head's end stops there, so the texts
            # choose the rest of the query's calls.
            head_left = _head_calls(config, rs) - rs.calls
            size = jnp.where(head_left > 0, jnp.minimum(size, head_left), size)
        unsettled = ~model.settled(ledger, rs)
        size = rule.cut(config, ledger, rs, size, unsettled)
        chosen = open_ & (open_rank < size)
        worth = rule.worth(config, model, ledger, rs, chosen, unsettled)
        num_chosen = jnp.sum(chosen)
        go = ~rs.done & (rs.round < num_rounds) & (num_chosen > 0) & worth
        return chosen & go

    return select_round


def _head_calls(config: AdaptiveConfig, rs: RoundState) -> Array:
    """Calls paid down the similarity order before the texts lead: a share of
    the query's limit, rounded up."""
    share = jnp.asarray(config.similarity_share, jnp.float32)
    return jnp.ceil(share * rs.limit.astype(jnp.float32)).astype(jnp.int32)


def in_similarity_head(config: AdaptiveConfig, rs: RoundState) -> Array:
    """``bool[]``: whether the next round still pays down the similarity order
    (what a query planned ahead of its turn may pay before the regression of
    the queries before it is known)."""
    if config.similarity_share > 0:
        return rs.calls < _head_calls(config, rs)
    return rs.round < config.similarity_rounds


__all__ = [
    "SETTLE_OR_SPILL",
    "SPEND",
    "StopRule",
    "always",
    "in_similarity_head",
    "keep_size",
    "keep_stop_state",
    "no_stop_state",
    "round_selector",
    "spill_cut",
    "stop_rule",
]
