"""The solver's own similarity covariate (``earm_jax.contrib.similarity_covariate``,
once ``SolverConfig.similarity_covariate``: the exact joint fold-in of
(c_t, v_t, β_t)) against the paper's fold-in, on
LoCoMo with the evidence stand-in scorer (not an LLM), for the paper's anchors
(Mixed) and for Top-similarity anchors + completion.

    python experiments/similarity_covariate_core.py --data ../shared/data/locomo \\
        [--setting observations] [--noise 0.3] [--graded 0.5]
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from earm_jax.contrib.similarity_covariate import similarity_covariate_solver
from earm_jax.eval import stats
from earm_jax.eval.compare import (
    PolicyRanking,
    evaluate_policies,
    policy_metrics,
    usable_mask,
)
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import pad_and_stack
from earm_jax.store.embeddings import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.scripts import locomo_arguments, script_metadata, write_script_json  # noqa: E402

METRICS = ("recall@10", "ndcg@10", "mrr")


def evaluate_with_covariate(key, stream, config, policy):
    """``evaluate_policies``' Mixed (same key, so the same anchors) with the
    covariate in the fold-in: ``(metrics, has_relevant, calls)``."""
    _, infos = ej.run(similarity_covariate_solver(config, policy), key, stream)
    calls = jnp.sum(infos.anchors, axis=-1, dtype=jnp.int32)
    ranking = PolicyRanking(infos.scores, usable_mask(stream), calls)
    metrics, has_relevant = policy_metrics({"mixed": ranking}, stream)
    return metrics, has_relevant, calls


def main(argv: list[str] | None = None) -> dict:
    parser = locomo_arguments(
        __doc__.splitlines()[0], "experiments/results/similarity_covariate_core.json"
    )
    parser.add_argument("--graded", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    streams = build_streams(
        load_locomo(args.data),
        Embedder(cache_dir=args.cache_dir),
        setting=args.setting,
        knobs=EvidenceNoise(args.noise, graded=args.graded, seed=args.seed),
    )
    batch, real = pad_and_stack([s.arrays for s in streams])
    num_streams, num_queries, pool = batch.scores.shape
    base = ej.EarmSettings(rank=args.rank).solver_config(
        int(batch.insert_time.shape[1]), num_queries, pool
    )
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(
        jnp.arange(num_streams)
    )
    results, contrasts = {}, {}
    for anchors, policy in (
        ("paper", ej.paper_policy(pool_size=pool)),
        ("top_similarity", ej.top_similarity_policy(pool_size=pool)),
    ):
        runs = {}
        for flag in (False, True):
            evaluate = evaluate_with_covariate if flag else evaluate_policies
            job = jax.jit(jax.vmap(lambda k, s, e=evaluate, p=policy: e(k, s, base, p)))
            metrics, has_relevant, _ = jax.tree.map(np.asarray, job(keys, batch))
            labelled = has_relevant[real]
            runs[flag] = {m: metrics["mixed"][m][real] for m in METRICS}
            name = f"{anchors} anchors + completion" + (" + β·s̃" if flag else "")
            results[name] = {m: float(runs[flag][m][labelled].mean()) for m in METRICS}
            if anchors == "top_similarity" and not flag:
                plain = {m: metrics["top_similarity"][m][real] for m in METRICS}
                results["top_similarity"] = {
                    m: float(plain[m][labelled].mean()) for m in METRICS
                }
        for m in METRICS:
            ci = stats.contrast_ci(
                runs[True][m],
                runs[False][m],
                where=labelled,
                num_resamples=args.resamples,
            )
            contrasts.setdefault(f"{anchors}: + β·s̃ − without", {})[m] = [
                ci.estimate,
                ci.low,
                ci.high,
            ]
    for name, row in results.items():
        print(f"{name:42s} " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))
    for name, row in contrasts.items():
        print(
            f"{name:36s} "
            + "  ".join(
                f"{k} {v[0]:+.4f} [{v[1]:+.4f}, {v[2]:+.4f}]" for k, v in row.items()
            )
        )
    payload = {
        "benchmark": "solver similarity covariate "
        "(evidence stand-in scorer, not an LLM)",
        "meta": script_metadata(argv),
        "config": vars(args),
        "num_labelled_queries": int(labelled.sum()),
        "results": results,
        "contrasts": contrasts,
    }
    print(f"wrote {write_script_json(payload, args.out)}")
    return payload


if __name__ == "__main__":
    main()
