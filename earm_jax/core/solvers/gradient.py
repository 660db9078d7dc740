"""The ``"gradient"`` solver: optax steps on the same masked loss.

A check on the closed-form solvers (both reach the same objective) and a
template for losses without a closed form. The registered algorithm takes
Adam steps at ``SolverConfig.learning_rate``;
:func:`algorithm_with_optimizer` builds the same algorithm around any optax
``GradientTransformation``. The optimizer's state is the carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import optax

from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.model import loss, parameters
from earm_jax.core.padding import pad_parameters_like
from earm_jax.core.solvers.base import SolverAlgorithm, no_update


class GradientExtras(NamedTuple):
    """Attributes:
    optimizer_state: the optax optimizer's state over :class:`Parameters`."""

    optimizer_state: Any


def adam_at_config_rate(config: SolverConfig) -> optax.GradientTransformation:
    """The registered algorithm's optimizer: Adam at ``config.learning_rate``."""
    return optax.adam(config.learning_rate)


def refit_with(
    optimizer: optax.GradientTransformation,
    params: Parameters,
    extras: GradientExtras,
    state: SolverState,
    config: SolverConfig,
) -> tuple[Parameters, GradientExtras]:
    """``num_steps`` optimizer steps on the history of queries ``< state.count``."""
    grad_fn = jax.grad(loss)

    def one_step(_, carry):
        p, o = carry
        grads = grad_fn(p, state, config.l2)
        # optax's Adam raises its int32 step count to a float power: allowed
        # here also where the caller runs JAX with strict dtype promotion.
        with jax.numpy_dtype_promotion("standard"):
            updates, o = optimizer.update(grads, o, p)
        return optax.apply_updates(p, updates), o

    params, opt_state = jax.lax.fori_loop(
        0, config.num_steps, one_step, (params, extras.optimizer_state)
    )
    return params, GradientExtras(opt_state)


def grow_extras(
    extras: GradientExtras, num_memories: int, capacity: int
) -> GradientExtras:
    """Zero-pads the optimizer's per-parameter state (new rows start with no
    momentum); leaves that are not shaped like the parameters stay as they are."""
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


def algorithm_with_optimizer(
    optimizer_of: Callable[[SolverConfig], optax.GradientTransformation],
) -> SolverAlgorithm:
    """The ``"gradient"`` algorithm around the optimizer ``optimizer_of(config)``.

    Args:
      optimizer_of: ``config -> GradientTransformation``; called at trace time
        (``config`` is static), e.g. ``lambda config: optax.sgd(0.1)``.
    """

    def init_extras(config: SolverConfig, params: Parameters) -> GradientExtras:
        return GradientExtras(optimizer_of(config).init(params))

    def refit(
        params: Parameters,
        extras: GradientExtras,
        state: SolverState,
        config: SolverConfig,
    ) -> tuple[Parameters, GradientExtras]:
        """``num_steps`` steps of ``optimizer_of(config)`` (:func:`refit_with`)."""
        return refit_with(optimizer_of(config), params, extras, state, config)

    def extras_from_history(state: SolverState, config: SolverConfig) -> GradientExtras:
        """A fresh optimizer state at the state's parameters (no momentum)."""
        return init_extras(config, parameters(state))

    return SolverAlgorithm(
        name="gradient",
        init_extras=init_extras,
        refit=refit,
        update=no_update,
        grow_extras=grow_extras,
        extras_from_history=extras_from_history,
    )


ALGORITHM = algorithm_with_optimizer(adam_at_config_rate)

refit = ALGORITHM.refit
"""The registered algorithm's ``refit``: ``num_steps`` Adam steps at
``config.learning_rate``."""


__all__ = [
    "ALGORITHM",
    "GradientExtras",
    "adam_at_config_rate",
    "algorithm_with_optimizer",
    "refit",
    "refit_with",
]
