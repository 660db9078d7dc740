"""``bench_solver.py --sections roofline``: FLOPs and bytes per
stream-query, the achieved rate and the device's ceilings."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp

import earm_jax as ej
from benchmarks._common import time_call
from benchmarks.solver_common import (
    block,
    hlo_ops,
    paper_policy_for,
    simulated,
    solver_config,
    tracing,
)
from benchmarks.solver_latency import history_state
from earm_jax.core import model as solver_model
from earm_jax.core.solvers import als as als_solver


def _cost(compiled) -> dict:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else {}
    analysis = analysis or {}
    return {
        "flops": float(analysis.get("flops", float("nan"))),
        "bytes": float(analysis.get("bytes accessed", float("nan"))),
    }


def analytic_flops(
    name: str,
    memories: int,
    pool: int,
    rank: int,
    width: int,
    capacity: int,
    sweeps: int,
    refresh: int,
) -> float:
    """Dominant floating-point operations of one step (multiply-add = 2)."""
    dim = rank + 1
    solve = dim**3 / 3 + 2 * dim**2  # Cholesky/LU + two triangular solves
    fold_in = 2 * pool * dim**2 + solve + 2 * pool * dim
    if name == "incremental":
        block = refresh + 1
        return (
            fold_in
            + block
            * (
                2 * width * dim**2  # query normal equations
                + solve
                + 4 * width * dim**2  # statistics down/update
                + width * solve  # memory solves
            )
            + 2 * memories * dim
        )
    per_sweep = (
        2 * capacity * width * dim**2
        + capacity * solve  # queries
        + 2 * capacity * width * dim**2
        + memories * solve  # memories
        + 4 * capacity * width * dim  # mean
    )
    return fold_in + sweeps * per_sweep


def measure_ceilings(log) -> dict:
    """Measured matmul FLOP/s and copy bandwidth of this device (best of 3)."""
    size = 2048 if jax.default_backend() == "cpu" else 8192
    a = jnp.ones((size, size), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    block(mm(a))
    best = min(time_call(lambda: block(mm(a)), repeats=3)["times_s"])
    flops = 2 * size**3 / best
    n = (1 << 26) if jax.default_backend() == "cpu" else (1 << 28)
    x = jnp.ones((n,), jnp.float32)
    copy = jax.jit(lambda v: v * 2.0)
    block(copy(x))
    best = min(time_call(lambda: block(copy(x)), repeats=3)["times_s"])
    bandwidth = 2 * 4 * n / best
    log(
        f"  measured: matmul {flops / 1e9:.4g} GFLOP/s, "
        f"stream {bandwidth / 1e9:.4g} GB/s"
    )
    return {"matmul_flops_per_s": flops, "copy_bytes_per_s": bandwidth}


def theoretical_ceilings() -> dict:
    """Nominal peaks: CPU from cores x clock x FLOPs/cycle; GPUs from a table."""
    kind = jax.devices()[0].device_kind
    if jax.default_backend() == "gpu":
        table = {  # dense fp32 (no tensor cores) FLOP/s, HBM bytes/s
            "H200": (67e12, 4.8e12),
            "H100": (67e12, 3.35e12),
            "A100": (19.5e12, 2.0e12),
        }
        for key, (flops, bandwidth) in table.items():
            if key in kind:
                return {
                    "device": kind,
                    "fp32_flops_per_s": flops,
                    "bytes_per_s": bandwidth,
                    "source": "vendor datasheet",
                }
        return {"device": kind, "source": "unknown GPU: no nominal peak"}
    mhz = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                mhz = float(line.split(":")[1])
                break
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    # 2 FMA pipes x 8 fp32 lanes (AVX2, or AVX-512 on a 256-bit datapath such
    # as AMD Zen 4) x 2 FLOPs; AVX-512 on Intel server cores doubles the lanes.
    per_cycle = 32
    cores = (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1)
    )
    flops = cores * (mhz or 0) * 1e6 * per_cycle
    return {
        "device": kind,
        "cores": cores,
        "mhz": mhz,
        "fp32_flops_per_cycle_per_core": per_cycle,
        "fp32_flops_per_s": flops,
        "avx512": "avx512f" in flags,
        "source": "cores x clock x 32 (2 FMA x 8 lanes x 2)",
    }


def bench_roofline(p: dict, throughput: dict | None, log) -> dict:
    num_streams = p["sweep_streams"]
    memories, pool, rank, queries = p["memories"], p["pool"], p["rank"], p["queries"]
    rows = []
    for name in p["solvers"]:
        config = solver_config(name, memories, pool, rank, queries)
        solver = ej.online_solver(config, paper_policy_for(name, pool))
        half = max(1, queries // 2)
        states = jax.vmap(
            lambda k, solver=solver, half=half: history_state(
                solver, k, half, round(0.175 * pool)
            )
        )(jax.random.split(jax.random.key(0), num_streams))
        streams = simulated(0, memories, pool, queries, num_streams)
        query = jax.tree.map(lambda leaf: leaf[:, 0], streams.queries)
        row_scores = streams.scores[:, 0]
        keys = jax.random.split(jax.random.key(2), num_streams)
        step = jax.vmap(solver.step)
        with tracing(name):
            lowered = jax.jit(step).lower(keys, states, query, row_scores)
        compiled = lowered.compile()
        cost = _cost(compiled)
        ops = hlo_ops(compiled)
        if name == "als":
            # XLA counts a loop body once: add the other sweeps explicitly.
            sweep = jax.vmap(
                lambda s, l2=config.l2: als_solver.als_sweep(
                    solver_model.parameters(s), s, l2
                )
            )
            sweep_cost = _cost(jax.jit(sweep).lower(states).compile())
            cost["flops"] += (config.num_sweeps - 1) * sweep_cost["flops"]
            cost["bytes"] += (config.num_sweeps - 1) * sweep_cost["bytes"]
        per_query = {k: v / num_streams for k, v in cost.items()}
        analytic = analytic_flops(
            name,
            memories,
            pool,
            rank,
            pool,
            queries,
            config.num_sweeps,
            config.refresh_rows,
        )
        rate = None
        if throughput:
            matching = [
                r
                for r in throughput["rows"]
                if r["solver"] == name
                and r["sweep"] == "S"
                and r["M"] == memories
                and r["N"] == pool
                and r["r"] == rank
            ]
            if matching:
                best = max(matching, key=lambda r: r["stream_queries_per_s"])
                rate = best["stream_queries_per_s"]
        row = {
            "solver": name,
            "flops_per_stream_query_xla": per_query["flops"],
            "bytes_per_stream_query_xla": per_query["bytes"],
            "flops_per_stream_query_analytic": analytic,
            "arithmetic_intensity": per_query["flops"] / per_query["bytes"],
            **{f"hlo_{k}_per_step": v for k, v in ops.items()},
            "best_stream_queries_per_s": rate,
        }
        if rate:
            row["achieved_flops_per_s"] = rate * per_query["flops"]
            row["achieved_bytes_per_s"] = rate * per_query["bytes"]
        rows.append(row)
    ceilings = {"measured": measure_ceilings(log), "nominal": theoretical_ceilings()}
    for row in rows:
        if "achieved_flops_per_s" in row:
            peak = ceilings["nominal"].get("fp32_flops_per_s")
            row["fraction_of_nominal_flops"] = (
                row["achieved_flops_per_s"] / peak if peak else None
            )
            row["fraction_of_measured_matmul"] = (
                row["achieved_flops_per_s"] / ceilings["measured"]["matmul_flops_per_s"]
            )
            row["fraction_of_measured_bandwidth"] = (
                row["achieved_bytes_per_s"] / ceilings["measured"]["copy_bytes_per_s"]
            )
        log(
            f"  {row['solver']:12s} {row['flops_per_stream_query_xla']:.3g} FLOP, "
            f"{row['bytes_per_stream_query_xla']:.3g} B per stream-query (XLA); "
            f"analytic {row['flops_per_stream_query_analytic']:.3g} FLOP"
        )
    return {
        "S": num_streams,
        "history_rows": max(1, queries // 2),
        "rows": rows,
        "ceilings": ceilings,
    }
