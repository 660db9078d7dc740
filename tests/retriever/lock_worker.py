"""A worker process for the lock tests: opens a retriever folder, prints READY
(or the error it got), then runs commands read from stdin, one JSON line of
result per command, until ``exit``.

Usage: python lock_worker.py FOLDER
Commands: ``query TEXT``, ``add TEXT``, ``close``, ``exit``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

from earm_jax.retriever import OnlineRetriever  # noqa: E402


def main() -> None:
    folder = Path(sys.argv[1])
    try:
        retriever = OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), CONFIG)
    except Exception as error:  # noqa: BLE001 - reported to the test
        print(json.dumps({"error": type(error).__name__, "message": str(error)}))
        return
    if retriever.num_memories == 0:
        retriever.add(memories(12))
    print("READY", flush=True)
    for line in sys.stdin:
        command, _, text = line.strip().partition(" ")
        try:
            if command == "query":
                result = {"index": retriever.query(text).query_index}
            elif command == "add":
                result = {"ids": retriever.add([text])}
            elif command == "close":
                retriever.close()
                result = {"closed": True}
            else:
                break
        except Exception as error:  # noqa: BLE001 - reported to the test
            result = {"error": type(error).__name__, "message": str(error)}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
