"""What a query costs end to end, by policy: one LoCoMo conversation replayed
through ``OnlineRetriever`` with a trained cross-encoder in process.

For each policy, a fresh retriever folder gets every turn of the conversation
(embedded with the bundled MiniLM, into a fresh cache, so each question is
embedded when asked), then the first ``--limit`` questions are
asked in order, as an agent would. Per question it records the wall time of
``query`` and how it splits: the question's embedding, the scorer's calls
(the cross-encoder, in process, on this machine's CPU), and the rest (the
pool, the solver, the journal's durable writes), plus the calls paid and
Recall@10 against the LoCoMo evidence. The scorer is a fold of a three-fold
build that never saw the conversation (``--scorer-model DIR/fold-K``; the
build's ``fold-K.json`` names what it trained on, and a fold that saw the
conversation is refused).

Policies: Semantic (no scorer: the retriever's similarity mode),
Top-similarity and ``best`` at ``--call-budget``, the paper's Mixed (its stage
schedule: every candidate for the first 10 questions), Full (Top-similarity
at every candidate).

Scorers (``--scorers``): ``in-process`` (the fold's cross-encoder in this
process, ``--scorer-backend``, default the library's) and ``vllm`` (the same
fold served by ``earm serve-scorer``, vLLM's pooling runner, started by the
benchmark, through :class:`~earm_jax.scoring.vllm.VllmScorer` in ``rerank``
mode), both with the fold's similarity blend. With both, each policy runs
with one and then the other (the order alternating per policy), so the load
of other jobs falls on both alike; the load average before and after is
recorded.

    python benchmarks/bench_query_cost.py --scorer-model BUILD/fold-0 \\
        --conversation 26 --limit 40 --scorers in-process,vllm \\
        --out benchmarks/results/query_cost_cpu.json

Writes a JSON report with the machine, versions, commit and command
(``results[scorer][policy]``, and ``scorers[scorer]`` saying what ran); not a
test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import metadata, print_table, write_json  # noqa: E402
from earm_jax.jobs.machine_load import OtherLoad, load_record  # noqa: E402

POLICIES = ("semantic", "top_similarity", "best", "paper", "full")
SCORERS = ("in-process", "vllm")


class TimedEmbedder:
    """The embedder, with the seconds spent embedding questions."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.identity = getattr(inner, "identity", None)

    def embed(self, texts):
        return self.inner.embed(texts)

    def embed_transient(self, texts):
        started = time.perf_counter()
        try:
            return self.inner.embed_transient(texts)
        finally:
            self.seconds += time.perf_counter() - started

    def __getattr__(self, name):
        return getattr(self.inner, name)


class TimedScorer:
    """The scorer, with the seconds spent and the pairs sent."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.identity = inner.identity
        self.seconds = 0.0
        self.pairs = 0

    def score(self, query, memories):
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        started = time.perf_counter()
        try:
            return self.inner.score_many(requests)
        finally:
            self.seconds += time.perf_counter() - started
            self.pairs += sum(len(memories) for _, memories in requests)


def _config(policy: str, call_budget: float):
    from earm_jax.retriever import RetrieverConfig

    if policy == "semantic":
        return RetrieverConfig()
    if policy == "full":
        return RetrieverConfig(preset="top_similarity", call_budget=1.0)
    return RetrieverConfig(preset=policy, call_budget=call_budget)


def _summary(values_ms: np.ndarray) -> dict:
    return {
        "p50": float(np.percentile(values_ms, 50)),
        "p95": float(np.percentile(values_ms, 95)),
        "mean": float(values_ms.mean()),
    }


def run_policy(policy, memory_set, limit, scorer, embedder, call_budget, folder):
    from earm_jax.retriever import OnlineRetriever

    timed_scorer = None if policy == "semantic" else TimedScorer(scorer)
    timed_embedder = TimedEmbedder(embedder)
    retriever = OnlineRetriever(
        folder, timed_scorer, timed_embedder, _config(policy, call_budget)
    )
    ids = retriever.add([memory.text for memory in memory_set.memories])
    row_of = {memory_id: row for row, memory_id in enumerate(ids)}
    retriever.warm_up()
    wall, embed, score, calls, recall = [], [], [], [], []
    questions = memory_set.queries[:limit]
    for index, question in enumerate(questions):
        embed_before = timed_embedder.seconds
        score_before = timed_scorer.seconds if timed_scorer else 0.0
        started = time.perf_counter()
        answer = retriever.query(question.question, k=10)
        wall.append(time.perf_counter() - started)
        embed.append(timed_embedder.seconds - embed_before)
        score.append((timed_scorer.seconds if timed_scorer else 0.0) - score_before)
        calls.append(answer.calls)
        relevant = set(memory_set.relevant_rows[index])
        if relevant:
            found = {row_of[m] for m in answer.ranked_ids[:10]} & relevant
            recall.append(len(found) / len(relevant))
    retriever.close()
    wall_ms = np.asarray(wall) * 1e3
    embed_ms = np.asarray(embed) * 1e3
    score_ms = np.asarray(score) * 1e3
    rest_ms = wall_ms - embed_ms - score_ms
    total = wall_ms.sum()
    return {
        "questions": len(questions),
        "labelled_questions": len(recall),
        "recall@10": float(np.mean(recall)) if recall else None,
        "calls_per_query": float(np.mean(calls)),
        "wall_ms": _summary(wall_ms),
        "embedding_ms": _summary(embed_ms),
        "scorer_ms": _summary(score_ms),
        "retriever_ms": _summary(rest_ms),
        "share_of_time": {
            "embedding": float(embed_ms.sum() / total),
            "scorer": float(score_ms.sum() / total),
            "retriever (pool, solver, journal)": float(rest_ms.sum() / total),
        },
        "scorer_pairs_per_second": (
            float(timed_scorer.pairs / timed_scorer.seconds)
            if timed_scorer and timed_scorer.seconds > 0
            else None
        ),
    }


def _check_held_out(scorer_model: Path, conversation: str) -> None:
    manifest = scorer_model.parent / f"{scorer_model.name}.json"
    if not manifest.is_file():
        raise SystemExit(f"{manifest} is missing: cannot tell what the fold saw")
    trained_on = {
        entry["id"] for entry in json.loads(manifest.read_text())["trained_on"]
    }
    if conversation in trained_on:
        raise SystemExit(
            f"{scorer_model.name} trained on conversation {conversation}: pick a "
            "fold that never saw it"
        )


def _scorers(args, stack: contextlib.ExitStack, blend_embedder) -> dict:
    """Each scorer of ``--scorers`` and what it is (for the JSON)."""
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.scoring.scorer_manifest import model_scorer
    from earm_jax.scoring.similarity_blend import BlendedScorer, load_blend

    scorers, described = {}, {}
    if "in-process" in args.scorers:
        settings = CrossEncoderSettings(backend=args.scorer_backend)
        scorers["in-process"] = model_scorer(
            args.scorer_model, settings, embedder=blend_embedder
        )
        described["in-process"] = {
            "scorer": f"trained MiniLM cross-encoder in process ({settings.backend})",
            "backend": settings.backend,
        }
    if "vllm" in args.scorers:
        from benchmarks._serve import served_scorer, vllm_version
        from earm_jax.scoring.vllm import VllmScorer, VllmScorerConfig

        name = args.scorer_model.name
        server = stack.enter_context(served_scorer(args.scorer_model, name))
        print(f"vllm: server up in {server['startup_s']:.0f} s", flush=True)
        inner = stack.enter_context(
            VllmScorer(
                VllmScorerConfig(
                    base_url=server["base_url"],
                    model=name,
                    mode="rerank",
                    timeout_s=300.0,
                )
            )
        )
        blend = load_blend(args.scorer_model)
        scorers["vllm"] = (
            inner if blend is None else BlendedScorer(inner, blend, blend_embedder)
        )
        described["vllm"] = {
            "scorer": "trained MiniLM cross-encoder served by earm serve-scorer "
            "(vLLM pooling runner, float32), rerank mode",
            "backend": "vllm-server",
            "server_command": server["command"],
            "server_startup_s": server["startup_s"],
            "vllm": vllm_version(),
        }
    for scorer in scorers.values():  # load the model before any query is timed
        scorer.score("warm-up", ["warm-up"])
    return {name: (scorers[name], described[name]) for name in args.scorers}


def main(argv: list[str] | None = None) -> None:
    from earm_jax.scoring.cross_encoder import BACKENDS, DEFAULT_BACKEND

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scorer-model", type=Path, required=True)
    parser.add_argument("--data", default="../shared/data/locomo")
    parser.add_argument("--conversation", default="26")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--call-budget", type=float, default=0.25)
    parser.add_argument("--policies", nargs="+", default=list(POLICIES))
    parser.add_argument(
        "--scorers",
        default="in-process",
        help="comma list of in-process, vllm (earm serve-scorer)",
    )
    parser.add_argument("--scorer-backend", default=DEFAULT_BACKEND, choices=BACKENDS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.policies) - set(POLICIES))
    if unknown:
        raise SystemExit(f"--policies: unknown {unknown}; choose from {POLICIES}")
    args.scorers = [name for name in args.scorers.split(",") if name]
    if not args.scorers or set(args.scorers) - set(SCORERS):
        raise SystemExit(f"--scorers: a comma list of {', '.join(SCORERS)}")
    _check_held_out(args.scorer_model, args.conversation)

    from earm_jax.locomo import load_locomo
    from earm_jax.locomo.memories import build_memories
    from earm_jax.store.embeddings import Embedder

    meta = metadata(argv)
    conversations = {c.sample_id: c for c in load_locomo(args.data)}
    memory_set = build_memories(conversations[args.conversation], "turns")
    # A fresh embedding cache: every question is embedded when asked (a
    # warm cache from earlier runs would hide that cost); the memories are
    # embedded once, for the first policy.
    cache = tempfile.TemporaryDirectory()
    embedder = Embedder(cache_dir=Path(cache.name) / "retriever")
    # The scorer's similarity blend embeds with a cache of its own, so what it
    # stores never answers the retriever's question embedding.
    blend_embedder = Embedder(cache_dir=Path(cache.name) / "blend")
    results: dict = {name: {} for name in args.scorers}
    with contextlib.ExitStack() as stack:
        scorers = _scorers(args, stack, blend_embedder)
        load_before, nice_before = os.getloadavg(), os.nice(0)
        other = OtherLoad()
        for index, policy in enumerate(args.policies):
            order = args.scorers if index % 2 == 0 else args.scorers[::-1]
            for name in order:
                with tempfile.TemporaryDirectory() as folder:
                    results[name][policy] = run_policy(
                        policy,
                        memory_set,
                        args.limit,
                        scorers[name][0],
                        embedder,
                        args.call_budget,
                        Path(folder) / "memories",
                    )
                row = results[name][policy]
                print(
                    f"{name:10s} {policy:15s} p50 {row['wall_ms']['p50']:8.1f} ms  "
                    f"p95 {row['wall_ms']['p95']:8.1f} ms  calls "
                    f"{row['calls_per_query']:6.1f}  R@10 {row['recall@10']:.3f}",
                    flush=True,
                )
        load_after, nice_after = os.getloadavg(), os.nice(0)
        others = other.share()
    payload = {
        "benchmark": "query_cost",
        "meta": meta,
        "config": {
            "conversation": args.conversation,
            "memories": len(memory_set.memories),
            "limit": args.limit,
            "call_budget": args.call_budget,
            "scorer_model": args.scorer_model.name,
            "scorers": args.scorers,
            "embedding_model": "all-MiniLM-L6-v2 (bundled)",
        },
        "scorers": {name: described for name, (_, described) in scorers.items()},
        **load_record(others, load_before, load_after),
        # Another job's tooling may renice a benchmark under its own work.
        "niceness_before_after": [nice_before, nice_after],
        "results": results,
    }
    print_table(
        [
            {
                "scorer": name,
                "policy": policy,
                "p50 ms": round(row["wall_ms"]["p50"]),
                "p95 ms": round(row["wall_ms"]["p95"]),
                "calls": round(row["calls_per_query"], 1),
                "R@10": round(row["recall@10"], 3),
                "scorer share": round(row["share_of_time"]["scorer"], 2),
            }
            for name, rows in results.items()
            for policy, row in rows.items()
        ],
        ["scorer", "policy", "p50 ms", "p95 ms", "calls", "R@10", "scorer share"],
    )
    write_json(payload, args.out)
    cache.cleanup()


if __name__ == "__main__":
    main()
