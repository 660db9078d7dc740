"""Cold start: does a side-information fit learned on other conversations help a
new one? (LoCoMo, evidence stand-in scorer, leave one conversation out)

The side-information model (earm_jax.core.side_information) has a shared part,
the weights theta over [z-scored similarity, sqrt(D) e_t * e_m] and their normal
equations, and a private part, each memory's residual and count and the query
offsets. For each of the 7 conversations as the new agent, the source is the
shared part pooled over the other 6 conversations' full streams, as each policy
paid for them (``model.pooled_start``); the new agent then runs from a cold
start (``model.init``) and from that shared start. Reported: Recall@10, nDCG@10
and MRR over the new agent's first ``--first`` queries (stream order, labelled
questions only, as the evaluation counts them) and over its whole stream,
paired per question, with bootstrap 95% CIs over questions and over
conversations (earm_jax.eval.stats.contrast_ci), for ``mixed_side`` and
``best_side``, at each stand-in setting and budget:

* ``paper``: the paper's schedule for Mixed (the first 10 queries score the
  whole pool, the next 10 80 of 200) and ``best``'s cap ``--call-budget``;
* ``flat``: a flat budget from the first query: Mixed's schedule with one stage
  of ``--flat`` of the pool (``EarmSettings(stage_ratios=(flat,))``) and
  ``best``'s cap at ``--flat``.

Mixed's anchors depend on the key and the schedule only, not on the solver's
rank (Bias-only shares them), so ``--rank`` does not change them; ``--check``
confirms that the cold arm equals ``earm locomo``'s ``mixed_side`` and
``best_side`` (``evaluate_streams``) on the first setting.

    python experiments/side_information_cold_start.py --data ../shared/data/locomo
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.core.online import online_solver
from earm_jax.core.run import run
from earm_jax.eval import stats
from earm_jax.eval.compare import PolicyRanking, policy_metrics, usable_mask
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import LocomoRunSettings, evaluate_streams, pad_and_stack
from earm_jax.locomo.selection import select_conversations
from earm_jax.policies.adaptive import adaptive_policy
from earm_jax.policies.side_information import run_best_side, run_mixed_side
from earm_jax.store.embeddings import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.scripts import script_metadata, write_script_json  # noqa: E402

POLICIES = ("mixed_side", "best_side")
METRICS = ("recall@10", "ndcg@10", "mrr")


def _stand_in(text: str) -> tuple[float, float]:
    noise, _, graded = text.partition(":")
    return float(noise), float(graded or 0.0)


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--setting", default="turns", choices=("turns", "observations"))
    parser.add_argument(
        "--stand-in",
        action="append",
        type=_stand_in,
        help="NOISE[:GRADED], repeatable (default: 0.1, 0.3 and 0.3:0.5)",
    )
    parser.add_argument("--budgets", default="paper,flat")
    parser.add_argument("--flat", type=float, default=0.1)
    parser.add_argument("--call-budget", type=float, default=0.25)
    parser.add_argument("--first", type=int, default=20)
    parser.add_argument("--limit", type=int, default=0, help="questions per conv.")
    parser.add_argument("--rank", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--check", action="store_true")
    parser.add_argument(
        "--out", default="experiments/results/side_information_cold_start.json"
    )
    return parser


def _run_settings(args, budget: str) -> LocomoRunSettings:
    flat = budget == "flat"
    return LocomoRunSettings(
        rank=args.rank,
        preset="best",
        call_budget=args.flat if flat else args.call_budget,
        stage_ratios=(args.flat,) if flat else LocomoRunSettings.stage_ratios,
        side_information=True,
    )


@functools.lru_cache(maxsize=4)
def _side_job(settings: LocomoRunSettings, num_memories: int, shape: tuple):
    """jit(vmap) of (key, stream, starts) -> (metrics, has_relevant, final states):
    Mixed's anchors as compare_policies draws them, then both side policies
    (one compiled program per budget setting, shared by the stand-ins)."""
    _, num_queries, pool = shape
    config = settings.solver_config(num_memories, num_queries, pool)
    solver = online_solver(config, settings.policy(pool))
    best_policy = adaptive_policy(settings.adaptive_config(pool))
    model = settings.side_model()

    def one(key, stream, mixed_start, best_start):
        usable = usable_mask(stream)
        answers = jnp.asarray(stream.scores, jnp.float32)
        _, mixed = run(solver, key, stream)
        calls = jnp.sum(mixed.anchors, axis=-1, dtype=jnp.int32)
        mixed_state, mixed_scores = run_mixed_side(
            model,
            stream.queries,
            answers,
            mixed.anchors,
            stream.query_embeddings,
            stream.memory_embeddings,
            usable,
            initial_state=mixed_start,
        )
        (_, best_state), best = run_best_side(
            best_policy,
            model,
            stream.queries,
            answers,
            stream.query_embeddings,
            stream.memory_embeddings,
            usable,
            initial_state=best_start,
        )
        rankings = {
            "mixed_side": PolicyRanking(mixed_scores, usable, calls),
            "best_side": PolicyRanking(best.scores, usable, best.calls, best.rounds),
        }
        metrics, has_relevant = policy_metrics(rankings, stream, (10,))
        pool_used = jnp.sum(usable, axis=-1).astype(jnp.float32)
        return metrics, has_relevant, pool_used, (mixed_state, best_state)

    return model, jax.jit(jax.vmap(one))


def _leave_one_out(model, states, num_memories: int):
    """Start of conversation i: the normal equations of all the others pooled."""
    count = states.gram.shape[0]
    starts = [
        model.pooled_start(
            jax.tree.map(lambda x, i=i: x[np.arange(count) != i], states),
            num_memories,
        )
        for i in range(count)
    ]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *starts)


def _contrast(shared, cold, where, codes, resamples, seed):
    by_query = stats.contrast_ci(
        shared, cold, where=where, num_resamples=resamples, seed=seed
    )
    by_conversation = stats.contrast_ci(
        shared, cold, where=where, clusters=codes, num_resamples=resamples, seed=seed
    )
    return {
        "cold": float(cold[where].mean()),
        "shared": float(shared[where].mean()),
        "difference": by_query.estimate,
        "ci_queries": [by_query.low, by_query.high],
        "ci_conversations": [by_conversation.low, by_conversation.high],
        "num_queries": by_query.num_queries,
    }


def _point(args, conversations, embedder, noise, graded, budget) -> dict:
    knobs = EvidenceNoise(noise, seed=args.seed, graded=graded)
    streams = build_streams(conversations, embedder, setting=args.setting, knobs=knobs)
    batch, real = pad_and_stack([s.arrays for s in streams])
    num_streams, num_queries, _ = batch.scores.shape
    num_memories = int(batch.insert_time.shape[1])
    settings = _run_settings(args, budget)
    model, job = _side_job(settings, num_memories, batch.scores.shape)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(
        jnp.arange(num_streams)
    )
    width = batch.memory_embeddings.shape[-1]
    cold_starts = jax.vmap(lambda _: model.init(num_memories, width))(
        jnp.arange(num_streams)
    )
    began = time.perf_counter()
    cold, has_relevant, pool_used, (mixed_final, best_final) = job(
        keys, batch, cold_starts, cold_starts
    )
    starts = (
        _leave_one_out(model, mixed_final, num_memories),
        _leave_one_out(model, best_final, num_memories),
    )
    shared, _, _, _ = job(keys, batch, *starts)
    cold, shared, has_relevant, pool_used = jax.tree.map(
        np.asarray, (cold, shared, has_relevant, pool_used)
    )
    seconds = time.perf_counter() - began
    check = None
    if args.check:
        reference = evaluate_streams(streams, settings, args.seed)
        check = {
            policy: all(
                np.array_equal(reference.metrics[policy][m], cold[policy][m][real])
                for m in METRICS
            )
            for policy in POLICIES
        }
        print(f"  cold arm equals evaluate_streams: {check}")
    index = np.broadcast_to(np.arange(num_queries), real.shape)[real]
    labelled = has_relevant[real]
    ids = np.array([s.meta.sample_id for s in streams])
    conversation = np.broadcast_to(ids[:, None], real.shape)[real]
    codes = np.unique(conversation, return_inverse=True)[1]
    windows = {f"first_{args.first}": index < args.first, "all": index >= 0}
    out: dict = {
        "stand_in": {"noise": noise, "graded": graded},
        "budget": budget,
        "schedule": {
            "mixed_stage_ratios": list(settings.stage_ratios),
            "block_size": settings.block_size,
            "best_call_budget": settings.call_budget,
        },
        "seconds": seconds,
        "feature_width": int(width) + 1,
        "calls": {},
        "results": {},
        "per_conversation": {},
    }
    pool = pool_used[real]
    for name, window in windows.items():
        out["calls"][name] = {
            policy: {
                "mean_calls": float(cold[policy]["calls"][real][window].mean()),
                "fraction_of_pool": float(
                    cold[policy]["calls"][real][window].sum() / pool[window].sum()
                ),
            }
            for policy in POLICIES
        }
        out["results"][name] = {
            policy: {
                metric: _contrast(
                    shared[policy][metric][real],
                    cold[policy][metric][real],
                    labelled & window,
                    codes,
                    args.resamples,
                    args.seed,
                )
                for metric in METRICS
            }
            for policy in POLICIES
        }
    first = windows[f"first_{args.first}"]
    for sample in ids:
        mine = (conversation == sample) & labelled & first
        out["per_conversation"][str(sample)] = {
            "num_queries": int(mine.sum()),
            **{
                policy: float(
                    shared[policy]["recall@10"][real][mine].mean()
                    - cold[policy]["recall@10"][real][mine].mean()
                )
                for policy in POLICIES
            },
        }
    if check is not None:
        out["cold_equals_evaluate_streams"] = check
    return out


def main(argv: list[str] | None = None) -> dict:
    args = _arguments().parse_args(argv)
    stand_ins = args.stand_in or [(0.1, 0.0), (0.3, 0.0), (0.3, 0.5)]
    conversations = select_conversations(load_locomo(args.data), (), args.limit)
    embedder = Embedder(cache_dir=args.cache_dir)
    points = []
    for budget in args.budgets.split(","):
        for noise, graded in stand_ins:
            print(f"noise {noise}, graded {graded}, budget {budget}")
            point = _point(args, conversations, embedder, noise, graded, budget)
            args.check = False  # once, on the first point
            points.append(point)
            for window, rows in point["results"].items():
                for policy, row in rows.items():
                    r = row["recall@10"]
                    calls = point["calls"][window][policy]["fraction_of_pool"]
                    print(
                        f"  {window:9s} {policy:10s} calls {calls:.3f}  R@10 cold "
                        f"{r['cold']:.4f} shared {r['shared']:.4f} diff "
                        f"{r['difference']:+.4f} [{r['ci_queries'][0]:+.4f}, "
                        f"{r['ci_queries'][1]:+.4f}] conv "
                        f"[{r['ci_conversations'][0]:+.4f}, "
                        f"{r['ci_conversations'][1]:+.4f}] (n={r['num_queries']})"
                    )
    width = points[0]["feature_width"] if points else None
    payload = {
        "benchmark": "side-information cold start: leave-one-conversation-out "
        "shared start against a cold start (evidence stand-in scorer, not an LLM)",
        "meta": script_metadata(argv),
        "config": {**vars(args), "stand_in": stand_ins},
        "embedding_model": embedder.identity,
        "shared_between_tenants": {
            "note": "float32 arrays; F = embedding width + 1",
            "gram": [width, width],
            "moment": [width],
            "weights": [width],
        },
        "points": points,
    }
    out = write_script_json(payload, args.out)
    print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    main()
