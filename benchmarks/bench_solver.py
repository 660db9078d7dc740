"""Solver benchmarks: throughput, latency vs history, NumPy and Surprise, the bound.

Sections (``--sections``, all by default):

* ``throughput`` -- stream-queries per second of ``jit(run_batch)`` vs the
  number of streams ``S`` for each solver, and vs ``M``, ``N``, ``r`` at one
  ``S``. Compile time (``lower().compile()``) is reported apart from the steady
  state (warm-up call, then the median of repeats, ``block_until_ready``).
* ``latency`` -- wall time of one online step (``jit(solver.step)`` with the
  state donated, as an agent calls it) with a history of ``t`` queries,
  ``t = 100 .. 10,000``; p50 / p90 per solver. ``als`` stops at the first ``t``
  whose step exceeds ``--als-latency-budget`` seconds.
* ``numpy`` -- the same math as a per-stream NumPy loop
  (``benchmarks/numpy_baseline.py``) on the same streams and anchors: speed at
  ``S = --numpy-streams`` in interleaved rounds, JAX call then NumPy loop,
  ratio = median over rounds (the loop is timed on a few streams and scaled
  linearly, which is exact for a loop over streams) and the largest difference
  of the completions (a correctness check of both paths).
* ``surprise`` -- what a user would pick instead: Surprise's
  ``SVD(biased=True)`` (the same biased low-rank model, SGD, no fold-in) refit
  on the history at every query; time per query and completion quality against
  the JAX solvers on the same streams and anchors.
* ``roofline`` -- FLOPs and bytes per stream-query from XLA's cost analysis of
  one batched step (plus an analytic count), the achieved rate at the measured
  throughput, and the device's ceilings (theoretical and measured).

Writes one JSON (``--out``; also ``$OUT/<name>`` when ``$OUT`` is set) with
device, versions, command, configuration and machine load, and prints tables.

    python benchmarks/bench_solver.py --preset cpu \
        --out benchmarks/results/solver_cpu.json
    python benchmarks/bench_solver.py --preset gpu --out .../solver_gpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import earm_jax as ej  # noqa: E402
from benchmarks import numpy_baseline  # noqa: E402
from benchmarks._common import metadata, print_table, time_call, write_json  # noqa: E402
from earm_jax.core import entry_log  # noqa: E402
from earm_jax.core import model as solver_model  # noqa: E402
from earm_jax.core.solvers import als as als_solver  # noqa: E402
from earm_jax.core.solvers import get_solver  # noqa: E402
from earm_jax.eval import metrics  # noqa: E402
from earm_jax.eval.simulate import SimConfig, make_streams  # noqa: E402
from earm_jax.policies import constant_budget, stratified_anchors  # noqa: E402

SECTIONS = ("throughput", "latency", "numpy", "surprise", "roofline")
# The current incremental step with ``run_batch(..., streams_per_chunk=C)``
# (``--streams-per-chunk C``): a throughput row at every S above C.
CHUNKED = "incremental_chunked"

PRESETS = {
    # Small enough for 2 shared CPU cores in a few minutes.
    "cpu": dict(
        solvers=["incremental", "als"],
        memories=1000,
        pool=200,
        rank=8,
        queries=40,
        streams=[1, 16, 64],
        sweep_streams=16,
        sweep_memories=[],
        sweep_pools=[],
        sweep_ranks=[16],
        call_budget=60.0,
        repeats=3,
        latency_t=[100, 1000, 10000],
        latency_repeats=15,
        als_latency_budget=5.0,
        numpy_streams=64,
        numpy_measured=2,
        surprise_streams=2,
        surprise_queries=40,
    ),
    # One large GPU. The M sweep (to 100k memories) runs at sweep_streams.
    # A/B against an older commit: benchmarks/ab_commits.py.
    "gpu": dict(
        solvers=["incremental"],
        memories=1000,
        pool=200,
        rank=8,
        queries=50,
        streams=[1, 16, 64, 256, 1024, 4096],
        sweep_streams=256,
        sweep_memories=[5000, 20000, 100000],
        sweep_pools=[],
        sweep_ranks=[],
        call_budget=30.0,
        repeats=5,
        latency_t=[100, 1000, 10000],
        latency_repeats=30,
        als_latency_budget=5.0,
        numpy_streams=64,
        numpy_measured=2,
        surprise_streams=2,
        surprise_queries=40,
    ),
    # Seconds, for the smoke test: every code path, tiny shapes.
    "smoke": dict(
        solvers=["incremental", "als"],
        memories=60,
        pool=16,
        rank=2,
        queries=6,
        streams=[1, 2],
        sweep_streams=2,
        sweep_memories=[40],
        sweep_pools=[],
        sweep_ranks=[],
        call_budget=20.0,
        repeats=1,
        latency_t=[8, 16],
        latency_repeats=2,
        als_latency_budget=5.0,
        numpy_streams=2,
        numpy_measured=1,
        surprise_streams=1,
        surprise_queries=6,
        streams_per_chunk=1,
    ),
}


# ------------------------------------------------------------------ helpers


# The history layout of the current incremental solver (``--layout``): ``rows``
# (``[Q, K]`` rows) or ``log`` (an entry log sized for the schedule, see
# ``earm_jax.core.entry_log``), and ``--block-entries`` for the log.
LAYOUT = {"layout": "rows", "block_entries": 0}


def solver_config(
    name: str,
    memories: int,
    pool: int,
    rank: int,
    capacity: int,
    budget=None,
    **extra,
) -> ej.SolverConfig:
    """The benchmark's config; ``budget`` (query index -> budget) sizes the log."""
    if name == "incremental" and LAYOUT["layout"] == "log":
        budget = budget or ej.paper_policy(pool_size=pool).budget
        extra = {
            "entry_capacity": entry_log.entries_needed(budget, capacity, pool),
            "block_entries": LAYOUT["block_entries"],
            **extra,
        }
    return ej.SolverConfig(
        num_memories=memories,
        capacity=capacity,
        pool_size=pool,
        max_budget=pool,
        rank=rank,
        solver=name,
        **extra,
    )


def simulated(seed: int, memories: int, pool: int, queries: int, streams: int):
    sim = SimConfig(num_memories=memories, num_queries=queries, pool_size=pool)
    data = jax.jit(make_streams, static_argnums=(1, 2))(
        jax.random.key(seed), sim, streams
    )
    return jax.block_until_ready(data)


def paper_policy_for(name: str, pool: int) -> ej.Policy:
    """The paper policy (every solver runs the same one)."""
    del name
    return ej.paper_policy(pool_size=pool)


def tracing(name: str):
    """Context for lowering ``name`` (none is needed today)."""
    del name
    return contextlib.nullcontext()


def hlo_ops(compiled) -> dict:
    """Operation counts of a compiled program (XLA's optimised HLO text).

    ``fusions`` and ``custom_calls`` approximate kernels per call on a GPU;
    ``while_loops`` are loops (each iteration a launch and a predicate);
    ``instructions`` counts every HLO instruction, loop bodies once.
    """
    text = compiled.as_text()
    lines = [line for line in text.splitlines() if " = " in line]
    return {
        "instructions": len(lines),
        "fusions": sum(1 for line in lines if re.search(r"\sfusion\(", line)),
        "while_loops": len(re.findall(r"\swhile\(", text)),
        "custom_calls": len(re.findall(r"\scustom-call\(", text)),
        "copies": len(re.findall(r"\scopy\(", text)),
    }


def compiled_run_batch(
    solver, keys, streams, streams_per_chunk: int | None = None
) -> tuple[object, float]:
    start = time.perf_counter()
    with tracing(solver.config.solver):
        run = functools.partial(
            ej.run_batch, solver, streams_per_chunk=streams_per_chunk
        )
        fn = jax.jit(run).lower(keys, streams)
    fn = fn.compile()
    return fn, time.perf_counter() - start


def _block(out):
    return jax.block_until_ready(out)


# --------------------------------------------------------------- throughput


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
        _block(fn(keys, streams))
        first_s = time.perf_counter() - first

        def call() -> float:
            begin = time.perf_counter()
            _block(fn(keys, streams))
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


# ------------------------------------------------------------------ latency


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
    policy = ej.Policy(budget=constant_budget(per_row), anchors=stratified_anchors(0.1))
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
            state = _block(history_state(solver, jax.random.key(t), t, per_row))
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


# -------------------------------------------------------------------- numpy


def _completion_quality(streams, completed, scores_mixed, anchors) -> dict:
    usable = np.isfinite(np.asarray(scores_mixed))
    hidden = usable & ~np.asarray(anchors)
    error = np.where(hidden, np.asarray(completed) - np.asarray(streams.scores), 0.0)
    ranking = metrics.ranking_metrics(
        jnp.asarray(scores_mixed, jnp.float32),
        streams.relevant,
        k=10,
        where=jnp.asarray(usable),
        num_relevant=streams.num_relevant,
    )
    has = np.asarray(ranking.has_relevant)
    return {
        "rmse_unobserved": float(np.sqrt((error**2).sum() / max(hidden.sum(), 1))),
        "recall_at_10": float(np.asarray(ranking.recall)[has].mean()),
        "num_queries": int(has.sum()),
    }


def blas_limiter_available() -> bool:
    """Whether ``threadpoolctl`` can pin the NumPy loop's BLAS threads."""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return False
    return True


def one_blas_thread():
    """One BLAS thread for the NumPy loop (``threadpoolctl``, when installed).

    The loop is per stream and its solves are 9 x 9: extra BLAS threads do not
    speed it up, but their spin-waiting after each call can take the cores
    the JAX call that follows needs. The limit holds only inside the ``with``.
    """
    if not blas_limiter_available():
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def bench_numpy(p: dict, log) -> dict:
    num_streams = p["numpy_streams"]
    measured = min(p["numpy_measured"], num_streams)
    streams = simulated(0, p["memories"], p["pool"], p["queries"], num_streams)
    keys = jax.random.split(jax.random.key(1), num_streams)
    rows = []
    for name in p["solvers"]:
        config = solver_config(name, p["memories"], p["pool"], p["rank"], p["queries"])
        solver = ej.online_solver(config, paper_policy_for(name, p["pool"]))
        fn, compile_s = compiled_run_batch(solver, keys, streams)
        _, infos = _block(fn(keys, streams))
        init = np.stack(
            [
                np.asarray(solver.init(jax.random.split(k)[0]).memory_factors)
                for k in keys[:measured]
            ]
        )
        head = jax.tree.map(lambda leaf: leaf[:measured], streams)
        np_config = numpy_baseline.NumpyConfig(
            num_memories=p["memories"],
            capacity=p["queries"],
            rank=p["rank"],
            solver=name,
            num_sweeps=config.num_sweeps,
            refresh_rows=config.refresh_rows,
        )
        head_anchors = np.asarray(infos.anchors)[:measured]
        # Interleaved rounds (JAX call, then the NumPy loop): both sides of
        # each round see the same machine load; the ratio is their median.
        jax_times, numpy_times = [], []
        for _ in range(p.get("numpy_rounds", p["repeats"])):
            begin = time.perf_counter()
            _block(fn(keys, streams))
            jax_times.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            with one_blas_thread():
                outputs = numpy_baseline.run_streams(
                    np_config, head, head_anchors, initial_factors=init
                )
            numpy_times.append((time.perf_counter() - begin) * num_streams / measured)
        ratios = [n / j for n, j in zip(numpy_times, jax_times, strict=True)]
        timing = {"median_s": statistics.median(jax_times)}
        numpy_s = statistics.median(numpy_times) * measured / num_streams
        numpy_total = statistics.median(numpy_times)
        difference = max(
            float(np.max(np.abs(c - np.asarray(infos.completed)[s])))
            for s, (_, c) in enumerate(outputs)
        )
        row = {
            "solver": name,
            "S": num_streams,
            "jax_compile_s": compile_s,
            "jax_median_s": timing["median_s"],
            "numpy_streams_timed": measured,
            "numpy_s_for_timed": numpy_s,
            "numpy_s_scaled_to_S": numpy_total,
            "speedup": statistics.median(ratios),
            "numpy_blas_threads": 1 if blas_limiter_available() else None,
            "rounds": len(ratios),
            "speedup_by_round": ratios,
            "max_abs_completion_difference": difference,
        }
        rows.append(row)
        log(
            f"  {name:12s} S={num_streams}: jax {timing['median_s']:.3g} s, numpy "
            f"{numpy_total:.3g} s (scaled from {measured}) -> {row['speedup']:.3g}x; "
            f"max |diff| {difference:.2g}"
        )
    return {"rows": rows}


# ----------------------------------------------------------------- surprise


def bench_surprise(p: dict, log) -> dict:
    try:
        import surprise
    except ImportError as error:
        log(f"  surprise not installed ({error}); pip install scikit-surprise")
        return {"skipped": f"scikit-surprise is not installed: {error}"}
    from collections import defaultdict

    num_streams, num_queries = p["surprise_streams"], p["surprise_queries"]
    streams = simulated(0, p["memories"], p["pool"], num_queries, num_streams)
    keys = jax.random.split(jax.random.key(1), num_streams)
    results = {}
    anchors = None
    for name in p["solvers"]:
        config = solver_config(name, p["memories"], p["pool"], p["rank"], num_queries)
        solver = ej.online_solver(config, ej.paper_policy(pool_size=p["pool"]))
        fn, _ = compiled_run_batch(solver, keys, streams)
        _, infos = _block(fn(keys, streams))
        timing = time_call(lambda fn=fn: _block(fn(keys, streams)), repeats=1, warmup=0)
        anchors = np.asarray(infos.anchors)
        results[name] = {
            **_completion_quality(streams, infos.completed, infos.scores, anchors),
            "seconds_per_stream_query": timing["median_s"]
            / (num_streams * num_queries),
        }

    candidates = np.asarray(streams.queries.candidates)
    values = np.asarray(streams.scores)
    usable_all = np.isfinite(np.asarray(infos.scores))
    completed = np.zeros(values.shape, np.float32)
    fit_seconds = []
    for s in range(num_streams):
        triples: list[tuple[int, int, float]] = []
        for t in range(num_queries):
            observed = anchors[s, t] & usable_all[s, t]
            triples += [
                (t, int(m), float(y))
                for m, y in zip(
                    candidates[s, t][observed], values[s, t][observed], strict=True
                )
            ]
            begin = time.perf_counter()
            by_user, by_item = defaultdict(list), defaultdict(list)
            users, items = {}, {}
            for u, i, y in triples:
                inner_u = users.setdefault(u, len(users))
                inner_i = items.setdefault(i, len(items))
                by_user[inner_u].append((inner_i, y))
                by_item[inner_i].append((inner_u, y))
            trainset = surprise.Trainset(
                by_user,
                by_item,
                len(users),
                len(items),
                len(triples),
                (0.0, 1.0),
                users,
                items,
            )
            algo = surprise.SVD(n_factors=p["rank"], biased=True, random_state=s)
            if triples:
                algo.fit(trainset)
                for n, m in enumerate(candidates[s, t]):
                    completed[s, t, n] = algo.predict(t, int(m)).est
            fit_seconds.append(time.perf_counter() - begin)
    mixed = np.where(anchors, values, completed)
    mixed = np.where(usable_all, mixed, -np.inf)
    results["surprise_svd_refit"] = {
        **_completion_quality(streams, completed, mixed, anchors),
        "seconds_per_stream_query": float(np.mean(fit_seconds)),
        "seconds_per_query_last_10": float(np.mean(fit_seconds[-10:])),
        "settings": "SVD(n_factors=r, biased=True), Surprise defaults otherwise "
        "(SGD, 20 epochs, lr 0.005, reg 0.02); refit on every observation so far "
        "including the query's own anchors; predictions clipped to [0, 1]",
    }
    for name, entry in results.items():
        log(
            f"  {name:20s} RMSE {entry['rmse_unobserved']:.4f} "
            f"Recall@10 {entry['recall_at_10']:.4f} "
            f"{1e3 * entry['seconds_per_stream_query']:.3g} ms/stream-query"
        )
    return {
        "num_streams": num_streams,
        "num_queries": num_queries,
        "version": surprise.__version__,
        "results": results,
    }


# ----------------------------------------------------------------- roofline


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
    _block(mm(a))
    best = min(time_call(lambda: _block(mm(a)), repeats=3)["times_s"])
    flops = 2 * size**3 / best
    n = (1 << 26) if jax.default_backend() == "cpu" else (1 << 28)
    x = jnp.ones((n,), jnp.float32)
    copy = jax.jit(lambda v: v * 2.0)
    _block(copy(x))
    best = min(time_call(lambda: _block(copy(x)), repeats=3)["times_s"])
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


# --------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument("--solvers", nargs="+", default=None)
    parser.add_argument("--streams", type=int, nargs="+", default=None)
    parser.add_argument("--latency-t", type=int, nargs="+", default=None)
    parser.add_argument("--sweep-memories", type=int, nargs="*", default=None)
    parser.add_argument("--sweep-streams", type=int, default=None)
    parser.add_argument("--layout", choices=["rows", "log"], default="rows")
    parser.add_argument("--block-entries", type=int, default=0)
    parser.add_argument(
        "--streams-per-chunk",
        type=int,
        default=None,
        help="also time the current step with run_batch(streams_per_chunk=C) "
        "at every S above C (throughput section)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    LAYOUT.update(layout=args.layout, block_entries=args.block_entries)
    p = dict(PRESETS[args.preset])
    if args.solvers:
        p["solvers"] = args.solvers
    if args.streams:
        p["streams"] = args.streams
    if args.latency_t:
        p["latency_t"] = args.latency_t
    if args.sweep_memories is not None:
        p["sweep_memories"] = args.sweep_memories
    if args.sweep_streams:
        p["sweep_streams"] = args.sweep_streams
    if args.streams_per_chunk is not None:
        p["streams_per_chunk"] = args.streams_per_chunk

    def log(message: str) -> None:
        print(message, flush=True)

    payload = {
        "benchmark": "bench_solver",
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "config": {
            "preset": args.preset,
            "sections": list(args.sections),
            **p,
            **LAYOUT,
        },
    }
    started = time.perf_counter()
    if "throughput" in args.sections:
        log("throughput (jit(run_batch), paper policy, simulated streams)")
        payload["throughput"] = bench_throughput(p, log)
    if "latency" in args.sections:
        log("latency of one online step vs history length t")
        payload["latency"] = bench_latency(p, log)
    if "numpy" in args.sections:
        log("JAX run_batch vs the per-stream NumPy loop")
        payload["numpy"] = bench_numpy(p, log)
    if "surprise" in args.sections:
        log("Surprise SVD(biased=True) refit per query")
        payload["surprise"] = bench_surprise(p, log)
    if "roofline" in args.sections:
        log("FLOPs and bytes per step")
        payload["roofline"] = bench_roofline(p, payload.get("throughput"), log)
    payload["meta"]["total_seconds"] = time.perf_counter() - started
    payload["meta"]["load_average_after"] = os.getloadavg()
    report(payload)
    write_json(payload, args.out)
    return payload


def report(payload: dict) -> None:
    if "throughput" in payload:
        print_table(
            payload["throughput"]["rows"],
            [
                "solver",
                "sweep",
                "S",
                "M",
                "N",
                "r",
                "T",
                "compile_s",
                "median_s",
                "stream_queries_per_s",
                "hlo_fusions",
                "hlo_while_loops",
            ],
            "throughput (stream-queries/s, steady state; compile apart)",
        )
    if "latency" in payload:
        print_table(
            payload["latency"]["rows"],
            ["solver", "t", "p50_ms", "p90_ms", "repeats", "compile_s"],
            "latency of one online step vs history t",
        )
        for name, ratio in payload["latency"]["p50_ratio_last_over_first"].items():
            print(
                f"  {name}: p50(t={ratio['t_last']}) / p50(t={ratio['t_first']}) = "
                f"{ratio['p50_ratio']:.3g}"
            )
    if "numpy" in payload:
        print_table(
            payload["numpy"]["rows"],
            [
                "solver",
                "S",
                "jax_median_s",
                "numpy_s_scaled_to_S",
                "speedup",
                "max_abs_completion_difference",
            ],
            "JAX vs the NumPy loop",
        )
    if "surprise" in payload and "results" in payload["surprise"]:
        rows = [
            {"method": k, **{kk: vv for kk, vv in v.items() if kk != "settings"}}
            for k, v in payload["surprise"]["results"].items()
        ]
        print_table(
            rows,
            ["method", "rmse_unobserved", "recall_at_10", "seconds_per_stream_query"],
            "completion quality and cost: JAX solvers vs Surprise refits",
        )
    if "roofline" in payload:
        print_table(
            payload["roofline"]["rows"],
            [
                "solver",
                "flops_per_stream_query_xla",
                "bytes_per_stream_query_xla",
                "flops_per_stream_query_analytic",
                "best_stream_queries_per_s",
                "achieved_flops_per_s",
                "fraction_of_nominal_flops",
                "fraction_of_measured_bandwidth",
            ],
            "the bound (per stream-query)",
        )


if __name__ == "__main__":
    main()
