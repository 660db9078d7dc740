"""``bench_solver.py --sections numpy surprise``: the same math as a
per-stream NumPy loop, and Surprise's SVD refit per query, against the JAX
solvers on the same streams and anchors."""

from __future__ import annotations

import contextlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from benchmarks import numpy_baseline
from benchmarks._common import time_call
from benchmarks.solver_common import (
    block,
    compiled_run_batch,
    paper_policy_for,
    simulated,
    solver_config,
)
from earm_jax.eval import metrics


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
        _, infos = block(fn(keys, streams))
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
            block(fn(keys, streams))
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
        _, infos = block(fn(keys, streams))
        timing = time_call(lambda fn=fn: block(fn(keys, streams)), repeats=1, warmup=0)
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
