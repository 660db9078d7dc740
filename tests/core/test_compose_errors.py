"""compose_solver refuses a bad part naming the part and its field.

Each part is checked before the flat ``SolverConfig`` is built, so no message
speaks of ``SolverConfig`` fields the caller never wrote, and nothing rewrites
another check's message after the fact.
"""

from __future__ import annotations

import pytest

import earm_jax as ej
from earm_jax.core import compose
from earm_jax.core.algorithms import bind
from earm_jax.policies import adaptive as ad

POOL = 20

# (the parts that differ from a valid solver, what the message must name)
REFUSED = {
    "model_num_memories": (
        dict(model=ej.LowRankModel(num_memories=0)),
        "LowRankModel.num_memories must be a positive int, got 0",
    ),
    "model_rank": (
        dict(model=ej.LowRankModel(num_memories=60, rank=-1)),
        "LowRankModel.rank must be an int >= 0, got -1",
    ),
    "rows_capacity": (
        dict(history=ej.RowHistory(capacity=0, pool_size=POOL)),
        "RowHistory.capacity must be a positive int, got 0",
    ),
    "rows_pool_size": (
        dict(history=ej.RowHistory(capacity=8, pool_size=0)),
        "RowHistory.pool_size must be a positive int, got 0",
    ),
    "rows_max_budget": (
        dict(history=ej.RowHistory(capacity=8, pool_size=POOL, max_budget=0)),
        "RowHistory.max_budget must be a positive int, got 0",
    ),
    "rows_max_budget_above_pool": (
        dict(history=ej.RowHistory(capacity=8, pool_size=POOL, max_budget=POOL + 1)),
        "RowHistory.max_budget=21 exceeds pool_size=20",
    ),
    "log_capacity": (
        dict(
            history=ej.LogHistory(capacity=-3, pool_size=POOL, entry_capacity=100),
            algorithm=ej.incremental(),
        ),
        "LogHistory.capacity must be a positive int, got -3",
    ),
    "log_pool_size": (
        dict(
            history=ej.LogHistory(capacity=8, pool_size=2.5, entry_capacity=100),
            algorithm=ej.incremental(),
        ),
        "LogHistory.pool_size must be a positive int, got 2.5",
    ),
    "log_max_budget": (
        dict(
            history=ej.LogHistory(8, POOL, entry_capacity=100, max_budget=-1),
            algorithm=ej.incremental(),
        ),
        "LogHistory.max_budget must be a positive int, got -1",
    ),
    "log_entry_capacity": (
        dict(
            history=ej.LogHistory(8, POOL, entry_capacity=-1),
            algorithm=ej.incremental(),
        ),
        "LogHistory.entry_capacity must be an int >= 0, got -1",
    ),
    # 0 would be SolverConfig's row layout; a log must hold one full query.
    "log_entry_capacity_below_a_query": (
        dict(
            history=ej.LogHistory(8, POOL, entry_capacity=0),
            algorithm=ej.incremental(),
        ),
        "LogHistory.entry_capacity=0 is smaller than max_budget=20",
    ),
    "log_with_another_algorithm": (
        dict(history=ej.LogHistory(8, POOL, entry_capacity=100)),
        "LogHistory .* is supported by incremental",
    ),
    "block_entries_with_rows": (
        dict(algorithm=ej.incremental(block_entries=2 * POOL)),
        r"incremental\(block_entries=...\) bounds a step's entries of a LogHistory",
    ),
    "block_entries_below_two_rows": (
        dict(
            history=ej.LogHistory(8, POOL, entry_capacity=100),
            algorithm=ej.incremental(block_entries=3),
        ),
        r"incremental\(block_entries=3\) is below 2 \* LogHistory.max_budget=40",
    ),
    "als_l2": (dict(algorithm_factory=lambda: ej.als(l2=0.0)), "als: l2"),
    "als_sweeps": (dict(algorithm_factory=lambda: ej.als(sweeps=-1)), "als: sweeps"),
    "als_tolerance": (
        dict(algorithm_factory=lambda: ej.als(tolerance=-0.1)),
        "als: tolerance",
    ),
    "incremental_l2": (
        dict(algorithm_factory=lambda: ej.incremental(l2=-1.0)),
        "incremental: l2",
    ),
    "incremental_refresh_rows": (
        dict(algorithm_factory=lambda: ej.incremental(refresh_rows=1.5)),
        "incremental: refresh_rows",
    ),
    "incremental_block_entries": (
        dict(algorithm_factory=lambda: ej.incremental(block_entries=-2)),
        "incremental: block_entries",
    ),
    "gradient_l2": (
        dict(algorithm_factory=lambda: ej.gradient(l2=0.0)),
        "gradient: l2",
    ),
    "gradient_steps": (
        dict(algorithm_factory=lambda: ej.gradient(steps=-2)),
        "gradient: steps",
    ),
    "gradient_learning_rate": (
        dict(algorithm_factory=lambda: ej.gradient(learning_rate=0.0)),
        "gradient: learning_rate",
    ),
    # bind does not check what it binds; compose_solver does, naming the
    # algorithm and the field.
    "bound_l2": (
        dict(algorithm=bind(ej.SOLVERS["als"], l2=0.0)),
        "als: l2 must be > 0, got 0.0",
    ),
    "bound_num_sweeps": (
        dict(algorithm=bind(ej.SOLVERS["als"], num_sweeps=-1)),
        "als: num_sweeps must be an int >= 0, got -1",
    ),
    "policy_pool_size": (
        dict(history=ej.RowHistory(capacity=8, pool_size=10)),
        r"Policy.pool_size=20 .* but RowHistory.pool_size=10",
    ),
    "policy_max_calls": (
        dict(
            history=ej.RowHistory(capacity=8, pool_size=POOL, max_budget=4),
            policy=ad.adaptive_policy(
                ad.AdaptiveConfig(pool_size=POOL, round_sizes=(3, 3))
            ),
        ),
        "the policy may pay 6 calls per query but RowHistory.max_budget=4",
    ),
}


def _parts(**changed):
    parts = dict(
        model=ej.LowRankModel(num_memories=60, rank=2),
        history=ej.RowHistory(capacity=8, pool_size=POOL),
        algorithm=ej.gradient(),
        policy=ej.paper_policy(pool_size=POOL),
    )
    parts.update(changed)
    return parts


def _no_flat_config(*args, **kwargs):
    raise AssertionError("a SolverConfig was built before the parts were checked")


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_refused_field_is_named_by_its_part(case, monkeypatch):
    changed, message = REFUSED[case]
    changed = dict(changed)
    factory = changed.pop("algorithm_factory", None)
    if factory is not None:
        # The factories refuse their own arguments, before compose_solver runs.
        with pytest.raises(ej.InputValueError, match=message):
            factory()
        return
    monkeypatch.setattr(compose, "SolverConfig", _no_flat_config)
    with pytest.raises(ej.InputValueError, match=message) as raised:
        compose.compose_solver(**_parts(**changed))
    assert "SolverConfig" not in str(raised.value)
    # Raised directly, not re-raised from a check on the flat config.
    assert raised.value.__context__ is None


def test_no_message_is_rewritten_after_the_fact():
    assert not hasattr(compose, "_owner_names")
    assert not hasattr(compose, "re")


def test_valid_parts_still_compose():
    solver = ej.compose_solver(
        **_parts(
            history=ej.LogHistory(8, POOL, entry_capacity=100),
            algorithm=ej.incremental(block_entries=2 * POOL),
        )
    )
    assert (solver.config.entry_capacity, solver.config.block_entries) == (
        100,
        2 * POOL,
    )
