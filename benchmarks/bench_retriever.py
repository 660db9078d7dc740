"""Online retriever cost: ``query`` latency without the scorer, bytes written,
resident memory.

For each memory count: a fresh retriever folder with the default settings
(pool 200, rank 8, incremental solver, ``preset="best"``, snapshot every 100
queries, SQLite synchronous=FULL), ``--queries`` queries, a deterministic
instant scorer and precomputed random unit embeddings (so neither the scorer
nor an embedding model is timed; the time spent inside the scorer call is
measured and subtracted anyway). Per query it records the wall time of
``query`` minus the scorer's, and the bytes the process passed to ``write()``
(``wchar`` of ``/proc/self/io``: the journal, its WAL and the snapshots); the
folder's bytes on disk before the first query and after the last (closed, so
its ``-wal`` file is checkpointed), per query; the resident set size
(``VmRSS``) and the number of XLA compiles so far after the first ``--warmup``
queries and every ``--log-every`` queries after. Then the same for
``--tenants`` tenants of ``--tenant-memories`` memories each in one process
(``TenantRetrievers``), ``--tenant-queries`` queries in turn across them.
Writes a JSON report with the machine, versions, commit and command; not a
test.

    python benchmarks/bench_retriever.py --memories 1000 10000 --queries 10000 \
        --tenants 10 --tenant-queries 20000 \
        --out benchmarks/results/retriever_cpu.json
    python benchmarks/bench_retriever.py --quick \
        --out benchmarks/results/retriever_quick.json

``--async`` measures instead the coroutine API's throughput: queries per second
of ``aquery`` with a scorer that takes ``--scorer-ms`` (50) per request, for
1 and 16 concurrent coroutines on one retriever, per preset (the scoring of
concurrent queries overlaps; the recording of each stays serialised):

    python benchmarks/bench_retriever.py --async \
        --out benchmarks/results/retriever_async.json

With ``--async`` it also measures, per preset, ``aquery``'s latency alone and
beside ``--writers`` (3) threads that loop on the writer (``update`` of a
memory's metadata), and the most lock turns one of its lock requests waited
(the retriever's lock serves threads and coroutines in arrival order).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import metadata, write_json  # noqa: E402
from _probes import (  # noqa: E402
    CompileCounter,
    disk_summary,
    folder_bytes,
    latency_summary,
    load_average,
    rss_mib,
    rss_summary,
    wchar,
)

from earm_jax.retriever import (  # noqa: E402
    OnlineRetriever,
    RetrieverConfig,
    TenantRetrievers,
)
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


def run(
    num_memories: int,
    num_queries: int,
    folder: Path,
    log_every: int,
    warmup: int,
    compiles: CompileCounter,
) -> dict:
    scorer = TimedScorer()
    config = RetrieverConfig()
    retriever = OnlineRetriever(folder, scorer, TableEmbedder(), config)
    started = time.perf_counter()
    for start in range(0, num_memories, 1000):
        retriever.add(
            [f"memory {i}" for i in range(start, min(start + 1000, num_memories))]
        )
    add_seconds = time.perf_counter() - started
    # Closed, so every page is in the journal file and none in its -wal file.
    retriever.close()
    disk_before = folder_bytes(folder)
    retriever = OnlineRetriever(folder, scorer, TableEmbedder(), config)
    retriever.warm_up()
    latency, written, calls, rss = [], [], [], []
    for index in range(num_queries):
        before_scorer, before_bytes = scorer.seconds, wchar()
        t0 = time.perf_counter()
        answer = retriever.query(f"query {index}")
        elapsed = time.perf_counter() - t0 - (scorer.seconds - before_scorer)
        written.append(wchar() - before_bytes)
        latency.append(elapsed)
        calls.append(answer.calls)
        if index + 1 == warmup or (
            index + 1 > warmup and log_every and (index + 1) % log_every == 0
        ):
            rss.append((index + 1, rss_mib(), compiles.count))
        if log_every and (index + 1) % log_every == 0:
            recent = np.asarray(latency[-log_every:]) * 1e3
            print(
                f"  M={num_memories} q={index + 1}: p50 {np.median(recent):.1f} ms, "
                f"max {recent.max():.1f} ms, "
                f"{np.mean(written[-log_every:]):.0f} B/query",
                flush=True,
            )
    retriever.close()
    rss.append((num_queries, rss_mib(), compiles.count))
    latency_ms = np.asarray(latency) * 1e3
    written = np.asarray(written)
    return {
        "num_memories": num_memories,
        "num_queries": num_queries,
        "add_seconds": add_seconds,
        "latency_ms_excluding_scorer": latency_summary(latency_ms),
        "resident_memory": rss_summary(rss),
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
        "journal_bytes_on_disk": folder_bytes(folder),
        "disk_bytes": disk_summary(disk_before, folder_bytes(folder), num_queries),
        "scorer_pairs": scorer.pairs,
        "mean_calls_per_query": float(np.mean(calls)),
        "calls_of_first_20_queries": calls[:20],
        "final_capacity": retriever.solver_config.capacity,
        "final_memory_rows": retriever.solver_config.num_memories,
        "load_average_at_end": load_average(),
    }


def run_tenants(
    num_tenants: int,
    memories_each: int,
    num_queries: int,
    root: Path,
    log_every: int,
    warmup: int,
    compiles: CompileCounter,
) -> dict:
    """``num_queries`` queries in turn across ``num_tenants`` tenants of one
    process (one folder each, compiled code shared)."""
    scorer = TimedScorer()
    tenants = TenantRetrievers(root, scorer, TableEmbedder(), RetrieverConfig())
    names = [f"tenant-{number}" for number in range(num_tenants)]
    for name in names:
        tenants[name].add([f"{name} memory {i}" for i in range(memories_each)])
    tenants.close()
    disk_before = folder_bytes(root)
    tenants = TenantRetrievers(root, scorer, TableEmbedder(), RetrieverConfig())
    for name in names:  # opened before the clock starts
        tenants[name]
    tenants[names[0]].warm_up()
    latency, written, rss = [], [], []
    for index in range(num_queries):
        name = names[index % num_tenants]
        before_scorer, before_bytes = scorer.seconds, wchar()
        t0 = time.perf_counter()
        tenants[name].query(f"{name} query {index}")
        latency.append(time.perf_counter() - t0 - (scorer.seconds - before_scorer))
        written.append(wchar() - before_bytes)
        if index + 1 == warmup or (
            index + 1 > warmup and log_every and (index + 1) % log_every == 0
        ):
            rss.append((index + 1, rss_mib(), compiles.count))
            print(
                f"  tenants={num_tenants} q={index + 1}: "
                f"p50 {np.median(latency[-log_every:]) * 1e3:.1f} ms, "
                f"RSS {rss[-1][1]:.0f} MiB",
                flush=True,
            )
    tenants.close()
    rss.append((num_queries, rss_mib(), compiles.count))
    return {
        "num_tenants": num_tenants,
        "memories_per_tenant": memories_each,
        "num_queries": num_queries,
        "latency_ms_excluding_scorer": latency_summary(np.asarray(latency) * 1e3),
        "bytes_written_per_query": {
            "mean": float(np.mean(written)),
            "p50": float(np.median(written)),
        },
        "resident_memory": rss_summary(rss),
        "disk_bytes": disk_summary(disk_before, folder_bytes(root), num_queries),
        "scorer_pairs": scorer.pairs,
        "load_average_at_end": load_average(),
    }


class SlowScorer(TimedScorer):
    """The hash scorer behind a fixed latency per request (``ascore_many``
    awaits it, as an HTTP client would)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.requests = 0

    def score_many(self, requests):
        time.sleep(self.delay_s)
        self.requests += 1
        return super().score_many(requests)

    async def ascore_many(self, requests):
        await asyncio.sleep(self.delay_s)
        self.requests += 1
        return super().score_many(requests)


def run_async(
    num_memories: int,
    num_queries: int,
    concurrency: int,
    preset: str,
    delay_s: float,
    folder: Path,
) -> dict:
    """``num_queries`` ``aquery`` calls, at most ``concurrency`` at a time."""
    config = dataclasses.replace(RetrieverConfig(), preset=preset)
    scorer = SlowScorer(delay_s)
    embedder = TableEmbedder()
    texts = [f"memory {i} about topic {i % 97}" for i in range(num_memories)]
    questions = [f"question {i} on topic {i % 89}" for i in range(num_queries + 20)]
    with OnlineRetriever(folder, scorer, embedder, config) as retriever:
        retriever.add(texts)
        for question in questions[:20]:  # compile and warm up
            retriever.query(question)
        scorer.requests, scorer.pairs = 0, 0

        async def drive():
            gate = asyncio.Semaphore(concurrency)

            async def one(question):
                async with gate:
                    return await retriever.aquery(question)

            return await asyncio.gather(*(one(q) for q in questions[20:]))

        started = time.perf_counter()
        answers = asyncio.run(drive())
        seconds = time.perf_counter() - started
    return {
        "preset": preset,
        "memories": num_memories,
        "queries": num_queries,
        "concurrency": concurrency,
        "scorer_ms_per_request": delay_s * 1e3,
        "seconds": round(seconds, 3),
        "queries_per_second": round(num_queries / seconds, 2),
        "scorer_requests": scorer.requests,
        "pairs_paid": int(sum(a.calls for a in answers)),
    }


def run_beside_writers(
    num_memories: int,
    num_queries: int,
    writers: int,
    preset: str,
    delay_s: float,
    folder: Path,
) -> dict:
    """``aquery`` latency alone, then beside ``writers`` threads looping on
    ``update``; and the lock turns its requests waited for there."""
    config = dataclasses.replace(RetrieverConfig(), preset=preset)
    scorer = SlowScorer(delay_s)
    texts = [f"memory {i} about topic {i % 97}" for i in range(num_memories)]
    questions = [f"question {i} on topic {i % 89}" for i in range(2 * num_queries + 5)]
    with OnlineRetriever(folder, scorer, TableEmbedder(), config) as retriever:
        ids = retriever.add(texts)
        for question in questions[:5]:  # compile and warm up
            retriever.query(question)
        lock = retriever._mutex
        original = lock.acquire_async
        waits: list[int] = []

        async def counted() -> int:
            waited = await original()
            waits.append(waited)
            return waited

        lock.acquire_async = counted

        def latencies(batch: list[str]) -> list[float]:
            out = []
            for question in batch:
                started = time.perf_counter()
                asyncio.run(retriever.aquery(question))
                out.append(time.perf_counter() - started)
            return out

        alone = latencies(questions[5 : 5 + num_queries])
        waits_alone = list(waits)
        waits.clear()
        stop = threading.Event()
        writes = [0] * writers

        def writer(n: int) -> None:
            while not stop.is_set():
                retriever.update(ids[n], metadata={"turn": writes[n]})
                writes[n] += 1

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(writers)]
        for thread in threads:
            thread.start()
        try:
            beside = latencies(questions[5 + num_queries :])
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        lock.acquire_async = original

    def median_ms(values: list[float]) -> float:
        return round(float(np.median(values)) * 1e3, 2)

    return {
        "preset": preset,
        "memories": num_memories,
        "queries": num_queries,
        "writers": writers,
        "aquery_ms_alone_median": median_ms(alone),
        "aquery_ms_beside_writers_median": median_ms(beside),
        "slowdown": round(float(np.median(beside) / np.median(alone)), 2),
        "lock_turns_waited_max_alone": max(waits_alone, default=0),
        "lock_turns_waited_max_beside_writers": max(waits, default=0),
        "writer_calls_during": int(sum(writes)),
    }


def main_async(args, argv) -> None:
    results: list[dict] = []
    payload = {
        "benchmark": "aquery throughput, scorer latency per request, 1 vs N "
        "concurrent coroutines on one retriever",
        "settings": {
            "config": "RetrieverConfig() defaults but preset",
            "embedder": "random unit vectors (no model)",
            "scorer": f"hash scores after {args.scorer_ms} ms per request",
        },
        "metadata": metadata(argv),
        "results": results,
    }
    for preset in args.presets:
        for concurrency in args.concurrency:
            folder = Path(tempfile.mkdtemp(prefix="bench-async-"))
            try:
                results.append(
                    run_async(
                        args.memories[0],
                        args.queries,
                        concurrency,
                        preset,
                        args.scorer_ms / 1e3,
                        folder,
                    )
                )
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            write_json(payload, args.out)
            print(json.dumps(results[-1]), flush=True)
    for preset in args.presets:
        rows = {r["concurrency"]: r for r in results if r["preset"] == preset}
        low, high = min(rows), max(rows)
        speedup = rows[high]["queries_per_second"] / rows[low]["queries_per_second"]
        payload.setdefault("speedup", {})[preset] = round(speedup, 2)
    write_json(payload, args.out)
    print(json.dumps(payload["speedup"]), flush=True)
    for preset in args.presets:
        folder = Path(tempfile.mkdtemp(prefix="bench-fair-"))
        try:
            row = run_beside_writers(
                args.memories[0],
                args.fair_queries,
                args.writers,
                preset,
                args.scorer_ms / 1e3,
                folder,
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        payload.setdefault("beside_writers", []).append(row)
        write_json(payload, args.out)
        print(json.dumps(row), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--queries", type=int, default=10000)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--tenant-memories", type=int, default=1000)
    parser.add_argument("--tenant-queries", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--log-every", type=int, default=1000)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small sizes (1,000 memories, 300 queries; 3 tenants of 200, 600 "
        "queries) to check the benchmark runs",
    )
    parser.add_argument(
        "--no-trim",
        action="store_true",
        help="do not hand freed heap pages back after snapshots and compiles "
        "(the A/B of that fix's effect on resident memory)",
    )
    parser.add_argument(
        "--no-evict",
        action="store_true",
        help="keep the compiled functions of every shape ever used (the A/B of "
        "dropping the shapes every retriever grew out of)",
    )
    parser.add_argument(
        "--async",
        dest="async_mode",
        action="store_true",
        help="aquery throughput with a slow scorer, 1 vs 16 coroutines",
    )
    parser.add_argument("--scorer-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--presets", nargs="+", default=["paper", "best"])
    parser.add_argument(
        "--writers",
        type=int,
        default=3,
        help="--async: threads looping on the writer beside aquery",
    )
    parser.add_argument(
        "--fair-queries",
        type=int,
        default=20,
        help="--async: aquery calls alone and beside the writers",
    )
    parser.add_argument(
        "--note", default=None, help="recorded in the JSON (e.g. the machine's load)"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.async_mode:
        if args.quick:
            args.memories, args.queries = [300], 48
            args.fair_queries = min(args.fair_queries, 5)
        elif args.memories == [1000, 10000]:
            args.memories, args.queries = [1000], min(args.queries, 320)
        main_async(args, argv)
        return
    if args.no_trim:
        import earm_jax.retriever.experience as experience
        import earm_jax.retriever.recovery as recovery

        experience.trim_heap = recovery.trim_heap = lambda: False
    if args.no_evict:
        import earm_jax.retriever.experience as experience

        experience.left_behind = lambda *_: 0
    if args.quick:
        args.memories, args.queries = [1000], 300
        args.tenants, args.tenant_memories, args.tenant_queries = 3, 200, 600
        args.warmup, args.log_every = 50, 100
    compiles = CompileCounter()
    results: list[dict] = []
    payload = {
        "benchmark": "retriever query latency (scorer excluded), bytes written, "
        "resident memory",
        "settings": {
            "config": "RetrieverConfig() defaults",
            "embedder": "random unit vectors (no model)",
            "scorer": "instant hash scorer, its time subtracted",
            "quick": args.quick,
            "warmup_queries": args.warmup,
            "heap_trimmed": not args.no_trim,
            "outgrown_shapes_dropped": not args.no_evict,
            # Latencies measure the machine's load too: its load average is
            # in the metadata (at the start) and in each result (at its end).
            "niceness": os.nice(0),
            "note": args.note,
        },
        "metadata": metadata(argv),
        "results": results,
    }
    for num_memories in args.memories:
        folder = Path(tempfile.mkdtemp(prefix="bench-retriever-"))
        try:
            results.append(
                run(
                    num_memories,
                    args.queries,
                    folder,
                    args.log_every,
                    args.warmup,
                    compiles,
                )
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        write_json(payload, args.out)
        print(json.dumps(results[-1], indent=1), flush=True)
    if args.tenants:
        root = Path(tempfile.mkdtemp(prefix="bench-tenants-"))
        try:
            payload["tenants"] = run_tenants(
                args.tenants,
                args.tenant_memories,
                args.tenant_queries,
                root,
                args.log_every,
                args.warmup,
                compiles,
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        write_json(payload, args.out)
        print(json.dumps(payload["tenants"], indent=1), flush=True)


if __name__ == "__main__":
    main()
