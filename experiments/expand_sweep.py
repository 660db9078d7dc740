"""Search expansion on LoCoMo: a sweep of slots E and the completion gate.

One Mixed run (paper schedule, rank 8, ALS 3 sweeps, as ``earm locomo``) per
(setting, noise) with ``E_max`` ungated expansion slots; smaller ``E`` and a
completion gate ``min_score`` are applied afterwards. That is exact: the slots
are in descending completion order, so the gated top ``E`` is the prefix of the
ungated list that passes the gate. Scores: the evidence stand-in (not an LLM).

    python experiments/expand_sweep.py --data ../shared/data/locomo \
        --points turns:0.1,turns:0.3,observations:0.1,observations:0.3 \
        --out experiments/results/expand_sweep.json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.contrib.expand import ExpandInfo, expanded_ranking, run_expanded
from earm_jax.core.online import online_solver
from earm_jax.eval import stats
from earm_jax.eval.compare import usable_mask
from earm_jax.eval.metrics import ranking_metrics, ranking_positions
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import LocomoRunSettings, pad_and_stack
from earm_jax.store.embeddings import Embedder


def _interval(ci):
    return {"mean": ci.estimate, "ci": [ci.low, ci.high]}


def run_point(data, setting, noise, slots, seed, gates, sizes, resamples, score):
    streams = build_streams(
        load_locomo(data), Embedder(), setting=setting, knobs=EvidenceNoise(noise)
    )
    batch, real = pad_and_stack([s.arrays for s in streams])
    run = LocomoRunSettings()
    _, num_queries, pool = batch.scores.shape
    config = run.solver_config(int(batch.insert_time.shape[1]), num_queries, pool)
    solver = online_solver(config, run.policy(pool))
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(
        jnp.arange(batch.scores.shape[0])
    )

    def one(key, stream):
        _, infos, expansion = run_expanded(solver, key, stream, slots, score=score)
        return infos.scores, usable_mask(stream), expansion

    start = time.perf_counter()
    scores, usable, expansion = jax.jit(jax.vmap(one))(keys, batch)
    seconds = time.perf_counter() - start

    def metrics(expansion_used):
        outside = (
            jnp.take_along_axis(
                batch.relevant_memories, expansion_used.memories, axis=-1
            )
            & expansion_used.valid
        )
        ranked, eligible, _ = expanded_ranking(
            scores, usable, batch.queries.candidates, expansion_used
        )
        relevant = jnp.concatenate([batch.relevant, outside], axis=-1)
        m = ranking_metrics(
            ranked, relevant, k=10, where=eligible, num_relevant=batch.num_relevant
        )
        width = scores.shape[-1]
        positions = ranking_positions(ranked, where=eligible)[..., width:]
        entered = expansion_used.valid & (positions < 10)
        in_pool = (batch.relevant & usable).sum(-1)
        return {
            "slots_filled": np.asarray(expansion_used.valid.sum(-1), float)[real],
            "slots_relevant": np.asarray(outside.sum(-1), float)[real],
            "missed": np.asarray(jnp.maximum(batch.num_relevant - in_pool, 0), float)[
                real
            ],
            "recall@10": np.asarray(m.recall)[real],
            "ndcg@10": np.asarray(m.ndcg)[real],
            "mrr": np.asarray(m.mrr)[real],
            "entered": np.asarray(entered.sum(-1), float)[real],
            "entered_relevant": np.asarray((entered & outside).sum(-1), float)[real],
            "has": np.asarray(m.has_relevant)[real],
        }

    empty = ExpandInfo(
        expansion.memories[..., :0],
        expansion.scores[..., :0],
        expansion.valid[..., :0],
        expansion.completed[..., :0],
    )
    base = metrics(empty)
    has = base["has"]
    out = {
        "setting": setting,
        "noise": noise,
        "score": score,
        "solver_seconds": seconds,
        "num_scored_queries": int(has.sum()),
        "mixed": {
            k: float(base[k][has].mean()) for k in ("recall@10", "ndcg@10", "mrr")
        },
        "variants": [],
    }
    for size in sizes:
        for gate in gates:
            shown = expansion.scores[..., :size]
            keep = expansion.valid[..., :size] & (jnp.nextafter(shown, jnp.inf) >= gate)
            used = ExpandInfo(
                expansion.memories[..., :size],
                jnp.where(keep, shown, -jnp.inf),
                keep,
                expansion.completed[..., :size],
            )
            m = metrics(used)
            row = {"E": size, "min_score": gate}
            for name in ("recall@10", "ndcg@10", "mrr"):
                row[name] = _interval(
                    stats.contrast_ci(
                        m[name], base[name], where=has, num_resamples=resamples
                    )
                )
            row["expanded_per_query"] = float(m["entered"][has].mean())
            row["queries_with_expanded"] = float((m["entered"][has] > 0).mean())
            total = m["entered"][has].sum()
            row["precision"] = (
                float(m["entered_relevant"][has].sum() / total) if total else None
            )
            missed = m["missed"][has].sum()
            row["slots_filled_per_query"] = float(m["slots_filled"][has].mean())
            row["slot_recall"] = (
                float(m["slots_relevant"][has].sum() / missed) if missed else None
            )
            out["variants"].append(row)
            print(
                f"{setting} {noise} {score} E={size} gate={gate}: dR@10 "
                f"{row['recall@10']['mean']:+.4f} {row['recall@10']['ci']} "
                f"in top10 {row['expanded_per_query']:.3f}/q "
                f"prec {row['precision']} slot recall {row['slot_recall']}",
                flush=True,
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--points", default="turns:0.1")
    parser.add_argument("--slots", type=int, default=10)
    parser.add_argument("--gates", default="0,0.3,0.5,0.7,0.9")
    parser.add_argument("--sizes", default="1,3,10")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--score", default="completion")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    gates = [float(g) for g in args.gates.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for point in args.points.split(","):
        setting, noise = point.split(":")
        results.append(
            run_point(
                args.data,
                setting,
                float(noise),
                args.slots,
                args.seed,
                gates,
                sizes,
                args.resamples,
                args.score,
            )
        )
    payload = {
        "scorer_note": "evidence stand-in scorer (not an LLM)",
        "config": vars(args),
        "points": results,
    }
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(payload, handle, indent=1)


if __name__ == "__main__":
    main()
