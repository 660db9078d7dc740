"""Platt scaling and the ridge-logistic fit behind it and the similarity
blends: a model's logit (or a few regressors) made a calibrated probability of
relevance, fitted on labelled pairs the model did not train on."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Platt scaling: probability = sigmoid(scale * logit + shift).

    Attributes:
      scale: the logit's factor (> 0: calibration never reverses a ranking).
      shift: the offset.
      pairs: pairs it was fitted on.
      positives: relevant pairs among them.
      scale_fixed: the free fit's scale was not positive (the model does not
        separate these pairs), so only the shift was fitted, at scale 1.
    """

    scale: float
    shift: float
    pairs: int
    positives: int
    scale_fixed: bool = False


def fit_logistic(
    features: np.ndarray, labels: np.ndarray, l2: float = 1e-3
) -> np.ndarray:
    """Ridge-logistic regression by Newton's method.

    Args:
      features: ``[n, k]`` regressors (an intercept is added last).
      labels: ``[n]`` binary labels.
      l2: a tiny ridge that keeps the fit finite when the classes separate.

    Returns:
      ``float64[k + 1]``: the weights, then the intercept.

    Raises:
      ValueError: shapes differ, or one class is missing.
    """
    x = np.asarray(features, np.float64)
    y = np.asarray(labels, np.float64).ravel()
    if x.ndim != 2 or x.shape[0] != y.size:
        raise ValueError(
            f"{x.shape[0] if x.ndim else 0} feature rows but {y.size} labels"
        )
    positives = int(y.sum())
    if positives == 0 or positives == y.size:
        raise ValueError("calibration needs both relevant and non-relevant pairs")
    return _newton_logistic(np.concatenate([x, np.ones((y.size, 1))], axis=1), y, l2)


def fit_platt(logits: np.ndarray, labels: np.ndarray, l2: float = 1e-3) -> Calibration:
    """Fits ``sigmoid(a * logit + b)`` to binary labels (logistic regression on
    the one logit); a fit whose scale is not positive is refitted with scale 1,
    so calibration never reverses the model's ranking.

    Raises:
      ValueError: shapes differ, or one class is missing.
    """
    x = np.asarray(logits, np.float64).ravel()
    y = np.asarray(labels, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{x.size} logits but {y.size} labels")
    weights = fit_logistic(x[:, None], y, l2)
    positives = int(y.sum())
    if weights[0] <= 0:
        shift = _newton_logistic(np.ones((x.size, 1)), y, l2, offset=x)[0]
        return Calibration(1.0, float(shift), int(y.size), positives, True)
    return Calibration(
        scale=float(weights[0]),
        shift=float(weights[1]),
        pairs=int(y.size),
        positives=positives,
    )


def _newton_logistic(
    features: np.ndarray, y: np.ndarray, l2: float, offset: np.ndarray | None = None
) -> np.ndarray:
    """Ridge-logistic regression weights by Newton's method (from zero, or from
    a unit first weight when there is no offset)."""
    weights = np.zeros(features.shape[1])
    if offset is None:
        offset = np.zeros(y.size)
    for _ in range(100):
        probability = 1.0 / (1.0 + np.exp(-(features @ weights + offset)))
        gradient = features.T @ (probability - y) + l2 * weights
        curvature = features.T @ (
            features * (probability * (1 - probability))[:, None]
        ) + l2 * np.eye(features.shape[1])
        step = np.linalg.solve(curvature, gradient)
        weights = weights - step
        if np.max(np.abs(step)) < 1e-10:
            break
    return weights


__all__ = ["Calibration", "fit_logistic", "fit_platt"]
