"""The batched simulation job behind ``earm simulate`` and the notebooks.

One call generates ``S`` synthetic streams (:mod:`earm_jax.eval.simulate`), runs the
seven policies on all of them at once (one jitted ``vmap``), and summarises the
per-query metrics with paired bootstrap CIs over queries and over streams.
Everything a run depends on is in :class:`SimulationSettings`, which the JSON
records, so ``SimulationSettings(**json["config"])`` reproduces a result.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.core.config import SolverConfig
from earm_jax.core.side_information import SideInformation, side_information
from earm_jax.eval import report
from earm_jax.eval.budget_match import MatchedScale, match_budget_scale, usable_counts
from earm_jax.eval.compare import evaluate_policies
from earm_jax.eval.scorer_profile import ScorerProfile, profile_from_json
from earm_jax.eval.simulate import SimConfig, SimKnobs, make_streams
from earm_jax.settings import EarmSettings


@dataclasses.dataclass(frozen=True)
class SimulationSettings(EarmSettings):
    """Everything one simulation run depends on (recorded in its JSON).

    The solver and policy fields are :class:`~earm_jax.settings.EarmSettings`'
    (``budget_scale`` is traced here, so a budget sweep reuses one program).
    Shapes: ``streams`` (S), ``queries`` (T), ``memories`` (M), ``pool_size`` (N).
    ``knobs``: :class:`~earm_jax.eval.simulate.SimKnobs` values by name (defaults
    where absent). ``seed`` drives streams and anchors. ``expand`` (``E``, 0:
    off) adds the search-expansion policy ``mixed_expand`` with ``E`` slots;
    ``expand_min_score`` is the completion an outside memory needs for one.
    ``scorer_profile``: a measured scorer's profile (the JSON ``earm
    train-scorer`` writes); the simulated answers are then drawn from it.
    ``side_information``: ``D > 0`` gives memories and queries D-wide embeddings
    with planted relevance structure and adds ``mixed_side``, ``mixed_fused``,
    ``best_side`` and ``learned_calls``.
    ``call_order`` defaults to ``"similarity"`` here: simulated streams carry
    no texts unless ``side_information`` is set.
    """

    streams: int = 16
    queries: int = 100
    memories: int = 2000
    pool_size: int = 200
    ks: tuple[int, ...] = (10, 20)
    seed: int = 0
    num_resamples: int = 1000
    knobs: dict[str, float] = dataclasses.field(default_factory=dict)
    expand: int = 0
    expand_min_score: float = 0.0
    scorer_profile: dict[str, Any] | None = None
    side_information: int = 0
    call_order: str = "similarity"

    def __post_init__(self) -> None:
        super().__post_init__()
        prefix = type(self).__name__
        if self.scorer_profile is not None:
            profile_from_json(self.scorer_profile)  # raises naming the field
        if not isinstance(self.expand, int) or self.expand < 0:
            raise ValueError(
                f"{prefix}.expand must be an int >= 0, got {self.expand!r}"
            )
        if not isinstance(self.side_information, int) or self.side_information < 0:
            raise ValueError(
                f"{prefix}.side_information must be an embedding width >= 0, got "
                f"{self.side_information!r}"
            )
        for name in ("streams", "queries", "memories", "pool_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{prefix}.{name} must be a positive int, got {value!r}"
                )
        if self.pool_size > self.memories:
            raise ValueError(
                f"{prefix}.pool_size={self.pool_size} exceeds "
                f"{prefix}.memories={self.memories}"
            )
        unknown = set(self.knobs) - set(SimKnobs._fields)
        if unknown:
            raise ValueError(
                f"unknown knob(s) {sorted(unknown)}; known: {list(SimKnobs._fields)}"
            )
        if not self.ks or any(k < 1 for k in self.ks):
            raise ValueError(f"{prefix}.ks must be positive ints, got {self.ks!r}")

    @classmethod
    def from_json(cls, config: dict[str, Any]) -> SimulationSettings:
        """Rebuilds settings from a result JSON's ``"config"``."""
        config = dict(config)
        for name in ("stage_ratios", "ks"):
            if name in config:
                config[name] = tuple(config[name])
        return cls(**config)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def sim_config(self) -> SimConfig:
        return SimConfig(
            num_memories=self.memories,
            num_queries=self.queries,
            pool_size=self.pool_size,
            embedding_dim=self.side_information,
        )

    def side_model(self) -> SideInformation | None:
        """The side-information model, or ``None`` when it is off."""
        return side_information() if self.side_information else None

    def sim_knobs(self) -> SimKnobs:
        return SimKnobs(**self.knobs)

    def profile(self) -> ScorerProfile | None:
        if self.scorer_profile is None:
            return None
        return profile_from_json(self.scorer_profile)

    def stream_solver_config(self) -> SolverConfig:
        """The solver configuration for these streams' shapes."""
        return self.solver_config(self.memories, self.queries, self.pool_size)


@functools.lru_cache(maxsize=8)
def _compiled_job(shape_json: str) -> Callable:
    """One jitted (key, knobs) -> per-query metrics function per program shape."""
    settings = SimulationSettings.from_json(json.loads(shape_json))
    config, ks = settings.stream_solver_config(), settings.ks
    sim_config = settings.sim_config()
    profile = settings.profile()

    def job(key, knobs, budget_scale):
        policy = settings.policy(settings.pool_size, budget_scale)
        stream_key, policy_key = jax.random.split(key)
        streams = make_streams(stream_key, sim_config, settings.streams, knobs, profile)
        keys = jax.random.split(policy_key, settings.streams)
        adaptive = settings.adaptive_config(settings.pool_size)
        return jax.vmap(
            lambda k, s: evaluate_policies(
                k,
                s,
                config,
                policy,
                ks,
                adaptive,
                settings.expand,
                settings.expand_min_score,
                settings.side_model(),
            )
        )(keys, streams)

    return jax.jit(job)


def _program_shape(settings: SimulationSettings) -> str:
    """Settings that change the compiled program (knobs, seed and the budget
    scale are traced)."""
    fields = settings.to_json()
    fields.update(knobs={}, seed=0, num_resamples=0, budget_scale=1.0)
    return json.dumps(fields, sort_keys=True)


def run_simulation(
    settings: SimulationSettings,
) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray, np.ndarray, dict[str, float]]:
    """Runs every policy on ``settings.streams`` simulated streams.

    Returns:
      ``(metrics {policy: {metric: float[S, T]}}, has_relevant bool[S, T],
      budgets int32[S, T] (anchors paid by the anchored policies),
      timings {"seconds": wall time of the jitted job, compile included on
      the first call for a program shape})``.
    """
    job = _compiled_job(_program_shape(settings))
    knobs = jax.tree.map(jnp.asarray, settings.sim_knobs())
    key = jax.random.key(settings.seed)
    start = time.perf_counter()
    scale = jnp.float32(settings.budget_scale)
    outputs = jax.block_until_ready(job(key, knobs, scale))
    elapsed = time.perf_counter() - start
    metrics, has_relevant, calls = jax.tree.map(np.asarray, outputs)
    return metrics, has_relevant, calls, {"seconds": elapsed}


def matched_budget_scale(settings: SimulationSettings) -> MatchedScale:
    """The budget scale at which the anchored policies pay ``call_budget`` of
    Full's calls on exactly the streams ``settings`` generates
    (``--budget-scale auto``)."""
    stream_key, _ = jax.random.split(jax.random.key(settings.seed))
    knobs = jax.tree.map(jnp.asarray, settings.sim_knobs())
    streams = jax.jit(make_streams, static_argnums=(1, 2))(
        stream_key, settings.sim_config(), settings.streams, knobs, settings.profile()
    )
    candidates = np.asarray(streams.queries.candidates)
    valid = np.asarray(streams.queries.valid)
    insert_time = np.asarray(streams.insert_time)
    return match_budget_scale(
        settings.call_budget,
        [
            usable_counts(candidates[s], valid[s], insert_time[s])
            for s in range(settings.streams)
        ],
        settings.pool_size,
        settings.block_size,
        settings.stage_ratios,
    )


def simulation_report(
    settings: SimulationSettings,
    metrics: dict[str, dict[str, np.ndarray]],
    has_relevant: np.ndarray,
) -> dict[str, Any]:
    """The JSON body: per-policy means with CIs over queries (``ci``) and over
    streams (``ci_streams``), contrasts, gain recovery, per-stage results."""
    common = dict(num_resamples=settings.num_resamples, seed=settings.seed)
    by_query = report.summarize(metrics, has_relevant, **common)
    stream_ids = np.broadcast_to(
        np.arange(has_relevant.shape[0])[:, None], has_relevant.shape
    )
    by_stream = report.summarize(metrics, has_relevant, clusters=stream_ids, **common)
    report.add_cluster_cis(by_query, by_stream, "ci_streams")
    stage = np.minimum(
        np.arange(settings.queries) // settings.block_size,
        len(settings.stage_ratios) - 1,
    )
    stages = np.broadcast_to(stage[None, :], has_relevant.shape)
    by_query["per_stage"] = {
        key: {"count": value["count"], "results": value.get("results", {})}
        for key, value in report.per_group(
            metrics, has_relevant, stages, **common
        ).items()
    }
    expansion = report.expansion_summary(metrics, has_relevant, **common)
    if expansion is not None:
        by_query["expansion"] = expansion
    return by_query


__all__ = ["SimulationSettings", "run_simulation", "simulation_report"]
