"""Relevance scorers: the interface, the score cache, replay, and prompts.

The vLLM HTTP client (``earm_jax.scoring.vllm``) needs ``httpx`` (extra
``[vllm]``) and is imported from its module, not from here.
"""

from .base import PairScore as PairScore
from .base import Scorer as Scorer
from .base import ScorerIdentity as ScorerIdentity
from .cache import CachedScorer as CachedScorer
from .cache import ScoreCache as ScoreCache
from .replay import ReplayScorer as ReplayScorer
from .replay import export_jsonl as export_jsonl

__all__ = [
    "CachedScorer",
    "PairScore",
    "ReplayScorer",
    "ScoreCache",
    "Scorer",
    "ScorerIdentity",
    "export_jsonl",
]
