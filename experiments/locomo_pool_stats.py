"""Pool statistics of the LoCoMo streams, per conversation and memory setting.

Prints, for each conversation and setting: memories, queries, unlabelled
queries, the share of the conversation a pool holds, pool recall (evidence
caught by the top-N), Recall@10 by similarity and for a perfect reranker of the
pool (macro averages over labelled queries), the data faults per kind, and the
embedding time (cold vs cached). Writes the same as JSON.

Usage::

    python experiments/locomo_pool_stats.py [--data ../shared/data/locomo]
        [--model PATH] [--cache-dir DIR] [--pool-size 200] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from earm_jax.jobs.scripts import script_metadata, write_script_json  # noqa: E402
from earm_jax.locomo.data import FAULT_KINDS, fault_counts, load_locomo
from earm_jax.locomo.memories import SETTINGS
from earm_jax.locomo.streams import LocomoStream, build_streams
from earm_jax.store.embeddings import Embedder


def default_data_dir() -> Path:
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "locomo"


def stream_stats(stream: LocomoStream, cutoff: int = 10) -> dict[str, float | int]:
    """Pool coverage and recall numbers of one stream (numpy, host side)."""
    arrays = stream.arrays
    labelled = arrays.num_relevant > 0
    denominator = arrays.num_relevant[labelled]
    found = arrays.relevant.sum(axis=1)[labelled]
    top = arrays.relevant[:, :cutoff].sum(axis=1)[labelled]
    num_memories = int(arrays.insert_time.shape[0])
    return {
        "memories": num_memories,
        "queries": int(arrays.category.shape[0]),
        "unlabelled_queries": int((~labelled).sum()),
        "pool_share": float(arrays.valid.sum(axis=1).mean() / max(num_memories, 1)),
        "pool_recall": float(np.mean(found / denominator)),
        f"similarity_recall@{cutoff}": float(np.mean(top / denominator)),
        f"perfect_recall@{cutoff}": float(
            np.mean(np.minimum(found, cutoff) / denominator)
        ),
        "labelled_queries": int(labelled.sum()),
    }


def pooled(per_stream: list[dict[str, float | int]]) -> dict[str, float | int]:
    """Macro averages over all labelled queries of all streams."""
    weights = np.array([s["labelled_queries"] for s in per_stream], dtype=float)
    keys = [k for k in per_stream[0] if "recall" in k]
    out: dict[str, float | int] = {
        k: float(np.average([s[k] for s in per_stream], weights=weights)) for k in keys
    }
    out["labelled_queries"] = int(weights.sum())
    out["unlabelled_queries"] = int(sum(s["unlabelled_queries"] for s in per_stream))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_dir())
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--pool-size", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("locomo_pool_stats.json"))
    args = parser.parse_args()

    conversations = load_locomo(args.data)
    faults = fault_counts(conversations)
    settings: dict[str, dict[str, object]] = {}
    seconds: dict[str, dict[str, float | int]] = {}
    embedder = Embedder(args.model, cache_dir=args.cache_dir)
    print(f"model {embedder.identity}; pool size {args.pool_size}")
    for setting in SETTINGS:
        timings = []
        for _ in range(2):  # first pass fills the cache, second reads it
            start = time.perf_counter()
            streams = build_streams(
                conversations, embedder, setting=setting, pool_size=args.pool_size
            )
            timings.append(time.perf_counter() - start)
        seconds[setting] = {
            "first": timings[0],
            "cached": timings[1],
            "encoded_so_far": embedder.num_encoded,
        }
        per_stream = {s.meta.sample_id: stream_stats(s) for s in streams}
        total = pooled(list(per_stream.values()))
        settings[setting] = {"conversations": per_stream, "all": total}
        print(f"\n[{setting}] build {timings[0]:.1f}s first, {timings[1]:.2f}s cached")
        print(
            f"{'conv':>6} {'M':>5} {'T':>4} {'unlab':>5} {'share':>6} "
            f"{'pool':>6} {'sim@10':>7} {'perf@10':>8}"
        )
        for sample_id, s in {**per_stream, "all": total}.items():
            share = f"{s['pool_share']:.2f}" if "pool_share" in s else ""
            print(
                f"{sample_id:>6} {s.get('memories', ''):>5} {s.get('queries', ''):>4} "
                f"{s['unlabelled_queries']:>5} {share:>6} "
                f"{s['pool_recall']:>6.3f} {s['similarity_recall@10']:>7.3f} "
                f"{s['perfect_recall@10']:>8.3f}"
            )
    print("\nfaults (non-zero):")
    for sample_id, counts in faults.items():
        nonzero = {k: v for k, v in counts.items() if v and k in FAULT_KINDS}
        print(f"  {sample_id}: {nonzero}")
    report = {
        **script_metadata(),  # command (with the script), date, git commit, versions
        "data": str(args.data),
        "embedding_model": embedder.identity,
        "pool_size": args.pool_size,
        "scorer_note": "no scorer involved: pools and gold labels only",
        "settings": settings,
        "embedding_seconds": seconds,
        "faults": faults,
    }
    write_script_json(report, args.out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
