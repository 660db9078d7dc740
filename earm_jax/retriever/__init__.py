"""The online retriever for one agent (host side): EARM over a growing memory,
kept on disk. ``from earm_jax.retriever import OnlineRetriever``."""

from earm_jax.retriever.online import OnlineRetriever as OnlineRetriever
from earm_jax.retriever.online import Retrieved as Retrieved
from earm_jax.retriever.online import RetrieverConfig as RetrieverConfig

__all__ = ["OnlineRetriever", "Retrieved", "RetrieverConfig"]
