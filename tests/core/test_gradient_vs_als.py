"""Both solvers minimise the same masked loss: they reach the same objective."""

from __future__ import annotations

import functools

import jax
import optax
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.core import model as solver_model
from earm_jax.core.solvers import als as als_solver

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def test_als_and_gradient_reach_the_same_objective_on_the_same_history():
    stream, _ = planted_stream(21, num_queries=25, noise=0.05)
    config = config_for(stream, rank=2)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    state, _ = jax.jit(functools.partial(ej.run, solver))(jax.random.key(0), stream)
    start = solver_model.parameters(state)

    @jax.jit
    def als_fit(params):
        return jax.lax.fori_loop(
            0, 300, lambda _, p: als_solver.als_sweep(p, state, config.l2), params
        )

    optimizer = optax.adam(optax.cosine_decay_schedule(0.03, 4000, alpha=0.01))

    @jax.jit
    def gradient(params):
        grad = jax.grad(solver_model.loss)

        def step(_, carry):
            p, o = carry
            # optax's Adam promotes its int32 step count (strict-dtype runs).
            with jax.numpy_dtype_promotion("standard"):
                updates, o = optimizer.update(grad(p, state, config.l2), o, p)
            return optax.apply_updates(p, updates), o

        return jax.lax.fori_loop(0, 4000, step, (params, optimizer.init(params)))[0]

    als_loss = float(solver_model.loss(als_fit(start), state, config.l2))
    gradient_loss = float(solver_model.loss(gradient(start), state, config.l2))
    start_loss = float(solver_model.loss(start, state, config.l2))
    print(
        f"loss: start {start_loss:.5f} als {als_loss:.5f} gradient {gradient_loss:.5f}"
    )
    assert abs(als_loss - gradient_loss) <= 0.01 * als_loss
    assert als_loss < start_loss


def test_online_gradient_solver_tracks_the_als_solver():
    """The per-query solvers (warm-started, capped) agree on completed scores."""
    stream, _ = planted_stream(22, num_queries=30, noise=0.05)
    infos = {}
    for name in ("als", "gradient"):
        config = config_for(stream, rank=2, solver=name, num_sweeps=10, num_steps=100)
        solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
        _, infos[name] = jax.jit(functools.partial(ej.run, solver))(
            jax.random.key(0), stream
        )
    difference = abs(infos["als"].completed - infos["gradient"].completed)[10:]
    spread = float(stream.scores.std())
    assert float(difference.mean()) < 0.1 * spread, (float(difference.mean()), spread)
