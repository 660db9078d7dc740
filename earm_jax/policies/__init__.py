"""Policies: budget schedules, anchor samplers, mixed reranking."""

from earm_jax.policies.adaptive import AdaptiveConfig as AdaptiveConfig
from earm_jax.policies.adaptive import adaptive_policy as adaptive_policy
from earm_jax.policies.adaptive import run_adaptive as run_adaptive
from earm_jax.policies.anchors import stratified_anchors as stratified_anchors
from earm_jax.policies.anchors import top_similarity_anchors as top_similarity_anchors
from earm_jax.policies.anchors import uniform_anchors as uniform_anchors
from earm_jax.policies.budget import PAPER_STAGE_RATIOS as PAPER_STAGE_RATIOS
from earm_jax.policies.budget import constant_budget as constant_budget
from earm_jax.policies.budget import scaled_schedule as scaled_schedule
from earm_jax.policies.budget import stage_schedule as stage_schedule
from earm_jax.policies.paper import full_policy as full_policy
from earm_jax.policies.paper import paper_policy as paper_policy
from earm_jax.policies.paper import semantic_policy as semantic_policy
from earm_jax.policies.paper import top_similarity_policy as top_similarity_policy
from earm_jax.policies.rerank import mixed_scores as mixed_scores
from earm_jax.policies.rerank import top_k_context as top_k_context

__all__ = [
    "AdaptiveConfig",
    "adaptive_policy",
    "run_adaptive",
    "PAPER_STAGE_RATIOS",
    "constant_budget",
    "full_policy",
    "mixed_scores",
    "paper_policy",
    "scaled_schedule",
    "semantic_policy",
    "stage_schedule",
    "stratified_anchors",
    "top_k_context",
    "top_similarity_anchors",
    "top_similarity_policy",
    "uniform_anchors",
]
