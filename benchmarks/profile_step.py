"""Where the batched step's time goes: one profiled ``run_batch``, per HLO op.

Compiles the benchmark's ``run_batch`` (the incremental solver, paper policy,
simulated streams), runs it once to warm up, then once under
``jax.profiler.trace(..., create_perfetto_trace=True)``, and sums the trace's
durations per HLO operation of the compiled program. Each operation is named
with its output shape and the JAX operation it came from (``op_name``), and
the table groups fusions by kind (``subtract_divide_fusion``, ``dot_general``,
...). On a CPU, XLA emits per-operation events only with
``XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true``, which this script sets for
itself when ``XLA_FLAGS`` is unset (before JAX starts); on a GPU the device
trace has the kernels. Durations on several threads add up: the sum can exceed
the wall time. Not a test: it measures.

    python benchmarks/profile_step.py --streams 64 \\
        --out benchmarks/results/profile_step_cpu.json
"""

from __future__ import annotations

import argparse
import collections
import functools
import gzip
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

if "XLA_FLAGS" not in os.environ:  # a script, before JAX: per-op CPU events
    os.environ["XLA_FLAGS"] = "--xla_cpu_enable_xprof_traceme=true"

import jax  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import earm_jax as ej  # noqa: E402
from benchmarks._common import metadata, write_json  # noqa: E402
from benchmarks.solver_common import hlo_ops, simulated, solver_config  # noqa: E402

_DEFINITION = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def operations(hlo_text: str) -> dict[str, dict]:
    """Every instruction of the compiled HLO: its output shape and JAX op."""
    found = {}
    for line in hlo_text.splitlines():
        match = _DEFINITION.match(line)
        if match:
            op_name = _OP_NAME.search(line)
            found[match.group(1)] = {
                "shape": match.group(2),
                "op_name": op_name.group(1) if op_name else "",
            }
    return found


def trace_durations(folder: Path) -> collections.Counter:
    """Microseconds per event name, summed over the Perfetto trace in ``folder``."""
    (path,) = list(folder.rglob("*.trace.json.gz"))
    with gzip.open(path) as handle:
        trace = json.load(handle)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    durations: collections.Counter = collections.Counter()
    for event in events:
        if event.get("ph") == "X":
            durations[event["name"]] += event.get("dur", 0)
    return durations


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--top", type=int, default=30, help="operations listed")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    streams = simulated(0, args.memories, args.pool, args.queries, args.streams)
    keys = jax.random.split(jax.random.key(1), args.streams)
    config = solver_config(
        "incremental", args.memories, args.pool, args.rank, args.queries
    )
    solver = ej.online_solver(config, ej.paper_policy(pool_size=args.pool))
    compiled = (
        jax.jit(functools.partial(ej.run_batch, solver)).lower(keys, streams).compile()
    )
    jax.block_until_ready(compiled(keys, streams))
    with tempfile.TemporaryDirectory() as folder:
        begin = time.perf_counter()
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            jax.block_until_ready(compiled(keys, streams))
        wall_s = time.perf_counter() - begin
        durations = trace_durations(Path(folder))

    known = operations(compiled.as_text())
    ops = {name: us for name, us in durations.items() if name in known}
    total_us = sum(ops.values())
    if not ops:
        raise SystemExit(
            "error: the trace holds no per-operation events — on a CPU, start "
            "Python with XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true"
        )
    groups: collections.Counter = collections.Counter()
    for name, us in ops.items():
        groups[re.sub(r"\.\d+$", "", name)] += us
    top = [
        {
            "operation": name,
            "ms": us / 1e3,
            "share": us / total_us,
            "shape": known[name]["shape"],
            "op_name": known[name]["op_name"],
        }
        for name, us in sorted(ops.items(), key=lambda item: -item[1])[: args.top]
    ]
    by_kind = [
        {"kind": kind, "ms": us / 1e3, "share": us / total_us}
        for kind, us in groups.most_common()
    ]
    print(
        f"{args.streams} streams x {args.queries} queries: wall {wall_s:.3f} s "
        f"(profiled), {total_us / 1e3:.1f} ms in {len(ops)} operations"
    )
    for row in top:
        where = row["op_name"].rsplit("/", 2)[-2:]
        print(
            f"{row['ms']:8.1f} ms {row['share']:6.1%}  {row['operation'][:34]:34s} "
            f"{row['shape'][:28]:28s} {'/'.join(where)[:60]}"
        )
    payload = {
        "benchmark": "profile_step",
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "config": {**vars(args), "xla_flags": os.environ.get("XLA_FLAGS", "")},
        "hlo": hlo_ops(compiled),
        "wall_s_profiled": wall_s,
        "operations_ms": total_us / 1e3,
        "top": top,
        "by_kind": by_kind,
    }
    write_json(payload, args.out)
    return payload


if __name__ == "__main__":
    main()
