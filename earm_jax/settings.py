"""One settings object for the solver and the policy, shared by every entry point.

``earm simulate``, ``earm locomo``, the online retriever and the notebooks all
describe "which EARM" by the same fields, and build the
:class:`~earm_jax.core.config.SolverConfig` and the
:class:`~earm_jax.base.Policy` through this class only, so a field means the
same thing everywhere. Entry points extend it with their own fields (shapes,
seeds, metrics); the defaults an entry point changes are stated there.

>>> settings = EarmSettings(rank=4)
>>> settings.solver_config(num_memories=100, capacity=20, pool_size=50).rank
4
>>> int(settings.policy(pool_size=50).budget(15))  # stage 2 of the paper: 40%
20
"""

from __future__ import annotations

import dataclasses
from typing import Any

from earm_jax.base import AnchorPolicy
from earm_jax.core.config import SolverConfig
from earm_jax.core.solvers import SOLVERS
from earm_jax.policies import paper_policy, scaled_schedule, stage_schedule
from earm_jax.policies.adaptive import AdaptiveConfig
from earm_jax.policies.adaptive.config import CALL_ORDERS, STOP_RULES
from earm_jax.policies.adaptive.embedding_calls import EMBEDDING_ORDERS
from earm_jax.policies.budget import PAPER_STAGE_RATIOS
from earm_jax.types import ArrayLike

SIMILARITY_HEAD = 0.4
"""The share of a query's calls ``best`` pays down the similarity order
before an embedding call order takes over: the top of the pool is where
similarity is right, and the rest of the calls go where the texts point at
every cap (learned calls' head; docs/design-notes.md)."""

_SOLVER_DEFAULTS = SolverConfig._field_defaults
"""The solver's defaults come from :class:`SolverConfig` alone, so the
settings, the CLI (which takes its defaults from here) and a hand-built
config agree."""


@dataclasses.dataclass(frozen=True)
class EarmSettings:
    """Which EARM: the model, its solver, and the paper's budget/anchor policy.

    The solver fields default to :class:`SolverConfig`'s.

    Attributes:
      rank: ``R``, latent dimension (0: the bias-only model).
      l2: ridge penalty :math:`\\lambda` (paper: 0.1).
      solver: a name registered in :data:`earm_jax.core.solvers.SOLVERS`.
      num_sweeps: ALS sweeps per query (``"als"`` only; on 8 default simulated
        streams 1, 3 and 10 warm-started sweeps gave Mixed Recall@10 0.655,
        0.658 and 0.657 at 1x, 2x and 9x the run time).
      refresh_rows: earlier rows re-solved per query (``"incremental"`` only).
      high_fraction: the high-similarity stratum as a fraction of the pool.
      block_size: queries per stage of the paper's schedule.
      stage_ratios: the stage budgets as fractions of the pool.
      budget_scale: every stage budget times this (1: the paper's).
      preset: ``"paper"`` (the seven policies) or ``"best"``: also the adaptive
        multi-round policy under a hard call budget
        (:mod:`earm_jax.policies.adaptive`), reported as policy ``best``.
      call_budget: ``best``'s hard cap on calls as a fraction of Full's.
      call_order: which candidates ``best``'s calls after its similarity head
        pay for: ``"embedding"`` (the default: the highest posterior mean of a
        regression of the answers on the question's and memory's embeddings,
        so the stream must carry them), ``"embedding_gain"``, ``"learned"`` or
        ``"similarity"`` (see
        :data:`~earm_jax.policies.adaptive.config.CALL_ORDERS`). The
        embedding orders pay the first :data:`SIMILARITY_HEAD` of a query's
        calls down the similarity order.
      stop_rule: ``best``'s stop rule, one of
        :data:`~earm_jax.policies.adaptive.config.STOP_RULES`: ``"spend"``
        (the default) spends every query's allowance; ``"settle_or_spill"``
        moves calls from queries it judges settled to later ones (better with
        an easy stand-in scorer, worse with a trained one:
        docs/design-notes.md).
    """

    rank: int = _SOLVER_DEFAULTS["rank"]
    l2: float = _SOLVER_DEFAULTS["l2"]
    solver: str = _SOLVER_DEFAULTS["solver"]
    num_sweeps: int = _SOLVER_DEFAULTS["num_sweeps"]
    refresh_rows: int = _SOLVER_DEFAULTS["refresh_rows"]
    high_fraction: float = 0.1
    block_size: int = 10
    stage_ratios: tuple[float, ...] = PAPER_STAGE_RATIOS
    budget_scale: float = 1.0
    preset: str = "paper"
    call_budget: float = 0.25
    call_order: str = "embedding"
    stop_rule: str = "spend"

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.solver not in SOLVERS:
            raise ValueError(
                f"{name}.solver must be one of {tuple(SOLVERS)}, got {self.solver!r}"
            )
        for field in ("rank", "num_sweeps", "refresh_rows"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}.{field} must be an int >= 0, got {value!r}")
        if not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(
                f"{name}.block_size must be a positive int, got {self.block_size!r}"
            )
        if not self.l2 > 0:
            raise ValueError(f"{name}.l2 must be > 0, got {self.l2!r}")
        if not 0 < self.high_fraction <= 1:
            raise ValueError(
                f"{name}.high_fraction must be in (0, 1], got {self.high_fraction!r}"
            )
        if self.preset not in PRESETS:
            raise ValueError(
                f"{name}.preset must be one of {PRESETS}, got {self.preset!r}"
            )
        if not 0.0 <= self.call_budget <= 1.0:
            raise ValueError(
                f"{name}.call_budget must be in [0, 1], got {self.call_budget!r}"
            )
        if self.call_order not in CALL_ORDERS:
            raise ValueError(
                f"{name}.call_order must be one of {CALL_ORDERS}, got "
                f"{self.call_order!r}"
            )
        if self.stop_rule not in STOP_RULES:
            raise ValueError(
                f"{name}.stop_rule must be one of {STOP_RULES}, got {self.stop_rule!r}"
            )
        if self.budget_scale < 0:
            raise ValueError(
                f"{name}.budget_scale must be >= 0, got {self.budget_scale!r}"
            )

    def earm_fields(self) -> dict[str, Any]:
        """The fields of :class:`EarmSettings` alone (not an entry point's own)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(EarmSettings)}

    def solver_config(
        self,
        num_memories: int,
        capacity: int,
        pool_size: int,
        max_budget: int | None = None,
    ) -> SolverConfig:
        """The solver's static configuration for these shapes.

        ``max_budget`` (the widest history row) defaults to the pool size.
        """
        return SolverConfig(
            num_memories=num_memories,
            capacity=capacity,
            pool_size=pool_size,
            max_budget=pool_size if max_budget is None else max_budget,
            rank=self.rank,
            l2=self.l2,
            solver=self.solver,
            num_sweeps=self.num_sweeps,
            refresh_rows=self.refresh_rows,
        )

    def policy(
        self, pool_size: int, budget_scale: ArrayLike | None = None
    ) -> AnchorPolicy:
        """The paper's policy (stage schedule, stratified anchors) for ``pool_size``.

        ``budget_scale`` overrides :attr:`budget_scale` and may be traced, so a
        budget sweep reuses one compiled program.
        """
        scale = self.budget_scale if budget_scale is None else budget_scale
        budget = None
        if budget_scale is not None or scale != 1.0:
            stages = stage_schedule(pool_size, self.block_size, self.stage_ratios)
            budget = scaled_schedule(stages, scale, pool_size)
        policy = paper_policy(
            pool_size=pool_size,
            high_fraction=self.high_fraction,
            block_size=self.block_size,
            stage_ratios=self.stage_ratios,
            budget=budget,
        )
        # The scaled schedule is built from pool_size too: record it as well.
        return policy._replace(pool_size=pool_size)

    def adaptive_config(self, pool_size: int) -> AdaptiveConfig | None:
        """The ``best`` preset's adaptive policy for ``pool_size`` (``None``
        unless ``preset == "best"``).

        >>> config = EarmSettings(preset="best", call_budget=0.15).adaptive_config(200)
        >>> config.round_sizes, config.call_budget
        ((5, 15, 45, 135), 0.15)
        """
        if self.preset != "best":
            return None
        reads_texts = self.call_order in EMBEDDING_ORDERS
        return AdaptiveConfig(
            pool_size=pool_size,
            call_budget=self.call_budget,
            call_order=self.call_order,
            stop_rule=self.stop_rule,
            similarity_share=SIMILARITY_HEAD if reads_texts else 0.0,
        )


PRESETS = ("paper", "best")
"""``paper``: the seven policies (docs/policies.md); ``best``: and the adaptive one."""

__all__ = ["PRESETS", "SIMILARITY_HEAD", "EarmSettings"]
