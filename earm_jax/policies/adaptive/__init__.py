r"""Adaptive, multi-round anchor scoring under a hard call budget.

A query is scored in up to ``len(round_sizes)`` rounds of growing size (default
5, 15, 45, 135 candidates, in similarity order). Before each round the policy
decides, from what it has learned on earlier queries and on this query's earlier
rounds, whether the next round is worth its calls; after each round it folds
the scores in. Three pieces of experience are carried from query to query in a
:class:`Ledger` (:mod:`~earm_jax.policies.adaptive.state`):

1. **A hard call budget.** Every query accrues an allowance of
   ``call_budget`` times its usable pool (so the total accrued is
   ``call_budget`` times Full's calls); unspent calls carry over (up to
   ``max_carry`` calls); a query may spend at most ``max_per_query`` and never
   more than the balance. The balance is kept in exact integer units of
   1/1024 call, so *the running total of calls never exceeds the allowance
   accrued so far* (no float drift).
2. **Where the evidence is.** A table of relevance rates by similarity-rank
   bucket (the rounds' rank ranges) and by how many confirmed hits the query
   had when the candidate was scored (0, 1, 2+): Beta-smoothed soft counts of
   the posterior relevance of every scored candidate. It says how likely the
   next round is to hold evidence *given what this query has already found*.
3. **How noisy the scorer is**, estimated online from the answers, never from
   the truth; with the table it gives each answer its posterior relevance
   (:mod:`~earm_jax.policies.adaptive.answer_model`).

The parts, one idea per module:

* :mod:`~earm_jax.policies.adaptive.config`: :class:`AdaptiveConfig` and the
  names of the options (:data:`STOP_RULES`, :data:`MERGES`,
  :data:`UNSCORED_ORDERS`).
* :mod:`~earm_jax.policies.adaptive.stop_rules`: when a query stops (default
  ``"settle_or_spill"``); the rejected rules are in
  :mod:`~earm_jax.policies.adaptive.experimental`, off the default path.
* :mod:`~earm_jax.policies.adaptive.merges`: how answers and unscored candidates
  share one ranking (default ``"answers_first"``).
* :mod:`~earm_jax.policies.adaptive.order`: the order of the unscored, learned
  online from similarity and the memory's bias in the experience matrix
  (default ``unscored_order="learned"``).
* :mod:`~earm_jax.policies.adaptive.policy`: the policy assembled, and
  :func:`run_adaptive` over one stream.

Every function here is pure and shape-static, and the policy is an
:class:`earm_jax.Policy` (the one protocol): the simulator runs
``begin → (select → observe) × R → finish`` inside ``jit``, ``lax.scan`` and
``vmap`` (:func:`run_adaptive` alone, :func:`earm_jax.run` beside the solver),
and a host loop (:func:`earm_jax.core.rounds.pay_rounds`) calls the same
functions with one batched scorer request per round.

>>> import jax, jax.numpy as jnp
>>> import earm_jax.policies.adaptive as ad
>>> from earm_jax.base import Query
>>> from earm_jax.core.rounds import pay_rounds
>>> policy = ad.adaptive_policy(ad.AdaptiveConfig(pool_size=8, round_sizes=(2, 2)))
>>> key = jax.random.key(0)
>>> ledger = policy.init(key)
>>> query = Query(jnp.arange(8, dtype=jnp.int32), jnp.linspace(1, 0, 8),
...               jnp.ones(8, bool))
>>> truth = jnp.array([0, 1, 0, 0, 0, 0, 0, 0], jnp.float32)
>>> pay = lambda positions: (truth[positions], jnp.ones(len(positions), bool))
>>> ledger, info = pay_rounds(policy, key, ledger, query,
...                           ad.policy_context(query), pay)
>>> int(info.calls), int(info.rounds), int(jnp.argmax(info.scores))
(2, 1, 1)
"""

from earm_jax.base import Observation as Observation
from earm_jax.base import Query as Query
from earm_jax.policies.adaptive.answer_model import (
    truncation_corrected_variance as truncation_corrected_variance,
)
from earm_jax.policies.adaptive.config import MERGES as MERGES
from earm_jax.policies.adaptive.config import ORDER_FEATURES as ORDER_FEATURES
from earm_jax.policies.adaptive.config import STOP_RULES as STOP_RULES
from earm_jax.policies.adaptive.config import UNITS as UNITS
from earm_jax.policies.adaptive.config import UNSCORED_ORDERS as UNSCORED_ORDERS
from earm_jax.policies.adaptive.config import AdaptiveConfig as AdaptiveConfig
from earm_jax.policies.adaptive.config import (
    geometric_round_sizes as geometric_round_sizes,
)
from earm_jax.policies.adaptive.config import (
    validate_adaptive_config as validate_adaptive_config,
)
from earm_jax.policies.adaptive.order import order_features as order_features
from earm_jax.policies.adaptive.order import order_weights as order_weights
from earm_jax.policies.adaptive.policy import adaptive_policy as adaptive_policy
from earm_jax.policies.adaptive.policy import adaptive_query as adaptive_query
from earm_jax.policies.adaptive.policy import policy_context as policy_context
from earm_jax.policies.adaptive.policy import rounds_summary as rounds_summary
from earm_jax.policies.adaptive.policy import run_adaptive as run_adaptive
from earm_jax.policies.adaptive.policy import score_query as score_query
from earm_jax.policies.adaptive.state import AdaptiveInfo as AdaptiveInfo
from earm_jax.policies.adaptive.state import AdaptivePolicy as AdaptivePolicy
from earm_jax.policies.adaptive.state import Ledger as Ledger
from earm_jax.policies.adaptive.state import RoundState as RoundState
from earm_jax.policies.adaptive.state import similarity_ranks as similarity_ranks

__all__ = [
    "MERGES",
    "ORDER_FEATURES",
    "STOP_RULES",
    "UNSCORED_ORDERS",
    "UNITS",
    "AdaptiveConfig",
    "AdaptiveInfo",
    "AdaptivePolicy",
    "Ledger",
    "RoundState",
    "adaptive_policy",
    "geometric_round_sizes",
    "order_features",
    "order_weights",
    "rounds_summary",
    "adaptive_query",
    "policy_context",
    "run_adaptive",
    "score_query",
    "similarity_ranks",
    "truncation_corrected_variance",
    "validate_adaptive_config",
]
