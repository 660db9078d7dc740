"""The ``"gradient"`` solver: optax Adam steps on the same masked loss.

A check on the closed-form solvers (both reach the same objective) and a
template for losses without a closed form. The Adam state is the carry.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import optax

from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.model import loss, parameters
from earm_jax.core.padding import pad_parameters_like
from earm_jax.core.solvers.base import SolverAlgorithm, no_update


class GradientExtras(NamedTuple):
    """Attributes:
    optimizer_state: the optax Adam state over :class:`Parameters`."""

    optimizer_state: Any


def _optimizer(config: SolverConfig) -> optax.GradientTransformation:
    return optax.adam(config.learning_rate)


def init_extras(config: SolverConfig, params: Parameters) -> GradientExtras:
    return GradientExtras(_optimizer(config).init(params))


def refit(
    params: Parameters,
    extras: GradientExtras,
    state: SolverState,
    config: SolverConfig,
) -> tuple[Parameters, GradientExtras]:
    """``num_steps`` Adam steps on the history of queries ``< state.count``."""
    optimizer = _optimizer(config)
    grad_fn = jax.grad(loss)

    def one_step(_, carry):
        p, o = carry
        grads = grad_fn(p, state, config.l2)
        updates, o = optimizer.update(grads, o, p)
        return optax.apply_updates(p, updates), o

    params, opt_state = jax.lax.fori_loop(
        0, config.num_steps, one_step, (params, extras.optimizer_state)
    )
    return params, GradientExtras(opt_state)


def grow_extras(
    extras: GradientExtras, num_memories: int, capacity: int
) -> GradientExtras:
    """Zero-pads the Adam moments (new rows start with no momentum)."""
    return GradientExtras(
        jax.tree.map(
            lambda leaf: (
                pad_parameters_like(leaf, num_memories, capacity)
                if isinstance(leaf, Parameters)
                else leaf
            ),
            extras.optimizer_state,
            is_leaf=lambda leaf: isinstance(leaf, Parameters),
        )
    )


def extras_from_history(state: SolverState, config: SolverConfig) -> GradientExtras:
    """A fresh Adam state at the state's parameters (no momentum carried)."""
    return init_extras(config, parameters(state))


ALGORITHM = SolverAlgorithm(
    name="gradient",
    init_extras=init_extras,
    refit=refit,
    update=no_update,
    grow_extras=grow_extras,
    extras_from_history=extras_from_history,
)

__all__ = ["ALGORITHM", "GradientExtras", "refit"]
