"""EARM inside your own JAX loop: select, pay the scorer for the anchors only, observe.

Runs offline in seconds (CPU, no server, no download):

    python examples/embedding_loop.py

An agent has ``M`` memories with embeddings. For every query it takes the top-N
memories by cosine similarity, lets the solver choose which of them to score
(the anchors), pays a host-side scorer for those pairs only, and hands the
scores back; the solver completes the rest of the pool from everything it has
scored before and returns a mixed ranking. The scorer here is a stand-in for an
LLM (a hidden relevance plus noise): swap ``score_pairs`` for
``earm_jax.scoring.vllm.VllmScorer.score`` to use a real one.

The paper's schedule scores the whole pool for the first 10 queries (nothing
has been learned yet), then 40%, 25%, 20% and from query 40 on 17.5% of it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej

M, N, D, T, K = 600, 50, 32, 80, 10  # memories, pool, embedding width, queries, top-K
TOPICS = 60


def make_agent(seed: int = 0):
    """Memories about ``TOPICS`` topics; each query asks about one topic."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(TOPICS, D))
    topic = rng.integers(0, TOPICS, size=M)
    memories = centres[topic] + 1.3 * rng.normal(size=(M, D))
    memories /= np.linalg.norm(memories, axis=1, keepdims=True)
    asked = rng.integers(0, TOPICS, size=T)
    queries = centres[asked] + 1.3 * rng.normal(size=(T, D))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    relevant = topic[None, :] == asked[:, None]  # bool[T, M], hidden from the solver
    return memories.astype(np.float32), queries.astype(np.float32), relevant


class StandInScorer:
    """A host-side scorer that counts what it is paid for (one pair = one call)."""

    def __init__(self, relevant: np.ndarray, noise: float = 0.1, seed: int = 1):
        self.relevant, self.noise = relevant, noise
        self.rng = np.random.default_rng(seed)
        self.calls = 0

    def score_pairs(self, query_index: int, memory_ids: np.ndarray) -> np.ndarray:
        self.calls += len(memory_ids)
        truth = self.relevant[query_index, memory_ids].astype(np.float32)
        noisy = truth + self.noise * self.rng.normal(size=len(memory_ids))
        return np.clip(noisy, 0.0, 1.0).astype(np.float32)


def main(seed: int = 0) -> dict[str, float]:
    memories, queries, relevant = make_agent(seed)
    scorer = StandInScorer(relevant)
    # capacity: how many queries' anchors the history keeps (a fixed buffer of
    # capacity x max_budget sparse entries, never a dense T x M matrix). Size it
    # for the queries you expect; once full, StepInfo.dropped counts what could
    # not be stored, and earm_jax.core.grow.grow_state doubles it.
    solver = ej.compose_solver(
        model=ej.LowRankModel(num_memories=M, rank=4),
        history=ej.RowHistory(capacity=128, pool_size=N),  # max_budget: the pool
        algorithm=ej.incremental(),
        policy=ej.paper_policy(pool_size=N),
    )

    @jax.jit
    def retrieve(query_vector):
        similarity, candidates = jax.lax.top_k(jnp.asarray(memories) @ query_vector, N)
        return ej.Query(candidates.astype(jnp.int32), similarity, jnp.ones(N, bool))

    select = jax.jit(solver.select)  # before any score exists
    observe = jax.jit(solver.observe)  # after the scorer answered

    state = solver.init(jax.random.key(seed))
    key = jax.random.key(seed + 1)
    hits = {"semantic": [], "earm": []}
    calls_per_query = []
    for t in range(T):
        key, step_key = jax.random.split(key)
        query = retrieve(jnp.asarray(queries[t]))
        anchors = np.asarray(select(step_key, state, query))  # bool[N]
        pool = np.asarray(query.candidates)
        # Pay the scorer for the anchors only.
        before = scorer.calls
        paid = scorer.score_pairs(t, pool[anchors])
        calls_per_query.append(scorer.calls - before)
        values = np.zeros(N, np.float32)
        values[anchors] = paid
        state, info = observe(
            state, query, ej.Observation(jnp.asarray(values), anchors)
        )
        assert int(info.dropped) == 0
        # info.scores: the direct score where anchored, the completion elsewhere.
        top = pool[np.argsort(-np.asarray(info.scores))[:K]]
        total = max(relevant[t, pool].sum(), 1)
        hits["earm"].append(relevant[t, top].sum() / total)
        hits["semantic"].append(relevant[t, pool[:K]].sum() / total)

    print(f"{T} queries, pool {N} of {M} memories, top {K}")
    print("block  calls/query  recall@10 semantic  recall@10 EARM")
    for block in range(0, T, 10):
        window = slice(block, block + 10)
        print(
            f"{block:>3}-{block + 9:<3} {np.mean(calls_per_query[window]):>9.1f}"
            f"  {np.mean(hits['semantic'][window]):>18.3f}"
            f"  {np.mean(hits['earm'][window]):>14.3f}"
        )
    summary = {
        "calls": float(scorer.calls),
        "calls_full": float(T * N),
        "recall_semantic": float(np.mean(hits["semantic"])),
        "recall_earm": float(np.mean(hits["earm"])),
    }
    print(
        f"paid {scorer.calls} scorer calls instead of {T * N} for scoring every "
        f"pool ({1 - scorer.calls / (T * N):.0%} saved); recall@10 "
        f"{summary['recall_semantic']:.3f} (similarity) -> "
        f"{summary['recall_earm']:.3f} (EARM)"
    )
    return summary


if __name__ == "__main__":
    main()
