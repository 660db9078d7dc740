"""What side-information completion costs: time per stream-query and memory per
stream, with it against without, paired in one run.

For each embedding width ``D`` (32, and 384 as all-MiniLM-L6-v2 gives), on the
same simulated streams (``S`` streams x ``T`` queries, pool ``N``, ``M``
memories):

* ``without``: Mixed's causal online solver over the stream
  (``jit(vmap(run))``, the default solver settings at rank ``r``);
* ``with``: the same, then the side-information model completing Mixed's
  anchors (``jit(vmap(run_mixed_side))``), i.e. what ``mixed_side`` adds.

Both programs are compiled first; then rounds alternate without / with
(``block_until_ready``), and the ratio is the median over rounds of the paired
ratios. Memory per stream: the bytes of each state pytree (the solver state;
the side model's normal equations ``(D+1)^2``, weights and two ``M``-vectors)
and of the embeddings it reads (``(M + T) x D`` floats).

    python experiments/bench_side_information.py \
        --out experiments/results/side_information_cost_cpu.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from earm_jax.core.online import online_solver
from earm_jax.core.run import run
from earm_jax.core.side_information import side_information
from earm_jax.eval.compare import usable_mask
from earm_jax.eval.simulate import SimConfig, SimKnobs, make_streams
from earm_jax.jobs.scripts import print_table, script_metadata, write_script_json  # noqa: E402
from earm_jax.policies.side_information import run_mixed_side
from earm_jax.settings import EarmSettings


def _bytes(tree) -> int:
    return int(sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(tree)))


def measure(args, width: int) -> dict:
    sim = SimConfig(
        num_memories=args.memories,
        num_queries=args.queries,
        pool_size=args.pool_size,
        embedding_dim=width,
    )
    streams = make_streams(jax.random.key(0), sim, args.streams, SimKnobs())
    settings = EarmSettings(rank=args.rank)
    config = settings.solver_config(args.memories, args.queries, args.pool_size)
    solver = online_solver(config, settings.policy(args.pool_size))
    model = side_information()
    keys = jax.random.split(jax.random.key(1), args.streams)

    def without(keys, streams):
        return jax.vmap(lambda k, s: run(solver, k, s))(keys, streams)

    def with_side(keys, streams):
        def one(key, stream):
            state, outputs = run(solver, key, stream)
            side_state, scores = run_mixed_side(
                model,
                stream.queries,
                stream.scores,
                outputs.anchors,
                stream.query_embeddings,
                stream.memory_embeddings,
                usable_mask(stream),
            )
            return state, outputs, side_state, scores

        return jax.vmap(one)(keys, streams)

    programs = {}
    compile_s = {}
    for name, fn in (("without", without), ("with", with_side)):
        begin = time.perf_counter()
        programs[name] = jax.jit(fn).lower(keys, streams).compile()
        compile_s[name] = time.perf_counter() - begin
        jax.block_until_ready(programs[name](keys, streams))  # warm-up

    times = {"without": [], "with": []}
    for _ in range(args.rounds):
        for name in ("without", "with"):
            begin = time.perf_counter()
            jax.block_until_ready(programs[name](keys, streams))
            times[name].append(time.perf_counter() - begin)
    ratios = [w / o for w, o in zip(times["with"], times["without"], strict=True)]
    stream_queries = args.streams * args.queries
    solver_state = jax.eval_shape(
        lambda k: solver.init(k, streams.insert_time[0]), keys[0]
    )
    side_state = jax.eval_shape(lambda: model.init(args.memories, width))
    embeddings = (args.memories + args.queries) * width * 4
    return {
        "embedding_dim": width,
        "compile_s": compile_s,
        "median_s": {name: statistics.median(v) for name, v in times.items()},
        "us_per_stream_query": {
            name: 1e6 * statistics.median(v) / stream_queries
            for name, v in times.items()
        },
        "paired_ratio_median": statistics.median(ratios),
        "paired_ratios": ratios,
        "bytes_per_stream": {
            "solver_state": _bytes(solver_state),
            "side_state": _bytes(side_state),
            "embeddings": embeddings,
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--pool-size", type=int, default=200)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--widths", default="32,384")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = [measure(args, int(w)) for w in args.widths.split(",")]
    table = []
    for row in rows:
        per_query, size = row["us_per_stream_query"], row["bytes_per_stream"]
        table.append(
            {
                "D": row["embedding_dim"],
                "without us": f"{per_query['without']:.1f}",
                "with us": f"{per_query['with']:.1f}",
                "ratio": f"{row['paired_ratio_median']:.2f}",
                "side KiB": f"{size['side_state'] / 1024:.0f}",
                "solver KiB": f"{size['solver_state'] / 1024:.0f}",
            }
        )
    print_table(
        table,
        ["D", "without us", "with us", "ratio", "side KiB", "solver KiB"],
        title="side-information completion: cost per stream-query (paired)",
    )
    write_script_json(
        {
            **script_metadata(argv),
            "config": vars(args),
            "device": str(jax.devices()[0]),
            "results": rows,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
