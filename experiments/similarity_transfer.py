"""Does a similarity covariate or a query-to-query transfer
term make completion better? (LoCoMo, evidence stand-in scorer, not an LLM.)

The solver's completion is ``ŷ = μ + b_m + c_t + u_m·v_t``. Two additions are
measured on top of it, each fitted per query from that query's anchors only
(causal):

* **similarity covariate** ``β_t·s̃_{m,t}``: ``s̃`` is the similarity
  standardised over the query's usable pool; ``(Δc_t, β_t)`` is a ridge fit
  (λ = the solver's l2) of the anchors' residuals ``y − ŷ`` on ``[1, s̃]``,
  i.e. one backfitting step of the joint fold-in with ``(μ, b, U, v_t)`` held
  fixed (the history model is unchanged: the paper's ``β = 0``).
* **transfer term** ``τ_{m,t}``: the past direct scores of memory ``m``
  weighted by how similar each past query is to this one,
  ``τ = Σ_{s<t} w_{s,t} y_{m,s} / (1 + Σ_{s<t} w_{s,t})`` with
  ``w = max(0, cos(q_s, q_t))^4`` over the past queries that scored ``m``
  (MiniLM query embeddings); it joins the residual fit as a third feature
  ``[1, s̃, τ]``.

Each is measured under two anchor sets: the paper's stratified anchors
(``mixed``) and Top-similarity anchors (``top_similarity + completion``), with
Recall@10, nDCG@10 and MRR, paired 95% bootstrap CIs over questions.

    python experiments/similarity_transfer.py --data ../shared/data/locomo \\
        [--setting observations] [--noise 0.3] [--graded 0.5]
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from earm_jax.core.run import run
from earm_jax.eval import stats
from earm_jax.eval.compare import anchors_first, usable_mask
from earm_jax.eval.metrics import ranking_metrics
from earm_jax.locomo import EvidenceNoise, build_streams, load_locomo
from earm_jax.locomo.evaluate import pad_and_stack
from earm_jax.store.embeddings import Embedder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.jobs.scripts import locomo_arguments, script_metadata, write_script_json  # noqa: E402

TRANSFER_POWER = 4


def standardised_similarity(similarity, usable):
    """``s̃``: z-score of the similarity over the query's usable candidates."""
    count = jnp.maximum(usable.sum(-1, keepdims=True), 1)
    finite = jnp.where(usable, similarity, 0.0)
    mean = finite.sum(-1, keepdims=True) / count
    spread = jnp.sqrt(
        jnp.where(usable, (finite - mean) ** 2, 0.0).sum(-1, keepdims=True) / count
    )
    return jnp.where(usable, (finite - mean) / jnp.maximum(spread, 1e-6), 0.0)


def residual_fit(completed, answers, anchors, features, l2):
    """``completed + features @ w``, ``w`` the ridge fit of the anchors'
    residuals on ``features`` (``[T, N, F]``), per query."""
    residual = jnp.where(anchors, answers - completed, 0.0)
    weights = anchors[..., None] * features
    gram = jnp.einsum("tnf,tng->tfg", weights, features)
    rhs = jnp.einsum("tnf,tn->tf", weights, residual)
    eye = jnp.eye(features.shape[-1])
    coef = jnp.linalg.solve(gram + l2 * eye, rhs[..., None])[..., 0]
    return completed + jnp.einsum("tnf,tf->tn", features, coef)


def transfer_scores(query_vectors, candidates, answers, anchors, num_memories):
    """``τ[T, N]`` from past queries' direct scores (causal: ``s < t`` only)."""
    num_queries = candidates.shape[0]
    cosine = query_vectors @ query_vectors.T
    weight = np.maximum(cosine, 0.0) ** TRANSFER_POWER
    weight = np.tril(weight, k=-1)  # only earlier queries
    # Past scores as a dense [T, M] matrix (NaN = not scored at that query).
    past = np.zeros((num_queries, num_memories))
    scored = np.zeros((num_queries, num_memories))
    rows = np.repeat(np.arange(num_queries)[:, None], candidates.shape[1], 1)
    past[rows[anchors], candidates[anchors]] = answers[anchors]
    scored[rows[anchors], candidates[anchors]] = 1.0
    numerator = weight @ past  # [T, M]
    denominator = weight @ scored
    tau = numerator / (1.0 + denominator)
    return np.take_along_axis(tau, candidates, axis=1).astype(np.float32)


def main(argv: list[str] | None = None) -> dict:
    parser = locomo_arguments(
        __doc__.splitlines()[0], "experiments/results/similarity_transfer.json"
    )
    parser.add_argument("--graded", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    embedder = Embedder(cache_dir=args.cache_dir)
    streams = build_streams(
        load_locomo(args.data),
        embedder,
        setting=args.setting,
        knobs=EvidenceNoise(args.noise, graded=args.graded, seed=args.seed),
    )
    batch, real = pad_and_stack([s.arrays for s in streams])
    num_streams, num_queries, pool = batch.scores.shape
    num_memories = int(batch.insert_time.shape[1])
    settings = ej.EarmSettings(rank=args.rank)
    config = settings.solver_config(num_memories, num_queries, pool)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(
        jnp.arange(num_streams)
    )
    usable = jax.vmap(usable_mask)(batch)
    similarity = jnp.where(usable, batch.queries.similarity, -jnp.inf)
    answers = jnp.asarray(batch.scores)
    s_tilde = standardised_similarity(batch.queries.similarity, usable)

    rankings = {
        "semantic": similarity,
        "full": jnp.where(usable, answers, -jnp.inf),
    }
    for anchors_name, policy in (
        ("paper", ej.paper_policy(pool_size=pool)),
        ("top_similarity", ej.top_similarity_policy(pool_size=pool)),
    ):
        solver = ej.online_solver(config, policy)
        _, info = jax.jit(jax.vmap(lambda k, s, solver=solver: run(solver, k, s)))(
            keys, batch
        )
        anchors = np.asarray(info.anchors)
        completed = jnp.where(usable, info.completed, 0.0)
        ones = jnp.ones_like(s_tilde)
        covariate = jax.vmap(residual_fit, (0, 0, 0, 0, None))(
            completed, answers, info.anchors, jnp.stack([ones, s_tilde], -1), config.l2
        )
        tau = np.zeros(anchors.shape, np.float32)
        for i, stream in enumerate(streams):
            vectors = embedder.embed(list(stream.meta.query_texts))
            t = len(stream.meta.query_texts)
            tau[i, :t] = transfer_scores(
                np.asarray(vectors, np.float64),
                np.asarray(batch.queries.candidates[i, :t]),
                np.asarray(answers[i, :t], np.float64),
                anchors[i, :t],
                num_memories,
            )
        transfer = jax.vmap(residual_fit, (0, 0, 0, 0, None))(
            completed,
            answers,
            info.anchors,
            jnp.stack([ones, s_tilde, jnp.asarray(tau)], -1),
            config.l2,
        )
        prefix = "mixed" if anchors_name == "paper" else "top_similarity"
        if anchors_name == "top_similarity":
            rankings["top_similarity"] = anchors_first(
                answers, info.anchors, similarity
            )
        for name, values in (
            ("completion", completed),
            ("covariate", covariate),
            ("transfer", transfer),
        ):
            mixed = jnp.where(info.anchors, answers, values)
            key = prefix if (anchors_name, name) == ("paper", "completion") else None
            key = key or f"{prefix}+{name}"
            rankings[key] = jnp.where(usable, mixed, -jnp.inf)

    relevant = jnp.asarray(batch.relevant)
    metrics = {}
    for name, scores in rankings.items():
        m = ranking_metrics(
            scores, relevant, k=10, where=usable, num_relevant=batch.num_relevant
        )
        metrics[name] = {
            "recall@10": np.asarray(m.recall)[real],
            "ndcg@10": np.asarray(m.ndcg)[real],
            "mrr": np.asarray(m.mrr)[real],
        }
        labelled = np.asarray(m.has_relevant)[real]
    results = {
        name: {k: float(v[labelled].mean()) for k, v in values.items()}
        for name, values in metrics.items()
    }
    contrasts = {}
    pairs = [
        ("mixed+covariate", "mixed"),
        ("mixed+transfer", "mixed"),
        ("top_similarity+completion", "top_similarity"),
        ("top_similarity+covariate", "top_similarity"),
        ("top_similarity+transfer", "top_similarity"),
        ("top_similarity+covariate", "top_similarity+completion"),
        ("top_similarity+transfer", "top_similarity+completion"),
    ]
    for a, b in pairs:
        for metric in ("recall@10", "ndcg@10", "mrr"):
            ci = stats.contrast_ci(
                metrics[a][metric],
                metrics[b][metric],
                where=labelled,
                num_resamples=args.resamples,
            )
            contrasts.setdefault(f"{a} - {b}", {})[metric] = [
                ci.estimate,
                ci.low,
                ci.high,
            ]
    for name, row in results.items():
        print(f"{name:28s} " + "  ".join(f"{k} {v:.4f}" for k, v in row.items()))
    for name, row in contrasts.items():
        print(
            f"{name:52s} "
            + "  ".join(
                f"{k} {v[0]:+.4f} [{v[1]:+.4f}, {v[2]:+.4f}]" for k, v in row.items()
            )
        )
    payload = {
        "benchmark": "similarity covariate and transfer term on top of completion "
        "(evidence stand-in scorer, not an LLM)",
        "meta": script_metadata(argv),
        "config": vars(args),
        "num_labelled_queries": int(labelled.sum()),
        "results": results,
        "contrasts": contrasts,
    }
    out = write_script_json(payload, args.out)
    print(f"wrote {out}")
    return payload


if __name__ == "__main__":
    main()
