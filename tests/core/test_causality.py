"""Causal masking: nothing about query t may depend on any query after t."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, perturb_future, planted_stream

import earm_jax as ej


@functools.cache
def _jitted_run(config: ej.SolverConfig):
    """One compiled ``run`` per solver config: the seeds share their shapes."""
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    return jax.jit(functools.partial(ej.run, solver))


@pytest.mark.parametrize("solver_name", ["als", "gradient"])
@pytest.mark.parametrize("seed,cut", [(0, 4), (1, 13), (2, 22)])
def test_future_queries_never_change_the_past(solver_name, seed, cut):
    stream, _ = planted_stream(seed, num_queries=26, noise=0.05)
    run = _jitted_run(config_for(stream, solver=solver_name, num_steps=5))
    _, infos = run(jax.random.key(seed), stream)
    _, perturbed = run(jax.random.key(seed), perturb_future(stream, cut, seed + 100))
    for field in infos._fields:
        before = np.asarray(getattr(infos, field))[: cut + 1]
        after = np.asarray(getattr(perturbed, field))[: cut + 1]
        np.testing.assert_array_equal(before, after, err_msg=field)
    # And the future really differs, so the check has teeth.
    assert not np.array_equal(
        np.asarray(infos.scores)[cut + 1 :], np.asarray(perturbed.scores)[cut + 1 :]
    )


def test_unanchored_scores_are_never_read():
    """The solver sees the scorer's answer only at the anchors it selected."""
    stream, _ = planted_stream(3, num_queries=30, noise=0.05)
    config = config_for(stream)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    run = jax.jit(functools.partial(ej.run, solver))
    _, infos = run(jax.random.key(0), stream)
    anchors = np.asarray(infos.anchors)
    hidden = np.where(anchors, stream.scores, -7.0).astype(np.float32)
    _, masked = run(jax.random.key(0), stream._replace(scores=jnp.asarray(hidden)))
    np.testing.assert_array_equal(np.asarray(infos.scores), np.asarray(masked.scores))
    assert (~anchors).sum() > 0
