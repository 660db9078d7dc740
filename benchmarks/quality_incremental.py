"""Completion quality of the ``incremental`` solver against the full ``als`` solver.

Both solvers run on the same simulated streams with the same keys, hence the
same anchors (the paper policy's anchors depend on the key, the pool and the
budget, never on the model), so every difference is the completion's. Per
query: RMSE of the completion on the unobserved usable candidates (against the
scorer's answers there), and Recall@10 / nDCG@10 of the mixed ranking
(``StepInfo.scores``) against ``stream.relevant``. Paired bootstrap CIs of the
differences resample whole streams (``earm_jax.eval.stats.contrast_ci``).

    python benchmarks/quality_incremental.py \
        --out benchmarks/results/quality_incremental_cpu.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))

import earm_jax as ej  # noqa: E402
from benchmarks._common import metadata, print_table, write_json  # noqa: E402
from earm_jax.eval import metrics, stats  # noqa: E402
from earm_jax.eval.simulate import SimConfig, make_streams  # noqa: E402


def per_query(stream: ej.Stream, infos: ej.StepInfo, k: int = 10) -> dict:
    """Per-query metrics ``[S, T]`` (NumPy) of one solver's run."""
    usable = np.isfinite(np.asarray(infos.scores))
    hidden = usable & ~np.asarray(infos.anchors)
    error = np.where(
        hidden, np.asarray(infos.completed) - np.asarray(stream.scores), 0.0
    )
    num_hidden = hidden.sum(-1)
    mse = (error**2).sum(-1) / np.maximum(num_hidden, 1)
    ranking = metrics.ranking_metrics(
        infos.scores,
        stream.relevant,
        k=k,
        where=jnp.asarray(usable),
        num_relevant=stream.num_relevant,
    )
    return {
        "mse": mse,
        "has_hidden": num_hidden > 0,
        "recall": np.asarray(ranking.recall),
        "ndcg": np.asarray(ranking.ndcg),
        "has_relevant": np.asarray(ranking.has_relevant),
    }


def run_solver(streams, keys, config, policy):
    solver = ej.online_solver(config, policy)
    fn = jax.jit(functools.partial(ej.run_batch, solver))
    start = time.perf_counter()
    _, infos = fn(keys, streams)
    jax.block_until_ready(infos)
    return infos, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--memories", type=int, default=600)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--pool", type=int, default=60)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--sweeps", type=int, default=5, help="als sweeps per query")
    parser.add_argument(
        "--refresh", type=int, nargs="+", default=[8], help="incremental refresh_rows"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    sim = SimConfig(
        num_memories=args.memories, num_queries=args.queries, pool_size=args.pool
    )
    streams = jax.jit(make_streams, static_argnums=(1, 2))(
        jax.random.key(args.seed), sim, args.streams
    )
    keys = jax.random.split(jax.random.key(args.seed + 1), args.streams)
    policy = ej.paper_policy(pool_size=args.pool)
    base = ej.SolverConfig(
        num_memories=args.memories,
        capacity=args.queries,
        pool_size=args.pool,
        max_budget=args.pool,
        rank=args.rank,
        num_sweeps=args.sweeps,
    )
    variants = {"als": base._replace(solver="als")}
    for refresh in args.refresh:
        variants[f"incremental_r{refresh}"] = base._replace(
            solver="incremental", refresh_rows=refresh
        )
    results, seconds = {}, {}
    for name, config in variants.items():
        infos, seconds[name] = run_solver(streams, keys, config, policy)
        results[name] = per_query(streams, infos)
        print(f"{name}: {seconds[name]:.1f} s (compile + run)", flush=True)

    clusters = np.arange(args.streams)[:, None]
    reference = results["als"]
    rows = []
    for name, result in results.items():
        row = {"solver": name, "seconds_incl_compile": seconds[name]}
        for metric, where_key in (
            ("mse", "has_hidden"),
            ("recall", "has_relevant"),
            ("ndcg", "has_relevant"),
        ):
            where = result[where_key] & reference[where_key]
            ci = stats.mean_ci(
                result[metric],
                where=where,
                clusters=clusters,
                num_resamples=args.resamples,
            )
            row[metric] = ci._asdict()
            if name != "als":
                diff = stats.contrast_ci(
                    result[metric],
                    reference[metric],
                    where=where,
                    clusters=clusters,
                    num_resamples=args.resamples,
                )
                row[f"{metric}_minus_als"] = diff._asdict()
        row["rmse"] = float(np.sqrt(row["mse"]["estimate"]))
        rows.append(row)

    table = []
    for row in rows:
        entry = {
            "solver": row["solver"],
            "rmse": row["rmse"],
            "recall@10": row["recall"]["estimate"],
            "recall CI": f"[{row['recall']['low']:.4f}, {row['recall']['high']:.4f}]",
            "ndcg@10": row["ndcg"]["estimate"],
        }
        if "recall_minus_als" in row:
            d = row["recall_minus_als"]
            entry["Δrecall vs als [95% CI]"] = (
                f"{d['estimate']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
            )
            m = row["mse_minus_als"]
            entry["Δmse vs als [95% CI]"] = (
                f"{m['estimate']:+.5f} [{m['low']:+.5f}, {m['high']:+.5f}]"
            )
        table.append(entry)
    print_table(
        table,
        [
            "solver",
            "rmse",
            "recall@10",
            "recall CI",
            "ndcg@10",
            "Δrecall vs als [95% CI]",
            "Δmse vs als [95% CI]",
        ],
        title=(
            f"S={args.streams} streams, M={args.memories}, T={args.queries}, "
            f"N={args.pool}, r={args.rank} (CIs: paired bootstrap over streams)"
        ),
    )
    payload = {
        "benchmark": "quality_incremental",
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "config": {
            "sim": sim._asdict(),
            "num_streams": args.streams,
            "solvers": {name: c._asdict() for name, c in variants.items()},
            "policy": "paper_policy(pool_size)",
            "seed": args.seed,
        },
        "results": rows,
    }
    write_json(payload, args.out)
    return payload


if __name__ == "__main__":
    main()
