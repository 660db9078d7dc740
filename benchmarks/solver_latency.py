"""``bench_solver.py --sections latency``: one online step's wall time
against the length of the history it holds."""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from benchmarks.solver_common import (
    block,
    hlo_ops,
    solver_config,
    tracing,
)
from earm_jax.core import entry_log
from earm_jax.core.solvers import get_solver
from earm_jax.policies import constant_budget, stratified_anchors


def history_state(solver: ej.OnlineSolver, key, num_rows: int, per_row: int):
    """A state whose history holds ``num_rows`` queries of ``per_row`` anchors.

    The values are random (the step's cost does not depend on them: fixed
    shapes, fixed sweeps); the incremental statistics are made consistent.
    """
    config = solver.config
    keys = jax.random.split(key, 5)
    state = solver.init(keys[0])
    capacity, width = config.capacity, config.max_budget
    memories = config.num_memories
    order = jnp.argsort(jax.random.uniform(keys[1], (num_rows, memories)), axis=1)
    index = order[:, :width].astype(jnp.int32)
    rows = jnp.arange(capacity) < num_rows
    mask = rows[:, None] & (jnp.arange(width) < per_row)[None, :]
    index = jnp.zeros((capacity, width), jnp.int32).at[:num_rows].set(index)
    value = jax.random.uniform(keys[2], (capacity, width))
    count = (
        jnp.zeros(memories, jnp.int32)
        .at[index.reshape(-1)]
        .add(mask.reshape(-1).astype(jnp.int32))
    )
    state = state._replace(
        query_bias=jnp.where(rows, 0.1 * jax.random.normal(keys[3], (capacity,)), 0),
        query_factors=jnp.where(
            rows[:, None],
            0.1 * jax.random.normal(keys[4], state.query_factors.shape),
            0,
        ),
        memory_count=count,
        count=jnp.asarray(num_rows, jnp.int32),
    )
    value = jnp.where(mask, value, 0.0)
    if config.entry_capacity:
        state = state._replace(
            history_log=entry_log.log_from_rows(
                index, value, mask, config.entry_capacity
            )
        )
    else:
        state = state._replace(obs_index=index, obs_value=value, obs_mask=mask)
    algorithm = get_solver(config.solver)
    return state._replace(solver_extras=algorithm.extras_from_history(state, config))


def bench_latency(p: dict, log) -> dict:
    rows = []
    pool, memories, rank = p["pool"], p["memories"], p["rank"]
    per_row = max(1, round(0.175 * pool))  # the paper's steady-state budget
    policy = ej.AnchorPolicy(
        budget=constant_budget(per_row), anchors=stratified_anchors(0.1)
    )
    reps = p["latency_repeats"]
    stopped: set[str] = set()
    for t in p["latency_t"]:  # t outer: paired solvers run back to back
        for name in p["solvers"]:
            if name in stopped:
                continue
            rng = np.random.default_rng(t)  # the same queries for every solver
            config = solver_config(
                name, memories, pool, rank, t + reps + 4, policy.budget
            )
            solver = ej.online_solver(config, policy)
            state = block(history_state(solver, jax.random.key(t), t, per_row))
            candidates = np.stack(
                [rng.choice(memories, pool, replace=False) for _ in range(reps + 2)]
            ).astype(np.int32)
            queries = [
                ej.Query(
                    jnp.asarray(c),
                    jnp.asarray(
                        np.sort(rng.normal(size=pool))[::-1].copy(), jnp.float32
                    ),
                    jnp.ones(pool, bool),
                )
                for c in candidates
            ]
            scores = [jnp.asarray(rng.uniform(size=pool), jnp.float32) for _ in queries]
            step = jax.jit(solver.step, donate_argnums=(1,))
            begin = time.perf_counter()
            with tracing(name):
                step = step.lower(jax.random.key(0), state, queries[0], scores[0])
            step = step.compile()
            compile_s = time.perf_counter() - begin
            ops = hlo_ops(step)
            times = []
            budget_hit = False
            for i, (query, row) in enumerate(zip(queries, scores, strict=True)):
                begin = time.perf_counter()
                state, info = step(jax.random.key(i), state, query, row)
                jax.block_until_ready((state, info))
                elapsed = time.perf_counter() - begin
                if i > 0:  # the first call is the warm-up
                    times.append(elapsed)
                if name == "als" and elapsed > p["als_latency_budget"] and i >= 1:
                    budget_hit = True
                    break
            row = {
                "solver": name,
                "t": t,
                "capacity": config.capacity,
                "compile_s": compile_s,
                "p50_ms": 1e3 * statistics.median(times),
                "p90_ms": 1e3 * float(np.percentile(times, 90)),
                "min_ms": 1e3 * min(times),
                "repeats": len(times),
                **{f"hlo_{k}": v for k, v in ops.items()},
            }
            rows.append(row)
            log(
                f"  {name:12s} t={t:6d}: p50 {row['p50_ms']:.3g} ms "
                f"p90 {row['p90_ms']:.3g} ms ({len(times)} steps, compile "
                f"{compile_s:.3g} s)"
            )
            del state
            if budget_hit:
                log(f"  {name}: stop at t={t} (a step exceeded the budget)")
                stopped.add(name)
    ratios = {}
    for name in p["solvers"]:
        mine = {r["t"]: r["p50_ms"] for r in rows if r["solver"] == name}
        if len(mine) > 1:
            first, last = min(mine), max(mine)
            ratios[name] = {
                "t_first": first,
                "t_last": last,
                "p50_ratio": mine[last] / mine[first],
            }
    return {"rows": rows, "p50_ratio_last_over_first": ratios, "per_row": per_row}
