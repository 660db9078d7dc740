"""The adaptive policy against Top-similarity on default simulated
streams (16 streams, key 0; not the streams of ``earm simulate``, which derives
its keys differently), with AdaptiveConfig overrides, in ~30 s.

    python experiments/adaptive_simulate.py [--config '{"merge": "evidence"}']
        [--call-budget 0.25] [--out experiments/results/adaptive_simulate.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.contrib.stop_rules import rejected_stop_rule
from earm_jax.eval import stats
from earm_jax.eval.best_batch import run_best
from earm_jax.eval.compare import anchors_first, usable_mask
from earm_jax.eval.metrics import ranking_metrics
from earm_jax.eval.simulate import SimConfig, make_streams
from earm_jax.jobs.metadata import provenance
from earm_jax.policies import adaptive as ad
from earm_jax.policies.anchors import top_similarity_anchors
from earm_jax.policies.budget import stage_schedule


def main(overrides: dict, budget: float = 0.25, streams: int = 16) -> dict:
    config = SimConfig()
    batch = make_streams(jax.random.key(0), config, streams)
    usable = jax.vmap(usable_mask)(batch)
    sched = stage_schedule(config.pool_size)
    budgets = jax.vmap(sched)(jnp.arange(config.num_queries))
    top_fn = top_similarity_anchors()
    top = jax.vmap(jax.vmap(lambda q, b, u: top_fn(None, q, b, u)), (0, None, 0))(
        batch.queries, budgets, usable
    )
    sim = jnp.where(usable, batch.queries.similarity, -jnp.inf)
    overrides = dict(overrides)
    # A rejected stop rule is named here and built from earm_jax.contrib, with
    # the price pacing the price rules read.
    rule = overrides.pop("stop_rule", "settle_or_spill")
    pacing = {
        name: overrides.pop(name)
        for name in ("initial_price", "pacing_rate")
        if name in overrides
    }
    if rule != "settle_or_spill" or pacing:
        overrides["stop_rule"] = rejected_stop_rule(rule, **pacing)
    cfg = ad.AdaptiveConfig(pool_size=config.pool_size, call_budget=budget, **overrides)
    policy = ad.adaptive_policy(cfg)
    _, info = jax.jit(lambda b, u: run_best(policy, b, u))(batch, usable)
    ranks = {
        "semantic": sim,
        "full": jnp.where(usable, batch.scores, -jnp.inf),
        "top_similarity": anchors_first(batch.scores, top, sim),
        "best": info.scores,
    }
    calls = {
        "semantic": 0,
        "full": float(usable.sum()),
        "top_similarity": float(top.sum()),
        "best": float(info.calls.sum()),
    }
    out = {}
    for name, sc in ranks.items():
        m = ranking_metrics(
            sc, batch.relevant, k=10, where=usable, num_relevant=batch.num_relevant
        )
        out[name] = {k: np.asarray(getattr(m, k)) for k in ("recall", "ndcg", "mrr")}
        has = np.asarray(m.has_relevant)
    for name in ranks:
        print(
            f"{name:15s} R@10 {out[name]['recall'][has].mean():.3f} ndcg "
            f"{out[name]['ndcg'][has].mean():.3f} "
            f"mrr {out[name]['mrr'][has].mean():.3f}"
            f" calls {calls[name] / calls['full']:.3f}"
        )
    report = {
        name: {
            "calls_fraction": calls[name] / calls["full"],
            **{metric: float(out[name][metric][has].mean()) for metric in out[name]},
        }
        for name in ranks
    }
    for metric in ("recall", "ndcg", "mrr"):
        ci = stats.contrast_ci(
            out["best"][metric],
            out["top_similarity"][metric],
            where=has,
            num_resamples=300,
        )
        report[f"best-top_similarity {metric}@10"] = [ci.estimate, ci.low, ci.high]
        print(f"best-top {metric}: {ci.estimate:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}]")
    report["rounds"] = ad.rounds_summary(np.asarray(info.rounds).ravel())
    print("rounds", report["rounds"])
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--config", default="{}", help="JSON overrides of AdaptiveConfig"
    )
    parser.add_argument("--call-budget", type=float, default=0.25)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    overrides = json.loads(args.config)
    if "round_sizes" in overrides:
        overrides["round_sizes"] = tuple(overrides["round_sizes"])
    results = main(overrides, budget=args.call_budget)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    **provenance("python experiments/adaptive_simulate.py"),
                    "scorer": "simulated (truth + noise), not an LLM",
                    "args": vars(args),
                    "results": results,
                },
                indent=1,
            )
        )
