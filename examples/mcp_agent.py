"""A scripted agent over MCP: it starts ``earm mcp`` as its memory server
(stdio, the official MCP SDK's client), remembers a LoCoMo conversation turn by
turn, asks its questions through ``recall``, and prints, per question, whether
a gold evidence turn came back, then the scorer calls paid against the calls a
reranker scoring every candidate would have paid (``stats``).

Offline: the scorer is an in-process cross-encoder folder (``earm
train-scorer`` writes one; any one-label cross-encoder folder works), the
embedder the bundled MiniLM. No LLM writes answers: the agent's "answer" is
the memories recall returned.

    python examples/mcp_agent.py --data ../shared/data/locomo \\
        --scorer-model scorer/fold-0 --questions 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1]))

from mcp import Client, StdioServerParameters  # noqa: E402

from earm_jax.locomo import build_memories, load_locomo  # noqa: E402


def server_for(folder: Path, scorer_model: Path) -> StdioServerParameters:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parents[1]), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.setdefault("HF_HUB_OFFLINE", "1")
    args = ["-m", "earm_jax.cli.main", "mcp", str(folder)]
    args += ["--scorer-model", str(scorer_model)]
    return StdioServerParameters(command=sys.executable, args=args, env=env)


async def agent(args, folder: Path) -> dict:
    (conversation,) = [
        c for c in load_locomo(args.data) if c.sample_id == args.conversation
    ]
    memory_set = build_memories(conversation, "turns")
    turns = memory_set.memories[: args.turns] if args.turns else memory_set.memories
    kept = {m.row for m in turns}
    asked = [
        (q, rows)
        for q, rows in zip(memory_set.queries, memory_set.relevant_rows, strict=True)
        if rows and set(rows) <= kept
    ][: args.questions]
    hits = 0
    async with Client(
        server_for(folder, args.scorer_model), read_timeout_seconds=600
    ) as client:
        for memory in turns:
            reply = await client.call_tool(
                "remember",
                {
                    "text": memory.text,
                    "id": memory.row,
                    "metadata": {"session": memory.session},
                },
            )
            assert not reply.is_error, reply.content
        for question, rows in asked:
            reply = await client.call_tool(
                "recall", {"query": question.question, "k": args.k}
            )
            assert not reply.is_error, reply.content
            found = reply.structured_content["memories"]
            hit = bool({m["id"] for m in found} & set(rows))
            hits += hit
            print(
                f"{'hit ' if hit else 'miss'} {question.question[:60]!r} -> "
                f"{found[0]['text'][:60]!r} ({reply.structured_content['calls']} calls)"
            )
        stats = (await client.call_tool("stats", {})).structured_content
    stats["questions"], stats["hits"] = len(asked), hits
    return stats


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--scorer-model", type=Path, required=True)
    parser.add_argument("--conversation", default="26")
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=0, help="0: all turns")
    parser.add_argument("-k", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mcp-agent-") as scratch:
        folder = args.folder or Path(scratch) / "memory"
        stats = asyncio.run(agent(args, folder))
    saved = 1 - stats["calls_paid"] / max(stats["full_pool_calls"], 1)
    print(
        f"{stats['hits']}/{stats['questions']} questions found gold evidence in the "
        f"top {args.k}; {stats['memories']} memories, {stats['queries']} queries"
    )
    print(
        f"calls paid {stats['calls_paid']} vs {stats['full_pool_calls']} for the "
        f"full pool ({saved:.0%} saved)"
    )
    return stats


if __name__ == "__main__":
    main()
