"""A worker process for the kill -9 tests: opens a retriever folder, checks
that it holds every acknowledged write and what became of the scorer batch the
previous worker was killed in, then runs random operations forever, logging an
intent before and an acknowledgement after each, until killed.

PAID gets one line per scorer batch, ``{"worker", "pairs"}``, before the
scorer answers, one ``{"worker", "values"}`` after it answered, and, from the
next worker on reopen, one ``{"worker", "reopened": BATCH, "committed": bool}``
for the previous worker's last batch (``BATCH`` counts the batch lines from 0):
all of its pairs stored with the values the scorer gave, or none of them.

Usage: python kill_worker.py FOLDER LOG PAID WORKER_NUMBER [--check-only]
(``--check-only``: exit after the checks on reopen)
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fakes import (  # noqa: E402
    FREE_ORDER,
    KeywordScorer,
    NamedHashEmbedder,
    memories,
    queries,
)

from earm_jax.retriever import OnlineRetriever, RetrieverConfig  # noqa: E402

CONFIG = RetrieverConfig(
    pool_size=8,
    top_k=3,
    rank=2,
    block_size=2,
    initial_memories=64,
    initial_queries=64,
    snapshot_every=3,
    precompile=False,
    # The test runs both presets: "best" adds the adaptive call ledger and
    # multi-round queries to what a kill may interrupt.
    preset=os.environ.get("EARM_KILL_PRESET", "paper"),
    call_budget=0.5,  # best only: ~4 calls a query, so kills land mid-round
    # A pool re-sorted before its query is recorded: what a kill may cut.
    free_order=FREE_ORDER if os.environ.get("EARM_KILL_FREE_ORDER") == "1" else None,
)


class LoggingScorer(KeywordScorer):
    """Appends every pair it is paid for to PAID (fsync-ed) before answering."""

    def __init__(self, path: str, worker: int) -> None:
        super().__init__()
        self.handle = open(path, "a", encoding="utf-8")
        self.worker = worker

    def score_many(self, requests):
        pairs = [[q, m] for q, ms in requests for m in ms]
        write(self.handle, {"worker": self.worker, "pairs": pairs})
        answers = super().score_many(requests)
        values = [a.value if a.ok else None for row in answers for a in row]
        write(self.handle, {"worker": self.worker, "values": values})
        return answers


def possibly_forgotten(records) -> set[str]:
    """Every text of every memory a delete was asked for in the operation log
    ``records`` (applied or cut off by a kill): a delete forgets those texts'
    paid scores, so their pairs may be missing from any batch."""
    texts_of: dict[str, list[str]] = {}
    deleted: set[str] = set()
    for record in records:
        if record["kind"] != "intent":
            continue
        if record["op"] == "add":
            for mid, text in zip(record["ids"], record["texts"], strict=True):
                texts_of.setdefault(mid, []).append(text)
        elif record["op"] == "update":
            texts_of.setdefault(record["id"], []).append(record["text"])
        elif record["op"] == "delete":
            deleted.update(record["ids"])
    return {text for mid in deleted for text in texts_of.get(mid, [])}


def check_last_batch(
    retriever, paid_path: str, worker: int, forgotten: set[str]
) -> dict | None:
    """What became of the previous worker's last scorer batch, read from the
    reopened folder: committed (every pair stored, with the value the scorer
    gave) or lost with the kill (none stored); anything else exits.

    Pairs whose memory text is in ``forgotten`` are left out: a delete after
    the batch (acknowledged or cut off) removed their scores by design."""
    if not os.path.exists(paid_path):
        return None
    records = [json.loads(t) for t in Path(paid_path).read_text().splitlines() if t]
    batches = [i for i, r in enumerate(records) if "pairs" in r]
    if not batches or records[batches[-1]]["worker"] == worker:
        return None
    position = batches[-1]
    batch = records[position]
    answered = [r for r in records[position + 1 :] if "values" in r]
    values = answered[0]["values"] if answered else [None] * len(batch["pairs"])
    kept = [
        (pair, gave)
        for pair, gave in zip(batch["pairs"], values, strict=True)
        if pair[1] not in forgotten
    ]
    stored = [retriever.payer.cached(query, [memory])[0] for (query, memory), _ in kept]
    committed = [value is not None for value in stored]
    if kept and all(committed):
        if not answered:
            raise SystemExit(f"batch {len(batches) - 1} stored but never answered")
        for (pair, gave), got in zip(kept, stored, strict=True):
            if gave is None or abs(got - gave) > 1e-6:
                raise SystemExit(f"{pair}: stored {got}, the scorer answered {gave}")
    elif any(committed):
        raise SystemExit(
            f"batch {len(batches) - 1} partly stored: "
            f"{sum(committed)} of {len(committed)} pairs"
        )
    return {
        "worker": worker,
        "reopened": len(batches) - 1,
        # With every pair forgotten nothing tells: counted as lost, which
        # only allows its (forgotten) pairs to be paid again.
        "committed": bool(kept) and all(committed),
    }


def write(handle, record) -> None:
    handle.write(json.dumps(record) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def expected_state(lines):
    """Live memories, query answers and the pending (unacknowledged) intent."""
    live: dict = {}
    answers: dict = {}
    pending = None

    def apply(op):
        if op["op"] == "add":
            live.update(zip(op["ids"], op["texts"], strict=True))
        elif op["op"] == "update":
            live[op["id"]] = op["text"]
        elif op["op"] == "delete":
            for mid in op["ids"]:
                live.pop(mid)

    for line in lines:
        kind = line["kind"]
        if kind == "intent":
            pending = line
        elif kind == "ack":
            apply(pending)
            answers.update({int(i): a for i, a in line.get("answers", {}).items()})
            pending = None
        elif kind == "resolved":
            if line["applied"]:
                apply(pending)
                answers.update({int(i): a for i, a in line.get("answers", {}).items()})
            pending = None
    return live, answers, pending


def check(retriever, lines, log):
    live, answers, pending = expected_state(lines)
    actual = {m.id: m.text for m in retriever.memories()}
    num_queries = retriever.num_queries
    applied = None
    if pending is not None:
        before = dict(live)
        after = dict(live)
        op = pending
        if op["op"] == "add":
            after.update(zip(op["ids"], op["texts"], strict=True))
        elif op["op"] == "update":
            after[op["id"]] = op["text"]
        elif op["op"] == "delete":
            for mid in op["ids"]:
                after.pop(mid)
        queries_before = len(answers)
        grew = num_queries > queries_before
        if actual == before and not grew:
            applied = False
        elif actual == after and (op["op"] != "query" or grew):
            applied = True
        elif op["op"] in ("query", "query_many") and actual == before:
            applied = True
        else:
            raise SystemExit(f"state after kill matches neither side of {op}")
        record = {"kind": "resolved", "applied": bool(applied)}
        if applied and op["op"] in ("query", "query_many"):
            record["answers"] = {
                str(i): retriever.answer(i) for i in range(queries_before, num_queries)
            }
        write(log, record)
        lines.append(record)
        live, answers, _ = expected_state(lines)
    if actual != live:
        missing = {k: v for k, v in live.items() if actual.get(k) != v}
        extra = {k: v for k, v in actual.items() if live.get(k) != v}
        raise SystemExit(f"memories differ: missing {missing}, extra {extra}")
    if num_queries != len(answers):
        raise SystemExit(f"{num_queries} queries stored, {len(answers)} acknowledged")
    for index, answer in answers.items():
        if retriever.answer(index) != answer:
            raise SystemExit(f"query {index} answered {answer}, journal says otherwise")


def main() -> None:
    folder, log_path, paid_path, worker = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
    )
    check_only = sys.argv[5:] == ["--check-only"]
    lines = []
    if os.path.exists(log_path):
        for text in Path(log_path).read_text().splitlines():
            if text.strip():
                lines.append(json.loads(text))
    log = open(log_path, "a", encoding="utf-8")
    scorer = LoggingScorer(paid_path, worker)
    retriever = OnlineRetriever(folder, scorer, NamedHashEmbedder(), CONFIG)
    verdict = check_last_batch(  # before any scoring
        retriever, paid_path, worker, possibly_forgotten(lines)
    )
    check(retriever, lines, log)
    if verdict is not None:
        write(scorer.handle, verdict)
    if check_only:
        retriever.close()
        print("READY", flush=True)
        return
    retriever.warm_up()
    print("READY", flush=True)
    rng = random.Random(worker)
    texts = memories(10_000, seed=worker)
    asks = queries(10_000, seed=worker + 7)
    number = 0
    while True:
        number += 1
        live = [m.id for m in retriever.memories()]
        roll = rng.random()
        if not live or roll < 0.3:
            count = rng.randint(1, 3)
            ids = [f"w{worker}-{number}-{i}" for i in range(count)]
            chosen = [texts[rng.randrange(len(texts))] for _ in ids]
            write(log, {"kind": "intent", "op": "add", "ids": ids, "texts": chosen})
            retriever.add(chosen, ids=ids)
            write(log, {"kind": "ack"})
        elif roll < 0.4:
            mid = rng.choice(live)
            text = texts[rng.randrange(len(texts))] + f" (edited {number})"
            write(log, {"kind": "intent", "op": "update", "id": mid, "text": text})
            retriever.update(mid, text)
            write(log, {"kind": "ack"})
        elif roll < 0.47 and len(live) > 4:
            ids = rng.sample(live, 1)
            write(log, {"kind": "intent", "op": "delete", "ids": ids})
            retriever.delete(ids)
            write(log, {"kind": "ack"})
        elif roll < 0.5:
            write(log, {"kind": "intent", "op": "snapshot"})
            retriever.snapshot()
            write(log, {"kind": "ack"})
        elif roll < 0.6:
            pair = [
                f"{worker}.{number}.{i}: {asks[rng.randrange(len(asks))]}"
                for i in range(2)
            ]
            write(log, {"kind": "intent", "op": "query_many", "texts": pair})
            got = retriever.query_many(pair)
            write(
                log,
                {
                    "kind": "ack",
                    "answers": {
                        str(r.query_index): retriever.answer(r.query_index) for r in got
                    },
                },
            )
        else:
            ask = f"{worker}.{number}: {asks[rng.randrange(len(asks))]}"
            write(log, {"kind": "intent", "op": "query", "text": ask})
            got = retriever.query(ask)
            write(
                log,
                {
                    "kind": "ack",
                    "answers": {
                        str(got.query_index): retriever.answer(got.query_index)
                    },
                },
            )


if __name__ == "__main__":
    main()
