"""``bench_solver.py --sections throughput``: stream-queries per second of
``jit(run_batch)`` against streams ``S`` and against ``M``, ``N``, ``r``."""

from __future__ import annotations

import statistics
import time

import jax

import earm_jax as ej
from benchmarks.solver_common import (
    CHUNKED,
    block,
    compiled_run_batch,
    hlo_ops,
    paper_policy_for,
    simulated,
    solver_config,
)


def bench_throughput(p: dict, log) -> dict:
    rows = []

    def prepare(name, memories, pool, rank, num_streams):
        """Compiled ``run_batch`` for one solver and shape, warmed up."""
        streams = simulated(0, memories, pool, p["queries"], num_streams)
        keys = jax.random.split(jax.random.key(1), num_streams)
        chunk = p["streams_per_chunk"] if name == CHUNKED else None
        solver_name = "incremental" if name == CHUNKED else name
        config = solver_config(solver_name, memories, pool, rank, p["queries"])
        solver = ej.online_solver(config, paper_policy_for(solver_name, pool))
        fn, compile_s = compiled_run_batch(solver, keys, streams, chunk)
        first = time.perf_counter()
        block(fn(keys, streams))
        first_s = time.perf_counter() - first

        def call() -> float:
            begin = time.perf_counter()
            block(fn(keys, streams))
            return time.perf_counter() - begin

        return call, compile_s, first_s, hlo_ops(fn)

    def record(name, memories, pool, rank, num_streams, sweep, times, prepared):
        _, compile_s, first_s, ops = prepared
        median_s = statistics.median(times)
        row = {
            "solver": name,
            "sweep": sweep,
            "S": num_streams,
            "M": memories,
            "N": pool,
            "r": rank,
            "T": p["queries"],
            "compile_s": compile_s,
            "first_call_s": first_s,
            "median_s": median_s,
            "repeats": len(times),
            "times_s": times,
            "stream_queries_per_s": num_streams * p["queries"] / median_s,
            **{f"hlo_{k}": v for k, v in ops.items()},
        }
        rows.append(row)
        log(
            f"  {name:12s} {sweep:6s} S={num_streams:5d} M={memories} N={pool} "
            f"r={rank}: {row['stream_queries_per_s']:.4g} q/s "
            f"(median {median_s:.3g} s of {len(times)}, compile {compile_s:.3g} s; "
            f"{ops['fusions']} fusions, {ops['while_loops']} while loops)"
        )
        return row

    # At each S the solvers' calls alternate (round r: every solver once), so
    # a paired ratio compares calls made seconds apart under the same load;
    # the per-round ratios to the baseline are kept beside the medians.
    stopped: set[str] = set()
    shape = (p["memories"], p["pool"], p["rank"])
    for num_streams in p["streams"]:
        names = [n for n in p["solvers"] if n not in stopped]
        if p.get("streams_per_chunk") and num_streams > p["streams_per_chunk"]:
            names.append(CHUNKED)  # the current step in chunks of streams
        prepared = {n: prepare(n, *shape, num_streams) for n in names}
        times = {n: [] for n in names}
        for _ in range(p["repeats"]):
            for name in names:
                if times[name] and sum(times[name]) > p["call_budget"]:
                    continue  # a slow solver keeps its calls so far
                times[name].append(prepared[name][0]())
        by_name = {
            n: record(n, *shape, num_streams, "S", times[n], prepared[n]) for n in names
        }
        if "incremental" in by_name and CHUNKED in by_name:
            base = times["incremental"]
            pairs = list(zip(base, times[CHUNKED], strict=False))
            by_name[CHUNKED]["ratio_to_incremental_by_round"] = [
                b / c for b, c in pairs
            ]
        for name in names:
            if max(times[name]) > p["call_budget"]:
                slowest = max(times[name])
                log(f"  {name}: stop the S sweep (one call took {slowest:.1f} s)")
                stopped.add(name)
        del prepared
    for name in [n for n in p["solvers"] if n != CHUNKED]:  # sweeps
        base = (p["memories"], p["pool"], p["rank"])
        sweeps = (
            [("M", (m, base[1], base[2])) for m in p["sweep_memories"]]
            + [("N", (base[0], n, base[2])) for n in p["sweep_pools"]]
            + [("r", (base[0], base[1], r)) for r in p["sweep_ranks"]]
        )
        for sweep, (memories, pool, rank) in sweeps:
            prepared = prepare(name, memories, pool, rank, p["sweep_streams"])
            times = [prepared[0]()]
            while len(times) < p["repeats"] and sum(times) < p["call_budget"]:
                times.append(prepared[0]())
            record(
                name, memories, pool, rank, p["sweep_streams"], sweep, times, prepared
            )
    return {"rows": rows}
