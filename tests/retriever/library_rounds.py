"""The protocol policy's host loop on the inputs a retriever's query sees (its
pool, the memories' biases, the query's and memories' embeddings), for tests
that check the retriever pays what the library policy chooses."""

from __future__ import annotations

import numpy as np

from earm_jax.base import SideInputs
from earm_jax.core.online import usable_candidates
from earm_jax.core.rounds import pay_rounds
from earm_jax.retriever.compiled import round_context


def library_then_retriever(retriever, policy, carry, ask: str, scorer):
    """Runs ``policy`` from ``carry`` on ``ask``'s pool with ``scorer``'s
    answers, then the retriever's own query. Returns ``(new carry, the
    retriever's answer, the memory ids the policy paid for)``; checks the
    retriever paid as many pairs."""
    vector = retriever._embed_queries([ask], "query")[0]
    pool = retriever._query_pool(ask, vector, None)
    rows = np.asarray(pool.candidates)
    answers = np.asarray(
        [scorer.value(ask, retriever.rows.texts[r]) for r in rows], np.float32
    )
    paid: list[int] = []

    def pay(positions):
        paid.extend(int(p) for p in positions)
        return answers[positions], np.ones(len(positions), bool)

    context = round_context(
        usable_candidates(retriever.state, pool),
        retriever.num_queries,
        retriever.config.pool_size,
        retriever.state.memory_bias[pool.candidates],
        SideInputs(vector, retriever.rows.embeddings[rows]),
    )
    carry, _ = pay_rounds(policy, None, carry, pool, context, pay)
    got = retriever.query(ask)
    assert got.calls + got.cache_hits == len(paid)
    anchored = {m for m, a in zip(got.ranked_ids, got.anchored, strict=False) if a}
    assert anchored <= {retriever.rows.ids[rows[p]] for p in paid}
    return carry, got, paid
