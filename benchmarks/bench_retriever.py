"""Online retriever cost: ``query`` latency without the scorer, bytes written.

For each memory count: a fresh retriever folder with the default settings
(pool 200, rank 8, incremental solver, snapshot every 100 queries, SQLite
synchronous=FULL), ``--queries`` queries, a deterministic instant scorer and
precomputed random unit embeddings (so neither the scorer nor an embedding
model is timed; the time spent inside the scorer call is measured and
subtracted anyway). Per query it records the wall time of ``query`` minus the
scorer's, and the bytes the process passed to ``write()`` (``wchar`` of
``/proc/self/io``: the journal, its WAL and the snapshots). Writes a JSON
report; not a test.

    python benchmarks/bench_retriever.py --memories 1000 10000 --queries 10000 \
        --out benchmarks/results/retriever_cpu.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import metadata, write_json  # noqa: E402

from earm_jax.retriever import OnlineRetriever, RetrieverConfig  # noqa: E402
from earm_jax.scoring.base import PairScore, ScorerIdentity  # noqa: E402


class TableEmbedder:
    """Random unit vectors, fixed per text (a hash seeds them): no model."""

    def __init__(self, width: int = 384) -> None:
        self.width = width

    def embed(self, texts):
        out = np.empty((len(texts), self.width), np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.width)
            out[i] = vector / np.linalg.norm(vector)
        return out


class TimedScorer:
    identity = ScorerIdentity(kind="bench-hash", prompt_version="1")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.pairs = 0

    def score(self, query, memories):
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        started = time.perf_counter()
        out = [
            [
                PairScore.success(hashlib.sha256((q + m).encode()).digest()[0] / 255)
                for m in memories
            ]
            for q, memories in requests
        ]
        self.pairs += sum(len(m) for _, m in requests)
        self.seconds += time.perf_counter() - started
        return out


def _wchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def run(num_memories: int, num_queries: int, folder: Path, log_every: int) -> dict:
    scorer = TimedScorer()
    config = RetrieverConfig()
    retriever = OnlineRetriever(folder, scorer, TableEmbedder(), config)
    started = time.perf_counter()
    for start in range(0, num_memories, 1000):
        retriever.add(
            [f"memory {i}" for i in range(start, min(start + 1000, num_memories))]
        )
    add_seconds = time.perf_counter() - started
    retriever.warm_up()
    latency, written, calls = [], [], []
    for index in range(num_queries):
        before_scorer, before_bytes = scorer.seconds, _wchar()
        t0 = time.perf_counter()
        answer = retriever.query(f"query {index}")
        elapsed = time.perf_counter() - t0 - (scorer.seconds - before_scorer)
        written.append(_wchar() - before_bytes)
        latency.append(elapsed)
        calls.append(answer.calls)
        if log_every and (index + 1) % log_every == 0:
            recent = np.asarray(latency[-log_every:]) * 1e3
            print(
                f"  M={num_memories} q={index + 1}: p50 {np.median(recent):.1f} ms, "
                f"max {recent.max():.1f} ms, "
                f"{np.mean(written[-log_every:]):.0f} B/query",
                flush=True,
            )
    retriever.close()
    latency_ms = np.asarray(latency) * 1e3
    written = np.asarray(written)
    steady = latency_ms[10:] if len(latency_ms) > 20 else latency_ms
    return {
        "num_memories": num_memories,
        "num_queries": num_queries,
        "add_seconds": add_seconds,
        "latency_ms_excluding_scorer": {
            "p50": float(np.percentile(latency_ms, 50)),
            "p95": float(np.percentile(latency_ms, 95)),
            "p99": float(np.percentile(latency_ms, 99)),
            "max": float(latency_ms.max()),
            "argmax_query": int(latency_ms.argmax()),
            "p50_after_10": float(np.percentile(steady, 50)),
        },
        "latency_p50_ms_by_thousand": [
            float(np.median(latency_ms[i : i + 1000]))
            for i in range(0, len(latency_ms), 1000)
        ],
        "bytes_written_per_query": {
            "mean": float(written.mean()),
            "p50": float(np.median(written)),
            "max": int(written.max()),
            "mean_by_thousand": [
                float(written[i : i + 1000].mean())
                for i in range(0, len(written), 1000)
            ],
        },
        "journal_bytes_on_disk": sum(
            p.stat().st_size for p in folder.iterdir() if p.is_file()
        ),
        "scorer_pairs": scorer.pairs,
        "mean_calls_per_query": float(np.mean(calls)),
        "final_capacity": retriever.solver_config.capacity,
        "final_memory_rows": retriever.solver_config.num_memories,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=10000)
    parser.add_argument("--log-every", type=int, default=1000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    results = []
    payload = {
        "benchmark": "retriever query latency (scorer excluded), bytes written",
        "settings": {
            "config": "RetrieverConfig() defaults",
            "embedder": "random unit vectors (no model)",
            "scorer": "instant hash scorer, its time subtracted",
        },
        "metadata": metadata(argv),
        "results": results,
    }
    for num_memories in args.memories:
        folder = Path(tempfile.mkdtemp(prefix="bench-retriever-"))
        try:
            results.append(run(num_memories, args.queries, folder, args.log_every))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        write_json(payload, args.out)
        print(json.dumps(results[-1], indent=1), flush=True)


if __name__ == "__main__":
    main()
