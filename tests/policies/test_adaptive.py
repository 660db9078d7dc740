"""The adaptive multi-round policy: the hard call ledger, one code path for the
traced simulator and the host loop, causality, no recompiles."""

from __future__ import annotations

import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from earm_jax.base import Query
from earm_jax.contrib.stop_rules import REJECTED_STOP_RULES, rejected_stop_rule
from earm_jax.policies import adaptive as ad

# Slow: the adaptive policy: a ledger test per stop rule, hypothesis streams; ~2-4 min.
pytestmark = pytest.mark.slow

POOL = 24
CONFIG = ad.AdaptiveConfig(pool_size=POOL, round_sizes=(2, 4, 8), max_carry=30)


def _stream(seed: int, num_queries: int = 12, pool: int = POOL):
    rng = np.random.default_rng(seed)
    similarity = np.sort(rng.normal(size=(num_queries, pool)), axis=1)[:, ::-1]
    valid = np.ones((num_queries, pool), bool)
    valid[:, pool - rng.integers(0, pool // 2) :] = False
    relevant = (rng.random((num_queries, pool)) < 0.08) & valid
    scores = np.clip(relevant + 0.15 * rng.normal(size=relevant.shape), 0, 1)
    queries = Query(
        jnp.tile(jnp.arange(pool, dtype=jnp.int32), (num_queries, 1)),
        jnp.asarray(np.where(valid, similarity, -np.inf), jnp.float32),
        jnp.asarray(valid),
    )
    return queries, jnp.asarray(np.where(valid, scores, 0.0), jnp.float32)


def _accrued(config, usable_counts):
    per_query = np.floor(config.call_budget * ad.UNITS * np.asarray(usable_counts))
    return np.cumsum(per_query) / ad.UNITS


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    budget=st.sampled_from([0.0, 0.07, 0.15, 0.25, 0.5, 1.0]),
    counts=st.lists(st.integers(0, POOL), min_size=16, max_size=16),
    adversary=st.sampled_from(["zeros", "ones", "noise", "alternate"]),
    seed=st.integers(0, 2**16),
)
def test_calls_never_exceed_the_accrued_allowance(budget, counts, adversary, seed):
    """Running total of calls <= allowance accrued so far, at every query, for
    scorers that never settle (all zeros), always settle (all ones), noise, and
    pools that come and go."""
    config = CONFIG._replace(call_budget=budget)
    rng = np.random.default_rng(seed)
    num_queries = len(counts)
    valid = np.arange(POOL)[None, :] < np.asarray(counts)[:, None]
    if adversary == "zeros":
        scores = np.zeros((num_queries, POOL))
    elif adversary == "ones":
        scores = np.ones((num_queries, POOL))
    elif adversary == "alternate":
        scores = np.tile(np.arange(POOL) % 2, (num_queries, 1)).astype(float)
    else:
        scores = rng.random((num_queries, POOL))
    queries = Query(
        jnp.tile(jnp.arange(POOL, dtype=jnp.int32), (num_queries, 1)),
        jnp.asarray(np.where(valid, -np.arange(POOL)[None, :], -np.inf), jnp.float32),
        jnp.asarray(valid),
    )
    ledger, info = _BUDGETED(queries, jnp.asarray(scores, jnp.float32), budget)
    calls = np.asarray(info.calls)
    assert np.all(np.cumsum(calls) <= _accrued(config, counts) + 1e-9)
    assert np.all(calls <= config.per_query_cap)
    assert np.all(calls <= np.asarray(counts))
    assert np.all(np.asarray(info.rounds) <= config.num_rounds)
    assert int(ledger.balance) >= 0
    # Only usable candidates are ever scored.
    assert not np.any(np.asarray(info.anchors) & ~valid)


_JITTED: dict = {}
_BUDGETED = jax.jit(
    lambda q, s, b: ad.run_adaptive(ad.adaptive_policy(CONFIG), q, s, call_budget=b)
)


def _run(policy):
    if policy.config not in _JITTED:
        _JITTED[policy.config] = jax.jit(lambda q, s: ad.run_adaptive(policy, q, s))
    return _JITTED[policy.config]


def test_traced_step_equals_the_host_round_loop():
    """The traced rounds (fori_loop, jitted) and ``score_query`` (a Python
    loop calling a scorer once per round) give the same anchors, scores and
    ledger."""
    policy = ad.adaptive_policy(CONFIG)
    queries, scores = _stream(0, num_queries=6)
    step = jax.jit(lambda ledger, q, row: ad.adaptive_query(policy, ledger, q, row))
    traced_ledger = host_ledger = policy.init()
    requests = []
    for t in range(scores.shape[0]):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], queries)
        traced_ledger, traced = step(traced_ledger, query, scores[t])

        def scorer(mask, t=t):
            requests.append(int(mask.sum()))
            return jnp.where(mask, scores[t], jnp.nan)

        host_ledger, host = ad.score_query(policy, host_ledger, query, scorer)
        np.testing.assert_array_equal(traced.anchors, host.anchors)
        np.testing.assert_allclose(traced.scores, host.scores, rtol=1e-6)
        assert int(traced.calls) == int(host.calls)
        assert int(traced.rounds) == int(host.rounds)
    for got, want in zip(
        jax.tree.leaves(traced_ledger), jax.tree.leaves(host_ledger), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert sum(requests) == int(traced_ledger.spent)


def test_vmap_over_streams_equals_a_loop():
    policy = ad.adaptive_policy(CONFIG)
    streams = [_stream(seed) for seed in range(3)]
    queries = jax.tree.map(lambda *leaves: jnp.stack(leaves), *[s[0] for s in streams])
    scores = jnp.stack([s[1] for s in streams])
    batched = jax.jit(jax.vmap(lambda q, s: ad.run_adaptive(policy, q, s)))
    _, infos = batched(queries, scores)
    for i, (q, s) in enumerate(streams):
        _, info = _run(policy)(q, s)
        for got, want in zip(
            jax.tree.leaves(infos), jax.tree.leaves(info), strict=True
        ):
            np.testing.assert_allclose(np.asarray(got)[i], want, rtol=1e-5, atol=1e-7)


def test_causal_future_scores_change_nothing_before():
    policy = ad.adaptive_policy(CONFIG)
    queries, scores = _stream(1)
    _, base = _run(policy)(queries, scores)
    changed = scores.at[7:].set(1.0 - scores[7:])
    _, other = _run(policy)(queries, changed)
    for got, want in zip(jax.tree.leaves(other), jax.tree.leaves(base), strict=True):
        np.testing.assert_array_equal(np.asarray(got)[:7], np.asarray(want)[:7])


def test_second_call_does_not_recompile():
    policy = ad.adaptive_policy(CONFIG)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(queries, scores):
        return ad.run_adaptive(policy, queries, scores)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(ledger, query, row):
        return ad.adaptive_query(policy, ledger, query, row)

    for seed in (0, 1):
        queries, scores = _stream(seed)
        ledger, _ = run(queries, scores)
        step(ledger, jax.tree.map(lambda leaf: leaf[0], queries), scores[0])


def test_finds_the_evidence_and_ranks_it_first():
    """With a clean scorer, a query whose evidence sits at similarity rank 5 is
    searched past the first round and the evidence ranks first."""
    config = ad.AdaptiveConfig(pool_size=POOL, round_sizes=(2, 4, 8), call_budget=1.0)
    policy = ad.adaptive_policy(config)
    query = Query(
        jnp.arange(POOL, dtype=jnp.int32),
        -jnp.arange(POOL, dtype=jnp.float32),
        jnp.ones(POOL, bool),
    )
    truth = jnp.zeros(POOL).at[5].set(1.0)
    ledger, info = ad.score_query(policy, policy.init(), query, lambda mask: truth)
    assert int(info.rounds) == 2 and int(info.calls) == 6
    assert int(jnp.argmax(info.scores)) == 5
    # The default merge keeps a direct "no" above the unscored candidates;
    # confident_no sinks it below them.
    assert float(info.scores[0]) > float(info.scores[10])
    sinking = ad.adaptive_policy(config._replace(merge="confident_no"))
    _, info = ad.score_query(sinking, sinking.init(), query, lambda mask: truth)
    assert float(info.scores[0]) < float(info.scores[10])


def test_noise_estimate_tracks_the_scorer():
    """Estimated from the answers alone; close at noise 0.1, biased low (but
    larger) at 0.3, where the learned non-relevant location absorbs some noise."""
    rng = np.random.default_rng(0)
    policy = ad.adaptive_policy(ad.AdaptiveConfig(pool_size=50, call_budget=1.0))
    run = jax.jit(lambda q, s: ad.run_adaptive(policy, q, s))
    estimates = []
    for noise in (0.1, 0.3):
        relevant = rng.random((40, 50)) < 0.03
        scores = np.clip(relevant + noise * rng.normal(size=relevant.shape), 0, 1)
        queries = Query(
            jnp.tile(jnp.arange(50, dtype=jnp.int32), (40, 1)),
            jnp.tile(-jnp.arange(50, dtype=jnp.float32), (40, 1)),
            jnp.ones((40, 50), bool),
        )
        _, info = run(queries, jnp.asarray(scores, jnp.float32))
        estimates.append(float(info.noise[-1]))
    assert abs(estimates[0] - 0.1) < 0.035
    assert 0.15 < estimates[1] < 0.35 and estimates[1] > 1.5 * estimates[0]


@pytest.mark.parametrize(
    "field, value",
    [
        ("pool_size", 0),
        ("round_sizes", ()),
        ("round_sizes", (4, 0)),
        ("call_budget", 1.5),
        ("max_per_query", -1),
        ("stop_rule", "never"),
        ("stop_rule", object()),
        ("merge", "mystery"),
    ],
)
def test_bad_config_raises_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ad.adaptive_policy(ad.AdaptiveConfig(pool_size=8)._replace(**{field: value}))


STOP_RULES = {"settle_or_spill": "settle_or_spill"} | REJECTED_STOP_RULES


@pytest.mark.parametrize("stop_rule", STOP_RULES)
def test_every_stop_rule_keeps_the_ledger(stop_rule):
    """The hard cap holds for every stop rule (not only the default, also the
    rejected ones of earm_jax.contrib), for a scorer that never settles and one
    that settles at once."""
    config = CONFIG._replace(stop_rule=STOP_RULES[stop_rule], call_budget=0.2)
    policy = ad.adaptive_policy(config)
    queries, _ = _stream(3, num_queries=10)
    usable = np.asarray(queries.valid)
    # Two streams in one call: a scorer that never settles, one that settles.
    both = jax.tree.map(lambda leaf: jnp.stack([leaf, leaf]), queries)
    answers = jnp.stack([jnp.zeros(usable.shape), jnp.ones(usable.shape)])
    run = jax.jit(jax.vmap(lambda q, s: ad.run_adaptive(policy, q, s)))
    _, info = run(both, answers.astype(jnp.float32))
    for calls in np.asarray(info.calls):
        assert np.all(np.cumsum(calls) <= _accrued(config, usable.sum(1)) + 1e-9)
        assert np.all(calls <= config.per_query_cap)
    assert np.asarray(info.calls)[0].sum() > 0


def test_the_default_ledger_carries_no_price():
    """Price pacing is read only by rejected stop rules: the shipped ledger
    carries nothing for the stop rule, a price rule carries its paced price."""
    ledger = ad.adaptive_policy(CONFIG).init()
    assert ledger.stop_state == ()
    assert "price" not in ad.Ledger._fields
    priced = CONFIG._replace(stop_rule=rejected_stop_rule("price", 0.2, 0.5))
    policy = ad.adaptive_policy(priced)
    queries, _ = _stream(3, num_queries=10)
    scores = jnp.ones(queries.valid.shape, jnp.float32)
    final, _ = jax.jit(lambda q, s: ad.run_adaptive(policy, q, s))(queries, scores)
    assert float(policy.init().stop_state) == pytest.approx(0.2)
    assert 1e-4 <= float(final.stop_state) <= 1.0
    assert float(final.stop_state) != pytest.approx(0.2)  # paced


@pytest.mark.parametrize(
    "field, value", [("initial_price", 0.0), ("pacing_rate", -1.0)]
)
def test_bad_price_pacing_raises_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        rejected_stop_rule("price", **{field: value})


def test_rejected_stop_rules_stay_off_the_default_path():
    """The package and the default policy, built and stepped, never import the
    rejected stop rules (earm_jax.contrib)."""
    code = (
        "import sys, jax.numpy as jnp\n"
        "import earm_jax\n"
        "import earm_jax.policies.adaptive as ad\n"
        "from earm_jax.base import Query\n"
        "config = ad.AdaptiveConfig(pool_size=4, round_sizes=(2,))\n"
        "policy = ad.adaptive_policy(config)\n"
        "query = Query(jnp.arange(4, dtype=jnp.int32), jnp.linspace(1, 0, 4),\n"
        "              jnp.ones(4, bool))\n"
        "ad.adaptive_query(policy, policy.init(), query, jnp.zeros(4))\n"
        "print(sorted(m for m in sys.modules if m.startswith('earm_jax.contrib')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[]"


def test_a_settled_query_spends_only_what_would_spill():
    """settle_or_spill: with the carry cap far away, a query whose first round
    finds the evidence stops there; with the balance at the cap, it goes on but
    spends no more than the calls the cap would discard."""
    config = ad.AdaptiveConfig(
        pool_size=POOL, round_sizes=(2, 4, 8), call_budget=0.5, max_carry=3
    )
    policy = ad.adaptive_policy(config)
    query = Query(
        jnp.arange(POOL, dtype=jnp.int32),
        -jnp.arange(POOL, dtype=jnp.float32),
        jnp.ones(POOL, bool),
    )
    truth = jnp.zeros(POOL).at[0].set(1.0)
    empty = policy.init()
    _, info = ad.score_query(policy, empty, query, lambda mask: truth)
    # Allowance 12 calls, carry cap 3: it spends until only 3 are left.
    assert int(info.rounds) == 3 and int(info.calls) == 12 - 3
    tight = ad.adaptive_policy(config._replace(max_carry=20))
    _, info = ad.score_query(tight, tight.init(), query, lambda mask: truth)
    assert int(info.rounds) == 1 and int(info.calls) == 2


def test_confident_no_keeps_middling_answers_above_the_unscored():
    """A graded scorer's middling answer (0.45) stays above unscored candidates
    under merge="confident_no" and sinks under "evidence"; a clean "no" sinks
    under both."""
    query = Query(
        jnp.arange(POOL, dtype=jnp.int32),
        -jnp.arange(POOL, dtype=jnp.float32),
        jnp.ones(POOL, bool),
    )
    answers = jnp.zeros(POOL).at[0].set(1.0).at[1].set(0.45)
    ranks = {}
    for merge in ("confident_no", "evidence"):
        config = ad.AdaptiveConfig(
            pool_size=POOL,
            round_sizes=(4, 4),
            call_budget=1.0,
            merge=merge,
            noise_prior=0.1,
        )
        policy = ad.adaptive_policy(config)
        _, info = ad.score_query(policy, policy.init(), query, lambda mask: answers)
        scores = np.asarray(info.scores)
        ranks[merge] = scores
        assert scores[0] == scores.max()
        assert scores[2] < scores[10]  # a clean "no" sinks
    assert ranks["confident_no"][1] > ranks["confident_no"][10]
    assert ranks["evidence"][1] < ranks["evidence"][10]


def test_answers_first_never_sinks_an_answer_and_keeps_the_learned_order():
    """The default merge ranks every scored candidate (a clean 0 too) above
    every unscored one, by its answer; the unscored keep the order the policy
    learned (here: the reverse of similarity, which the answers taught it)."""
    num_queries = 12
    similarity = -jnp.arange(POOL, dtype=jnp.float32)
    queries = Query(
        jnp.tile(jnp.arange(POOL, dtype=jnp.int32), (num_queries, 1)),
        jnp.tile(similarity, (num_queries, 1)),
        jnp.ones((num_queries, POOL), bool),
    )
    # The less similar, the likelier evidence: among the scored (the 8 most
    # similar) and in the tail.
    answers = (
        jnp.zeros((num_queries, POOL))
        .at[:, 5:8]
        .set(1.0)
        .at[:, -3:]
        .set(1.0)
        .at[:, 0]
        .set(0.3)
    )
    config = ad.AdaptiveConfig(pool_size=POOL, round_sizes=(4, 4), call_budget=1.0)
    assert config.merge == "answers_first"
    _, info = ad.run_adaptive(ad.adaptive_policy(config), queries, answers)
    scores, scored = np.asarray(info.scores[-1]), np.asarray(info.anchors[-1])
    assert scored.any() and not scored.all()
    assert scores[scored].min() > scores[~scored].max()
    ranked = np.argsort(-scores[scored])
    np.testing.assert_array_equal(
        np.asarray(answers[-1])[scored][ranked],
        np.sort(np.asarray(answers[-1])[scored])[::-1],
    )
    unscored = np.flatnonzero(~scored)
    order = unscored[np.argsort(-scores[unscored])]
    assert order[0] > order[-1]  # the least similar unscored come first
