"""A worker process for the lost-WAL tests: creates a retriever folder with 5
memories and closes it (every page in the journal file), reopens it, adds 40
memories and asks 6 queries (their commits in the ``-wal`` file only), prints
``READY <memories> <queries>`` and waits to be killed.

Usage: python wal_worker.py FOLDER [--delete-last]
``--delete-last`` ends with a ``delete``, which checkpoints every commit into
the journal file and empties the ``-wal`` file.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

from earm_jax.retriever import OnlineRetriever  # noqa: E402


def main() -> None:
    folder = Path(sys.argv[1])
    with OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), CONFIG) as first:
        first.add(memories(5))
    retriever = OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), CONFIG)
    ids = retriever.add(memories(40, seed=1))
    for number in range(6):
        retriever.query(f"What did Sam say about chess {number}?")
    if "--delete-last" in sys.argv:
        retriever.delete([ids[0]])
    print("READY", retriever.num_memories, retriever.num_queries, flush=True)
    time.sleep(600)  # killed long before


if __name__ == "__main__":
    main()
