"""Algorithm factories: each solver algorithm with its own arguments (optax style).

``als(...)``, ``incremental(...)`` and ``gradient(...)`` return a
:class:`~earm_jax.core.solvers.base.SolverAlgorithm` that binds its
hyperparameters, instead of reading them from the fields of a
:class:`~earm_jax.core.config.SolverConfig` that cover all three algorithms.
Pass one to :func:`~earm_jax.core.compose.compose_solver` (or as
``online_solver(config, policy, algorithm)``): the bound values are written
into the solver's config, so ``OnlineSolver.config`` reports what is used.

>>> import optax
>>> import earm_jax as ej
>>> dict(ej.als(sweeps=5).hyperparameters)
{'l2': 0.1, 'num_sweeps': 5, 'tolerance': 0.0}
>>> clipped_sgd = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1))
>>> dict(ej.gradient(clipped_sgd, steps=10).hyperparameters)
{'l2': 0.1, 'num_steps': 10}

Each factory's result is the registered algorithm of the same name with the
config's hyperparameter fields replaced by the factory's arguments, so for
equal values the two compute the same thing, bit for bit.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import optax

from earm_jax.core.config import InputTypeError, InputValueError, SolverConfig
from earm_jax.core.solvers import als as als_module
from earm_jax.core.solvers import gradient as gradient_module
from earm_jax.core.solvers import incremental as incremental_module
from earm_jax.core.solvers.base import SolverAlgorithm, no_refit, no_update

DEFAULT_LEARNING_RATE = SolverConfig._field_defaults["learning_rate"]


def _require_positive(factory: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise InputValueError(f"{factory}: {name} must be a number > 0, got {value!r}")


def _require_non_negative(factory: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not value >= 0:
        raise InputValueError(f"{factory}: {name} must be a number >= 0, got {value!r}")


def _require_count(factory: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputValueError(f"{factory}: {name} must be an int >= 0, got {value!r}")


def bind(algorithm: SolverAlgorithm, **fields: Any) -> SolverAlgorithm:
    """``algorithm`` with the config fields ``fields`` fixed to the given values.

    Whatever config the solver passes, the bound functions see these values;
    ``hyperparameters`` lists them so that
    :func:`~earm_jax.core.online.online_solver` reports them in its config.
    ``no_refit`` / ``no_update`` stay themselves (callers test for them).
    """
    unknown = sorted(set(fields) - set(SolverConfig._fields))
    if unknown:
        raise InputValueError(f"not SolverConfig fields: {unknown}")

    def bound(config: SolverConfig) -> SolverConfig:
        return config._replace(**fields)

    refit, update = algorithm.refit, algorithm.update
    return algorithm._replace(
        init_extras=lambda config, params: algorithm.init_extras(bound(config), params),
        refit=(
            refit
            if refit is no_refit
            else lambda params, extras, state, config: refit(
                params, extras, state, bound(config)
            )
        ),
        update=(
            update
            if update is no_update
            else lambda state, config: update(state, bound(config))
        ),
        extras_from_history=lambda state, config: algorithm.extras_from_history(
            state, bound(config)
        ),
        hyperparameters=tuple(fields.items()),
    )


def als(l2: float = 0.1, sweeps: int = 3, tolerance: float = 0.0) -> SolverAlgorithm:
    """Alternating exact ridge solves over the whole history
    (:mod:`earm_jax.core.solvers.als`).

    Args:
      l2: ridge penalty :math:`\\lambda` on biases and factors.
      sweeps: warm-started sweeps per query (an upper bound when
        ``tolerance > 0``).
      tolerance: stop the sweeps once the relative decrease of the loss is
        below this (0: always ``sweeps``).
    """
    _require_positive("als", "l2", l2)
    _require_count("als", "sweeps", sweeps)
    _require_non_negative("als", "tolerance", tolerance)
    return bind(als_module.ALGORITHM, l2=l2, num_sweeps=sweeps, tolerance=tolerance)


def incremental(
    l2: float = 0.1, refresh_rows: int = 8, block_entries: int = 0
) -> SolverAlgorithm:
    """Block ridge solves over a bounded block per query, from per-memory
    sufficient statistics: constant cost per query
    (:mod:`earm_jax.core.solvers.incremental`).

    Args:
      l2: ridge penalty :math:`\\lambda` on biases and factors.
      refresh_rows: earlier history rows re-solved (round robin) per query
        besides the new one.
      block_entries: with a history kept as a log
        (:class:`~earm_jax.core.compose.LogHistory`), the most entries one
        step visits (``>= 2 * max_budget``); 0: the whole block every step.
    """
    _require_positive("incremental", "l2", l2)
    _require_count("incremental", "refresh_rows", refresh_rows)
    _require_count("incremental", "block_entries", block_entries)
    return bind(
        incremental_module.ALGORITHM,
        l2=l2,
        refresh_rows=refresh_rows,
        block_entries=block_entries,
    )


def gradient(
    optimizer: optax.GradientTransformation | None = None,
    steps: int = 20,
    l2: float = 0.1,
    learning_rate: float | None = None,
) -> SolverAlgorithm:
    """Optimizer steps on the masked loss (:mod:`earm_jax.core.solvers.gradient`).

    Args:
      optimizer: any optax ``GradientTransformation`` (e.g.
        ``optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1))``); its
        state is carried in ``SolverState.solver_extras``. ``None``:
        ``optax.adam(learning_rate)``, the registered algorithm.
      steps: optimizer steps per query, warm-started from the last query's
        parameters and optimizer state.
      l2: ridge penalty :math:`\\lambda` on biases and factors.
      learning_rate: the step size of the default Adam (0.05 when ``None``);
        with a custom ``optimizer`` the step size is the optimizer's own, so
        passing both raises ``ValueError``. ``SolverConfig.learning_rate`` is
        then not read (``OnlineSolver.algorithm`` holds the optimizer).
    """
    _require_count("gradient", "steps", steps)
    _require_positive("gradient", "l2", l2)
    if optimizer is None:
        rate = DEFAULT_LEARNING_RATE if learning_rate is None else learning_rate
        _require_positive("gradient", "learning_rate", rate)
        return bind(
            gradient_module.ALGORITHM, l2=l2, num_steps=steps, learning_rate=rate
        )
    if not isinstance(optimizer, optax.GradientTransformation):
        raise InputTypeError(
            "gradient: optimizer must be an optax.GradientTransformation or None, "
            f"got {type(optimizer).__name__}"
        )
    if learning_rate is not None:
        raise InputValueError(
            "gradient: learning_rate sets the default Adam's step size only; "
            "with a custom optimizer put the step size into the optimizer"
        )
    custom = gradient_module.algorithm_with_optimizer(lambda config: optimizer)
    return bind(custom, l2=l2, num_steps=steps)


__all__ = ["als", "bind", "gradient", "incremental"]
