"""A trained cross-encoder served by ``earm serve-scorer`` (vLLM's pooling
runner) against the in-process path, on the same LoCoMo pairs.

Run through ``python benchmarks/bench_scoring.py --scorer-model FOLD ...``.
Each request is one question's pool cut to its ``--pairs-per-request`` most
similar memories (what a retriever query pays at a quarter of a 200-pool);
``--questions`` requests make one pass. A pass at concurrency ``c`` keeps
``c`` requests in flight: ``c`` client threads each send the next request
and wait for its answer, through
:class:`~earm_jax.scoring.vllm.VllmScorer` (``rerank``, one HTTP request per
question) or :class:`~earm_jax.scoring.cross_encoder.CrossEncoderScorer`
(the same threads call the one in-process model, as the retriever's
asynchronous API does).

The passes are paired and interleaved: each round runs every path at every
concurrency, in an order rotated per round, so the load of other jobs falls
on all of them alike. Reported per path and concurrency: ``pairs_per_s``
(the pairs over the median pass), ``speedup`` (the median over rounds of
``torch-float32``'s pass time over the path's), and per request the latency
of the scorer call, p50 and p95 over every round; per path its agreement
with ``torch-float32`` (max |Δscore|, top-10 overlap per request). The load
average before and after is recorded, and the share of the CPU other
processes took while the passes ran (``machine_busy`` above a quarter;
:mod:`earm_jax.jobs.machine_load`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks._common import print_table, write_json  # noqa: E402
from benchmarks._serve import served_scorer, vllm_version  # noqa: E402
from earm_jax.eval.ranking_agreement import labelled_pools, overlaps  # noqa: E402
from earm_jax.jobs.machine_load import OtherLoad, load_record  # noqa: E402

REFERENCE = "torch-float32"
SERVER = "vllm-server"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the trained mode (``--scorer-model`` switches it on)."""
    parser.add_argument(
        "--scorer-model",
        default=None,
        help="a trained cross-encoder folder (e.g. BUILD/fold-0): compare "
        "earm serve-scorer with the in-process path on LoCoMo pairs",
    )
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument(
        "--conversations",
        default="",
        help="comma list (default: the ones the fold held out)",
    )
    parser.add_argument("--memories", default="turns")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--pairs-per-request", type=int, default=50)
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument(
        "--backends",
        default="torch-float32,onnx-float32",
        help="in-process backends beside the server (torch-float32 always)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache-dir", default=None)


def _requests(args: argparse.Namespace) -> tuple[list, list[str]]:
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.scoring.scorer_manifest import open_scorer_folder
    from earm_jax.store.embeddings import Embedder

    folder = open_scorer_folder(args.scorer_model)
    held = [e["id"] for fold in folder.folds for e in fold.get("held_out", [])]
    wanted = tuple(c for c in args.conversations.split(",") if c) or tuple(held)
    if not wanted:
        raise SystemExit("--conversations: the folder names no held-out ones")
    conversations = select_conversations(load_locomo(args.data), wanted, 0)
    embedder = Embedder(cache_dir=args.cache_dir)
    pools = [
        pool
        for stream in build_streams(
            conversations, embedder, setting=args.memories, pool_size=200
        )
        for pool in labelled_pools(stream, args.questions)
    ][: args.questions]
    requests = [(p["query"], p["memories"][: args.pairs_per_request]) for p in pools]
    return requests, [c.sample_id for c in conversations]


def one_pass(scorer: Any, requests: list, concurrency: int) -> dict[str, Any]:
    """``requests`` through ``scorer`` with ``concurrency`` in flight."""

    def call(request: tuple[str, list[str]]) -> tuple[float, list]:
        begin = time.perf_counter()
        scores = scorer.score(*request)
        return time.perf_counter() - begin, scores

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(call, requests))
    wall = time.perf_counter() - started
    failed = [p.reason for _, scores in answers for p in scores if not p.ok]
    if failed:
        raise SystemExit(f"{len(failed)} pair(s) failed, e.g. {failed[0]}")
    return {
        "wall_s": wall,
        "latencies_s": [seconds for seconds, _ in answers],
        "scores": [np.array([p.value for p in scores]) for _, scores in answers],
    }


def agreement(reference: list[np.ndarray], scores: list[np.ndarray]) -> dict:
    pairs = list(zip(scores, reference, strict=True))
    return {
        "max_abs_delta": max(float(np.max(np.abs(s - r))) for s, r in pairs),
        "top10_overlap": float(overlaps(reference, scores).mean()),
    }


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    from earm_jax.jobs.metadata import provenance
    from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings
    from earm_jax.scoring.vllm import VllmScorer, VllmScorerConfig

    meta = provenance("python", ["benchmarks/bench_scoring.py", *argv])
    levels = [int(c) for c in args.concurrency.split(",") if c]
    backends = [b for b in args.backends.split(",") if b]
    if REFERENCE not in backends:
        backends.insert(0, REFERENCE)
    requests, conversations = _requests(args)
    pairs = sum(len(memories) for _, memories in requests)
    scorers: dict[str, Any] = {}
    for name in backends:
        scorers[name] = CrossEncoderScorer(
            args.scorer_model,
            CrossEncoderSettings(backend=name),  # type: ignore[arg-type]
        )
    name = Path(args.scorer_model).name
    with served_scorer(args.scorer_model, name) as server:
        print(f"[scoring] server up in {server['startup_s']:.0f} s", file=sys.stderr)
        scorers[SERVER] = VllmScorer(
            VllmScorerConfig(
                base_url=server["base_url"],
                model=name,
                mode="rerank",
                max_prompts_per_request=max(args.pairs_per_request, 1),
                max_in_flight=max(levels),
                timeout_s=600.0,
            )
        )
        for scorer in scorers.values():  # load, export on first use, warm up
            one_pass(scorer, requests[:2], 1)
        paths = list(scorers)
        load_before, nice_before = os.getloadavg(), os.nice(0)
        other = OtherLoad()
        runs: dict[str, dict[int, list[dict]]] = {
            p: {c: [] for c in levels} for p in paths
        }
        for round_index in range(args.rounds):
            shift = round_index % len(paths)
            order = paths[shift:] + paths[:shift]
            for concurrency in levels:
                for path in order:
                    runs[path][concurrency].append(
                        one_pass(scorers[path], requests, concurrency)
                    )
                    last = runs[path][concurrency][-1]
                    print(
                        f"[scoring] round {round_index + 1} c={concurrency} "
                        f"{path}: {pairs / last['wall_s']:.1f} pairs/s",
                        file=sys.stderr,
                    )
        load_after, nice_after = os.getloadavg(), os.nice(0)
        others = other.share()
        scorers[SERVER].close()
    reference = runs[REFERENCE][levels[0]][0]["scores"]
    results = {}
    for path in paths:
        by_level = {}
        for concurrency in levels:
            mine = runs[path][concurrency]
            walls = [r["wall_s"] for r in mine]
            ratios = [
                ref["wall_s"] / own["wall_s"]
                for ref, own in zip(runs[REFERENCE][concurrency], mine, strict=True)
            ]
            latencies = np.array([s for r in mine for s in r["latencies_s"]]) * 1e3
            by_level[str(concurrency)] = {
                "pairs_per_s": pairs / statistics.median(walls),
                "speedup": statistics.median(ratios),
                "request_ms_p50": float(np.percentile(latencies, 50)),
                "request_ms_p95": float(np.percentile(latencies, 95)),
                "wall_s": walls,
            }
        results[path] = {
            "concurrency": by_level,
            **agreement(reference, runs[path][levels[0]][0]["scores"]),
        }
    return {
        "benchmark": "scoring_trained",
        "model": name,
        "reference": REFERENCE,
        "paths": {
            **{b: f"in process, {b}" for b in backends},
            SERVER: "earm serve-scorer (vLLM pooling runner, float32), rerank",
        },
        "results": results,
        "conversations": conversations,
        "memories": args.memories,
        "requests": len(requests),
        "pairs_per_request": args.pairs_per_request,
        "pairs": pairs,
        "concurrency": levels,
        "rounds": args.rounds,
        "server": {
            "command": server["command"],
            "startup_s": server["startup_s"],
            "vllm": vllm_version(),
        },
        **load_record(others, load_before, load_after),
        # Another job's tooling may renice a benchmark under its own work.
        "niceness_before_after": [nice_before, nice_after],
        "meta": meta,
    }


def main(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    result = run(args, argv)
    rows = []
    for path, row in result["results"].items():
        cells = {"path": path, "max_abs_delta": row["max_abs_delta"]}
        for level, numbers in row["concurrency"].items():
            cells[f"pairs/s c={level}"] = numbers["pairs_per_s"]
            cells[f"p50 ms c={level}"] = numbers["request_ms_p50"]
        rows.append(cells)
    columns = ["path"]
    for level in result["concurrency"]:
        columns += [f"pairs/s c={level}", f"p50 ms c={level}"]
    print_table(
        rows,
        [*columns, "max_abs_delta"],
        f"{result['pairs']} pairs ({result['requests']} requests), "
        f"{result['rounds']} paired rounds"
        + (" (machine busy)" if result["machine_busy"] else ""),
    )
    write_json(result, args.out)
    return result


__all__ = ["add_arguments", "main", "one_pass", "run"]
