"""Bytes per stream of the solver state: the row layout vs the entry log.

A stream of ``--queries`` queries under the paper schedule (M, N = K, r as
the paired benchmark), sizes from ``jax.eval_shape`` of ``solver.init`` (no
allocation): every leaf of the state pytree, the history's leaves apart.

    python benchmarks/state_memory.py --out benchmarks/results/solver_memory_log.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import earm_jax as ej  # noqa: E402
from benchmarks._common import metadata, write_json  # noqa: E402
from earm_jax.core import entry_log  # noqa: E402

HISTORY = ("obs_index", "obs_value", "obs_mask", "history_log")


def state_bytes(config: ej.SolverConfig, policy: ej.Policy) -> dict:
    shapes = jax.eval_shape(ej.online_solver(config, policy).init, jax.random.key(0))
    leaves, _ = jax.tree_util.tree_flatten_with_path(shapes)
    per_leaf = {
        jax.tree_util.keystr(path): leaf.size * leaf.dtype.itemsize
        for path, leaf in leaves
    }
    history = sum(
        size
        for name, size in per_leaf.items()
        if name.split(".")[1].split("[")[0] in HISTORY
    )
    total = sum(per_leaf.values())
    return {"total_bytes": total, "history_bytes": history, "leaves": per_leaf}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    policy = ej.paper_policy(pool_size=args.pool)
    rows = ej.SolverConfig(
        num_memories=args.memories,
        capacity=args.queries,
        pool_size=args.pool,
        max_budget=args.pool,
        rank=args.rank,
        solver="incremental",
    )
    needed = entry_log.entries_needed(policy.budget, args.queries, args.pool)
    log = rows._replace(entry_capacity=needed)
    payload = {
        "benchmark": "state_memory",
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "config": {**vars(args), "entry_capacity": needed},
        "observations": needed,
        "rows": state_bytes(rows, policy),
        "log": state_bytes(log, policy),
    }
    for name in ("rows", "log"):
        entry = payload[name]
        entry["history_bytes_per_observation"] = entry["history_bytes"] / needed
        print(
            f"{name:5s} state {entry['total_bytes'] / 1e6:8.2f} MB, history "
            f"{entry['history_bytes'] / 1e6:8.2f} MB "
            f"({entry['history_bytes_per_observation']:.1f} B per observation)"
        )
    write_json(payload, args.out)
    return payload


if __name__ == "__main__":
    main()
