"""LoCoMo evaluation data: conversations, memory settings, streams, a stand-in scorer.

Host-side code (file I/O, embeddings) that produces the pure-array
:class:`earm_jax.base.Stream` the solver consumes, plus the host-side text
(:class:`StreamMetadata`) for LLM scorers and reports.

* :mod:`earm_jax.locomo.data` -- load both file forms and count faults.
* :mod:`earm_jax.locomo.records` -- the typed records and the fault kinds.
* :mod:`earm_jax.locomo.repair` -- parse one conversation, repairing its faults.
* :mod:`earm_jax.locomo.memories` -- the ``turns`` / ``observations`` settings.
* :mod:`earm_jax.locomo.streams` -- semantic top-N pools, arrays, metadata.
* :mod:`earm_jax.locomo.evidence` -- the evidence stand-in scorer (not an LLM).
"""

from earm_jax.locomo.data import FAULT_KINDS as FAULT_KINDS
from earm_jax.locomo.data import QUERY_CATEGORIES as QUERY_CATEGORIES
from earm_jax.locomo.data import Conversation as Conversation
from earm_jax.locomo.data import DataFault as DataFault
from earm_jax.locomo.data import fault_counts as fault_counts
from earm_jax.locomo.data import load_locomo as load_locomo
from earm_jax.locomo.evidence import STAND_IN_NOTE as STAND_IN_NOTE
from earm_jax.locomo.evidence import EvidenceNoise as EvidenceNoise
from earm_jax.locomo.evidence import EvidenceScorer as EvidenceScorer
from earm_jax.locomo.evidence import evidence_scores as evidence_scores
from earm_jax.locomo.evidence import relevance_oracle as relevance_oracle
from earm_jax.locomo.memories import SETTINGS as SETTINGS
from earm_jax.locomo.memories import Memory as Memory
from earm_jax.locomo.memories import MemorySet as MemorySet
from earm_jax.locomo.memories import build_memories as build_memories
from earm_jax.locomo.memories import insertion_times as insertion_times
from earm_jax.locomo.streams import POOL_SIZE as POOL_SIZE
from earm_jax.locomo.streams import LocomoStream as LocomoStream
from earm_jax.locomo.streams import StreamArrays as StreamArrays
from earm_jax.locomo.streams import StreamMetadata as StreamMetadata
from earm_jax.locomo.streams import build_stream as build_stream
from earm_jax.locomo.streams import build_streams as build_streams

__all__ = [
    "FAULT_KINDS",
    "POOL_SIZE",
    "QUERY_CATEGORIES",
    "SETTINGS",
    "STAND_IN_NOTE",
    "Conversation",
    "DataFault",
    "EvidenceNoise",
    "EvidenceScorer",
    "LocomoStream",
    "Memory",
    "MemorySet",
    "StreamArrays",
    "StreamMetadata",
    "build_memories",
    "build_stream",
    "build_streams",
    "evidence_scores",
    "fault_counts",
    "insertion_times",
    "load_locomo",
    "relevance_oracle",
]
