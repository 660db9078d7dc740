"""Incremental vs full ALS on LoCoMo (evidence stand-in scorer): paired CIs.

Runs the seven policies twice on the same conversations, seeds and anchors (the
anchor choice does not depend on the solver), once per solver, and reports the
paired difference of Mixed's metrics, with bootstrap CIs over questions and over
conversations. Writes JSON (machine, versions, command) and prints a table.

    python benchmarks/quality_incremental_locomo.py --data ../shared/data/locomo \
        --out benchmarks/results/quality_incremental_conversations.json
        [--noise 0.3] [--graded 0.5]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from earm_jax.eval import stats
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import LocomoRunSettings, evaluate_streams
from earm_jax.store.embeddings import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import locomo_arguments, metadata, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = locomo_arguments(
        __doc__.splitlines()[0],
        "benchmarks/results/quality_incremental_conversations.json",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--als-sweeps", type=int, default=3)
    parser.add_argument("--refresh-rows", type=int, default=8)
    parser.add_argument(
        "--graded",
        type=float,
        default=0.0,
        help="graded stand-in: an on-topic non-evidence candidate scores about G",
    )
    args = parser.parse_args(argv)

    conversations = load_locomo(args.data)
    embedder = Embedder(cache_dir=args.cache_dir)
    per_solver: dict[str, list] = {"als": [], "incremental": []}
    seconds: dict[str, float] = {"als": 0.0, "incremental": 0.0}
    for seed in args.seeds:
        streams = build_streams(
            conversations,
            embedder,
            setting=args.setting,
            knobs=EvidenceNoise(args.noise, graded=args.graded, seed=seed),
        )
        for solver in per_solver:
            run = LocomoRunSettings(
                rank=args.rank,
                solver=solver,
                num_sweeps=args.als_sweeps,
                refresh_rows=args.refresh_rows,
            )
            begin = time.perf_counter()
            per_solver[solver].append(evaluate_streams(streams, run, seed))
            seconds[solver] += time.perf_counter() - begin
    metrics = {}
    for solver, runs in per_solver.items():
        metrics[solver] = {
            name: np.mean([r.metrics["mixed"][name] for r in runs], axis=0)
            for name in runs[0].metrics["mixed"]
        }
    first = per_solver["als"][0]
    labelled = first.has_relevant
    conversation = np.unique(first.conversation, return_inverse=True)[1]
    rows = {}
    for name in ("recall@10", "recall@20", "ndcg@10", "mrr"):
        by_query = stats.contrast_ci(
            metrics["incremental"][name],
            metrics["als"][name],
            where=labelled,
            num_resamples=args.resamples,
        )
        by_conversation = stats.contrast_ci(
            metrics["incremental"][name],
            metrics["als"][name],
            where=labelled,
            clusters=conversation,
            num_resamples=args.resamples,
        )
        als_ci = stats.mean_ci(
            metrics["als"][name], where=labelled, num_resamples=args.resamples
        )
        rows[name] = {
            "als": {"mean": als_ci.estimate, "ci": [als_ci.low, als_ci.high]},
            "incremental": float(metrics["incremental"][name][labelled].mean()),
            "incremental-als": {
                "mean": by_query.estimate,
                "ci": [by_query.low, by_query.high],
                "ci_conversations": [by_conversation.low, by_conversation.high],
            },
        }
        low, high = by_query.low, by_query.high
        print(
            f"{name:10s} als {als_ci.estimate:.4f} "
            f"[{als_ci.low:.4f}, {als_ci.high:.4f}]"
            f"  incremental {rows[name]['incremental']:.4f}"
            f"  diff {by_query.estimate:+.4f} [{low:+.4f}, {high:+.4f}]"
        )
    payload = {
        "benchmark": "incremental vs als on LoCoMo "
        "(evidence stand-in scorer, not an LLM)",
        "meta": metadata(argv),
        "config": vars(args),
        "seconds_per_solver": seconds,
        "num_labelled_queries": int(labelled.sum()),
        "mixed": rows,
    }
    out = write_json(payload, args.out)
    print(f"seconds: {seconds}; wrote {out}")
    return payload


if __name__ == "__main__":
    main()
