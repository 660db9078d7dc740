"""The adaptive policy's static settings and the names of its options."""

from __future__ import annotations

from typing import Any, NamedTuple

STOP_RULES = ("settle_or_spill", "spend")
"""Stopping rules by name (the first is the default; ``"spend"`` spends each
query's allowance, moving no calls between queries). The rules measured and
rejected are :class:`~earm_jax.policies.adaptive.stop_rules.StopRule` values in
:mod:`earm_jax.contrib.stop_rules`, passed as ``stop_rule`` itself."""

UNSCORED_ORDERS = ("learned", "similarity")
"""How the unscored candidates are ordered among themselves; the first is the
default: ``"learned"`` by a relevance model fitted online on the scored ones
(similarity and the memory's bias in the experience matrix),
``"similarity"`` by similarity alone."""

CALL_ORDERS = ("similarity", "learned", "embedding", "embedding_gain")
"""Which unscored candidates a round pays for; the first is the default:
``"similarity"`` the most similar; after the first round, ``"learned"`` the
highest in the learned order of the unscored candidates (similarity and the
memory-bias feature, weighted by what earlier queries' answers taught), and
``"embedding"`` / ``"embedding_gain"`` the highest posterior mean / expected
gain over the current top ``K`` of a Bayesian ridge regression of the answers
on the question's and memory's embeddings
(:mod:`~earm_jax.policies.adaptive.embedding_calls`; they need
``embedding_dim`` and the query's :class:`~earm_jax.base.SideInputs`)."""

ORDER_FEATURES = 3
"""Features of the learned order: 1, standardised similarity, standardised
memory bias."""

MERGES = (
    "answers_first",
    "confident_no",
    "evidence",
    "posterior",
    "anchors_first",
    "fused",
)
"""How direct scores and unscored candidates share one ranking; the first is the
default."""

UNITS = 1024
"""Ledger units per call: allowances are exact multiples of 1/1024 call."""


class AdaptiveConfig(NamedTuple):
    r"""Static settings of the adaptive policy (closed over, never traced).

    Attributes:
      pool_size: ``N``.
      round_sizes: candidates per round; the number of rounds is the most a
        query may take (so the p95 of rounds is at most ``len(round_sizes)``).
      call_budget: allowance per query as a fraction of its usable pool (the
        hard cap on calls as a fraction of Full's calls).
      max_per_query: the most calls one query may spend (0: the sum of
        ``round_sizes``, clipped to ``N``).
      max_carry: the most unspent calls carried to later queries (0: ``2 N``,
        two pools).
      num_found_states: found-states of the rate table (0, 1, ..., this - 1 or
        more confirmed hits).
      noise_prior: prior scorer noise :math:`\sigma_0`.
      noise_prior_weight: pseudo-answers behind ``noise_prior``.
      rate_prior: ``(hits, misses)`` Beta pseudo-counts of every table cell.
      stop_rule: one of :data:`STOP_RULES` (the first is the default), or a
        :class:`~earm_jax.policies.adaptive.stop_rules.StopRule` (e.g. a
        rejected one from :mod:`earm_jax.contrib.stop_rules`).
      settle_risk: a query is settled when P(no relevant among its scored)
        is at most this.
      merge: one of :data:`MERGES` (the first is the default).
      hit_spread: let relevant answers spread more than the noise (graded
        scorers).
      unscored_order: one of :data:`UNSCORED_ORDERS` (the first is the default);
        applies to the ``answers_first``, ``confident_no`` and ``evidence`` merges.
      order_ridge: ridge penalty of the learned order's regression.
      call_order: one of :data:`CALL_ORDERS` (the first is the default).
      embedding_dim: ``D``, the width of the texts' unit embeddings the
        ``"embedding"`` call orders read (0: they are not used).
      embedding_ridge: the prior precision :math:`\lambda` of their regression.
      embedding_prior_cosine: the prior mean of their weight on the cosine (0
        on every other feature): with no answers yet they pay down the
        similarity order.
      top_k: the ``K`` whose top the ``"embedding_gain"`` order tries to lift.
      similarity_rounds: rounds paid down the similarity order before a
        ``"learned"`` or ``"embedding"`` call order takes over (the top of the
        pool is where similarity is right).
      similarity_share: for the ``"embedding"`` call orders, when > 0, the
        similarity head is this share of the query's calls (rounded up) rather
        than ``similarity_rounds`` rounds: the round that reaches it is cut
        there, so the texts choose the rest at every cap.
    """

    pool_size: int
    round_sizes: tuple[int, ...] = (5, 15, 45, 135)
    call_budget: float = 0.25
    max_per_query: int = 0
    max_carry: int = 0
    num_found_states: int = 3
    noise_prior: float = 0.2
    noise_prior_weight: float = 10.0
    rate_prior: tuple[float, float] = (1.0, 19.0)
    stop_rule: Any = "settle_or_spill"
    settle_risk: float = 0.1
    merge: str = "answers_first"
    hit_spread: bool = True
    unscored_order: str = "learned"
    order_ridge: float = 1.0
    call_order: str = "similarity"
    embedding_dim: int = 0
    embedding_ridge: float = 10.0
    embedding_prior_cosine: float = 1.0
    top_k: int = 10
    similarity_rounds: int = 1
    similarity_share: float = 0.0

    @property
    def num_rounds(self) -> int:
        return len(self.round_sizes)

    @property
    def per_query_cap(self) -> int:
        cap = self.max_per_query or sum(self.round_sizes)
        return min(cap, self.pool_size)

    @property
    def carry_cap(self) -> int:
        return self.max_carry or 2 * self.pool_size

    @property
    def embedding_features(self) -> int:
        """``F = D + 2`` when the call order reads the texts, else 0."""
        reads = self.call_order in CALL_ORDERS[2:]
        return self.embedding_dim + 2 if reads else 0


def validate_adaptive_config(config: AdaptiveConfig) -> None:
    """Raises ``ValueError`` naming the first bad field."""
    if not isinstance(config.pool_size, int) or config.pool_size < 1:
        raise ValueError(f"pool_size must be a positive int, got {config.pool_size!r}")
    sizes = tuple(config.round_sizes)
    if not sizes or any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"round_sizes must be positive ints, got {sizes!r}")
    if not 0.0 <= config.call_budget <= 1.0:
        raise ValueError(f"call_budget must be in [0, 1], got {config.call_budget!r}")
    for name in ("max_per_query", "max_carry"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if config.num_found_states < 1:
        raise ValueError(
            f"num_found_states must be >= 1, got {config.num_found_states!r}"
        )
    if not config.noise_prior > 0 or config.noise_prior_weight < 0:
        raise ValueError("noise_prior must be > 0 and noise_prior_weight >= 0")
    rule = config.stop_rule
    if isinstance(rule, str):
        if rule not in STOP_RULES:
            raise ValueError(
                f"stop_rule must be one of {STOP_RULES} or a StopRule (the "
                f"rejected rules: earm_jax.contrib.stop_rules), got {rule!r}"
            )
    elif not all(
        callable(getattr(rule, part, None))
        for part in ("cut", "worth", "init", "close")
    ):
        raise ValueError(
            f"stop_rule must be one of {STOP_RULES} or a StopRule, got {rule!r}"
        )
    if config.merge not in MERGES:
        raise ValueError(f"merge must be one of {MERGES}, got {config.merge!r}")
    if config.merge == "fused" and config.call_order not in CALL_ORDERS[2:]:
        raise ValueError(
            "merge 'fused' ranks the unpaid candidates by the embedding "
            f"regression: set call_order to one of {CALL_ORDERS[2:]}, got "
            f"{config.call_order!r}"
        )
    if not 0.0 < config.settle_risk < 1.0:
        raise ValueError(f"settle_risk must be in (0, 1), got {config.settle_risk!r}")
    if len(config.rate_prior) != 2 or min(config.rate_prior) <= 0:
        raise ValueError(f"rate_prior must be two counts > 0, got {config.rate_prior}")
    if config.unscored_order not in UNSCORED_ORDERS:
        raise ValueError(
            f"unscored_order must be one of {UNSCORED_ORDERS}, "
            f"got {config.unscored_order!r}"
        )
    if config.call_order not in CALL_ORDERS:
        raise ValueError(
            f"call_order must be one of {CALL_ORDERS}, got {config.call_order!r}"
        )
    if (
        isinstance(config.embedding_dim, bool)
        or not isinstance(config.embedding_dim, int)
        or config.embedding_dim < 0
    ):
        raise ValueError(
            f"embedding_dim must be an int >= 0, got {config.embedding_dim!r}"
        )
    if config.call_order in CALL_ORDERS[2:] and config.embedding_dim < 1:
        raise ValueError(
            f"call_order {config.call_order!r} reads the texts' embeddings: set "
            "embedding_dim to their width (e.g. 384 for MiniLM)"
        )
    if not config.embedding_ridge > 0:
        raise ValueError(f"embedding_ridge must be > 0, got {config.embedding_ridge!r}")
    if not isinstance(config.similarity_rounds, int) or config.similarity_rounds < 0:
        raise ValueError(
            f"similarity_rounds must be an int >= 0, got {config.similarity_rounds!r}"
        )
    if not 0.0 <= config.similarity_share <= 1.0:
        raise ValueError(
            f"similarity_share must be in [0, 1], got {config.similarity_share!r}"
        )
    if not isinstance(config.top_k, int) or config.top_k < 1:
        raise ValueError(f"top_k must be a positive int, got {config.top_k!r}")
    if not config.order_ridge > 0:
        raise ValueError(f"order_ridge must be > 0, got {config.order_ridge!r}")


def geometric_round_sizes(first: int, num_rounds: int, factor: float = 2.0):
    """``first, first * factor, ...`` (``num_rounds`` sizes, rounded).

    >>> geometric_round_sizes(10, 4)
    (10, 20, 40, 80)
    """
    return tuple(int(round(first * factor**i)) for i in range(num_rounds))


__all__ = [
    "CALL_ORDERS",
    "MERGES",
    "ORDER_FEATURES",
    "STOP_RULES",
    "UNITS",
    "UNSCORED_ORDERS",
    "AdaptiveConfig",
    "geometric_round_sizes",
    "validate_adaptive_config",
]
