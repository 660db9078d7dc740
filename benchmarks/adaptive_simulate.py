"""Issue 10: the adaptive policy on the default simulated streams (prototype check)."""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.eval import stats
from earm_jax.eval.compare import anchors_first, usable_mask
from earm_jax.eval.metrics import ranking_metrics
from earm_jax.eval.simulate import SimConfig, make_streams
from earm_jax.policies import adaptive as ad
from earm_jax.policies.anchors import top_similarity_anchors
from earm_jax.policies.budget import stage_schedule


def main(overrides: dict, budget: float = 0.25, streams: int = 16):
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
    cfg = ad.AdaptiveConfig(pool_size=config.pool_size, call_budget=budget, **overrides)
    policy = ad.adaptive_policy(cfg)
    _, info = jax.jit(jax.vmap(lambda q, s, u: ad.run_adaptive(policy, q, s, u)))(
        batch.queries, batch.scores, usable
    )
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
    for metric in ("recall", "ndcg", "mrr"):
        ci = stats.contrast_ci(
            out["best"][metric],
            out["top_similarity"][metric],
            where=has,
            num_resamples=300,
        )
        print(f"best-top {metric}: {ci.estimate:+.4f} [{ci.low:+.4f}, {ci.high:+.4f}]")
    print("rounds", ad.rounds_summary(np.asarray(info.rounds).ravel()))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
