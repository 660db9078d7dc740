"""Does completion help on top of the strong anchors? (LoCoMo, stand-in scorer)

The seven-policy comparison pairs completion with the paper's stratified
anchors. This script runs the same solver with Top-similarity anchors (score the
B_t most similar candidates) instead, so that "mixed" = top-similarity anchors +
completion for the rest and "observed_backfill" = the Top-similarity policy, and
reports their paired difference with bootstrap CIs. Scores: the evidence
stand-in (not an LLM).

    python experiments/completion_on_top_similarity.py --data ../shared/data/locomo
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from earm_jax.eval import stats
from earm_jax.eval.compare import evaluate_policies
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import pad_and_stack
from earm_jax.store.embeddings import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.scripts import locomo_arguments, script_metadata, write_script_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = locomo_arguments(
        __doc__.splitlines()[0], "experiments/results/completion_on_top_similarity.json"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    streams = build_streams(
        load_locomo(args.data),
        Embedder(cache_dir=args.cache_dir),
        setting=args.setting,
        knobs=EvidenceNoise(args.noise, seed=args.seed),
    )
    batch, real = pad_and_stack([s.arrays for s in streams])
    num_streams, num_queries, pool = batch.scores.shape
    config = ej.EarmSettings(rank=args.rank).solver_config(
        int(batch.insert_time.shape[1]), num_queries, pool
    )
    policy = ej.top_similarity_policy(pool_size=pool)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(
        jnp.arange(num_streams)
    )
    job = jax.jit(
        jax.vmap(lambda k, s: evaluate_policies(k, s, config, policy, (10, 20)))
    )
    metrics, has_relevant, _ = jax.tree.map(np.asarray, job(keys, batch))
    labelled = has_relevant[real]
    rows = {}
    for name in ("recall@10", "recall@20", "ndcg@10", "mrr"):
        with_completion = metrics["mixed"][name][real]
        without = metrics["top_similarity"][name][real]
        ci = stats.contrast_ci(
            with_completion, without, where=labelled, num_resamples=args.resamples
        )
        rows[name] = {
            "top_similarity": float(without[labelled].mean()),
            "top_similarity_plus_completion": float(with_completion[labelled].mean()),
            "difference": {"mean": ci.estimate, "ci": [ci.low, ci.high]},
        }
        print(
            f"{name:10s} top-sim {rows[name]['top_similarity']:.4f}  + completion "
            f"{rows[name]['top_similarity_plus_completion']:.4f}  "
            f"diff {ci.estimate:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}]"
        )
    payload = {
        "benchmark": "completion on top of Top-similarity anchors "
        "(evidence stand-in scorer, not an LLM)",
        "meta": script_metadata(argv),
        "config": vars(args),
        "num_labelled_queries": int(labelled.sum()),
        "results": rows,
    }
    out = write_script_json(payload, args.out)
    print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    main()
