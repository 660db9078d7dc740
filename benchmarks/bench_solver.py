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

Each section is a module beside this one (``solver_throughput.py``,
``solver_latency.py``, ``solver_baselines.py`` for ``numpy`` and ``surprise``,
``solver_roofline.py``; what they share in ``solver_common.py``); this file
holds the presets, the command line and the report.

Writes one JSON (``--out``; also ``$OUT/<name>`` when ``$OUT`` is set) with
device, versions, command, configuration and machine load, and prints tables.

    python benchmarks/bench_solver.py --preset cpu \
        --out benchmarks/results/solver_cpu.json
    python benchmarks/bench_solver.py --preset gpu --out .../solver_gpu.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import metadata, print_table, write_json  # noqa: E402
from benchmarks.solver_baselines import bench_numpy, bench_surprise  # noqa: E402
from benchmarks.solver_common import LAYOUT  # noqa: E402
from benchmarks.solver_latency import bench_latency  # noqa: E402
from benchmarks.solver_roofline import bench_roofline  # noqa: E402
from benchmarks.solver_throughput import bench_throughput  # noqa: E402

SECTIONS = ("throughput", "latency", "numpy", "surprise", "roofline")

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
