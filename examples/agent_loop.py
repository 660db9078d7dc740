"""An agent answers LoCoMo questions through the EARM retriever, is killed
halfway (``kill -9``), restarts, and ends exactly where an uninterrupted agent
ends: the same ranking for every question and the same number of scorer calls.

Scores come from the evidence stand-in scorer (y = clip(1[relevant] + noise),
built from LoCoMo's gold evidence), not an LLM: no server, runs offline.

    python examples/agent_loop.py --data ../shared/data/locomo --questions 100

What it does:

1. ``straight/``: one process adds the conversation's turns and asks the
   questions one by one.
2. ``interrupted/``: a child process does the same, printing ``ACK i`` after
   each answer; the parent kills it with SIGKILL right after question
   ``questions // 2`` and starts a new child on the same folder, which asks
   from ``num_queries`` on.
3. Compares, question by question, the ranking each folder's journal holds, and
   the pairs the scorer was asked for (counted on the scorer's side, over both
   children). Exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))

from earm_jax.locomo import (  # noqa: E402
    STAND_IN_NOTE,
    EvidenceScorer,
    build_memories,
    load_locomo,
    relevance_oracle,
)
from earm_jax.retriever import OnlineRetriever, RetrieverConfig  # noqa: E402

CONFIG = RetrieverConfig(precompile=False)


class CountingScorer:
    """The evidence scorer, appending how many pairs it was asked for to a file."""

    def __init__(self, inner: EvidenceScorer, log: Path) -> None:
        self.inner, self.log = inner, log

    @property
    def identity(self):
        return self.inner.identity

    def score(self, query, memories):
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        with open(self.log, "a") as handle:
            handle.write(f"{sum(len(m) for _, m in requests)}\n")
        return self.inner.score_many(requests)


def _embedder(kind: str, folder: Path):
    if kind == "hash":
        sys.path.insert(0, str(HERE.parents[1] / "tests" / "retriever"))
        from fakes import HashEmbedder

        return HashEmbedder(width=128)
    from earm_jax.store.embeddings import Embedder

    return Embedder(cache_dir=folder / "embedding-cache")


def _setting(args):
    conversation = load_locomo(args.data)[args.conversation]
    memory_set = build_memories(conversation, "turns")
    questions = [q.question for q in memory_set.queries][: args.questions]
    if len(questions) < args.questions:
        raise SystemExit(f"conversation has only {len(questions)} questions")
    return memory_set, questions


def agent(args) -> None:
    """One agent process: open (or recover) the folder, answer what is left."""
    folder = Path(args.folder)
    memory_set, questions = _setting(args)
    scorer = CountingScorer(
        EvidenceScorer(relevance_oracle(memory_set)),
        folder.parent / f"{folder.name}.calls",
    )
    retriever = OnlineRetriever(
        folder, scorer, _embedder(args.embedder, folder.parent), CONFIG
    )
    if retriever.num_memories == 0:
        retriever.add(
            [m.text for m in memory_set.memories],
            metadata=[
                {"session": m.session, "date": m.date_time} for m in memory_set.memories
            ],
            ids=[m.dia_ids[0] for m in memory_set.memories],
        )
    print(f"START {retriever.num_queries}", flush=True)
    for index in range(retriever.num_queries, len(questions)):
        retriever.query(questions[index])
        print(f"ACK {index}", flush=True)
        time.sleep(args.think)  # the agent thinks (answers) between questions
    retriever.close()
    print("DONE", flush=True)


def _child(args, folder: Path) -> subprocess.Popen:
    command = [
        sys.executable,
        str(HERE),
        "--agent",
        "--folder",
        str(folder),
        "--data",
        str(args.data),
        "--questions",
        str(args.questions),
        "--conversation",
        str(args.conversation),
        "--embedder",
        args.embedder,
        "--think",
        str(args.think),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def _calls(folder: Path) -> int:
    log = folder.parent / f"{folder.name}.calls"
    return sum(int(line) for line in log.read_text().split()) if log.exists() else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(HERE.parents[2] / "shared/data/locomo"))
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--embedder", choices=["minilm", "hash"], default="minilm")
    parser.add_argument("--think", type=float, default=0.2)
    parser.add_argument("--agent", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.agent:
        agent(args)
        return 0
    import tempfile

    work = Path(args.workdir or tempfile.mkdtemp(prefix="agent-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    straight, interrupted = work / "straight", work / "interrupted"
    started = time.monotonic()
    # 1. Uninterrupted (in a child too, so both runs are alike).
    child = _child(argparse.Namespace(**{**vars(args), "think": 0.0}), straight)
    child.communicate()
    if child.returncode:
        raise SystemExit("the uninterrupted agent failed")
    # 2. Killed right after question questions // 2, then restarted.
    halfway = args.questions // 2
    child = _child(args, interrupted)
    for line in child.stdout:
        if line.strip() == f"ACK {halfway - 1}":
            child.send_signal(signal.SIGKILL)
            break
    child.wait()
    child.stdout.close()
    killed = child.returncode == -signal.SIGKILL
    restarted = _child(args, interrupted)
    resumed_at = None
    for line in restarted.stdout:
        if line.startswith("START"):
            resumed_at = int(line.split()[1])
    restarted.wait()
    restarted.stdout.close()
    # 3. Compare.
    memory_set, _ = _setting(args)
    scorer = EvidenceScorer(relevance_oracle(memory_set))
    embedder = _embedder(args.embedder, work)
    rankings = {}
    for folder in (straight, interrupted):
        with OnlineRetriever(folder, scorer, embedder, None) as retriever:
            rankings[folder.name] = [
                retriever.answer(i) for i in range(retriever.num_queries)
            ]
    same = rankings["straight"] == rankings["interrupted"]
    calls = {"straight": _calls(straight), "interrupted": _calls(interrupted)}
    report = {
        "questions": args.questions,
        "killed_with_sigkill": killed,
        "killed_after_question": halfway - 1,
        "restart_resumed_at_question": resumed_at,
        "same_rankings": same,
        "rankings_compared": len(rankings["straight"]),
        "scorer_calls": calls,
        "same_calls": calls["straight"] == calls["interrupted"],
        "seconds": round(time.monotonic() - started, 1),
        "scorer": STAND_IN_NOTE,
        "workdir": str(work),
    }
    print(json.dumps(report, indent=2))
    ok = (
        killed
        and same
        and report["same_calls"]
        and len(rankings["straight"]) == args.questions
    )
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
