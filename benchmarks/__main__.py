"""The maintained benchmark suite: ``python -m benchmarks [--quick]``.

Runs, each in its own Python (some set XLA flags before JAX starts):

* ``solver``: throughput of ``jit(run_batch)`` against the number of streams and
  the latency of one online step against the stored history
  (``benchmarks/bench_solver.py``);
* ``memory``: bytes of the solver state, rows against the paid-entry log
  (``benchmarks/state_memory.py``);
* ``retriever``: the durable retriever's query latency, bytes written per query
  and resident memory (``benchmarks/bench_retriever.py``);
* ``scoring``: pairs per second on real vLLM CPU servers
  (``benchmarks/bench_scoring.py``; needs the ``.venv-vllm`` environment of
  ``.ci/install_vllm.sh``, full size only).

``--quick`` is the CI smoke size (under 3 minutes on 2 shared cores, nearly
all of it compiling; numbers meaningless); without it, the sizes of a report.
Every benchmark writes one JSON into ``--out`` with its command, commit, date,
versions and machine load; ``suite.json`` lists them.

    python -m benchmarks --quick --out /tmp/bench
    python -m benchmarks --only solver retriever --out benchmarks/results/suite
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import metadata  # noqa: E402

BENCHMARKS = ("solver", "memory", "retriever", "scoring")


def commands(name: str, quick: bool, out: Path) -> list[str] | None:
    """The command line of one benchmark (``None``: skipped at this size)."""
    script = str(REPO / "benchmarks")
    if name == "solver":
        # At the smoke size nearly all the time is XLA compiling: one compile
        # per S, per swept M and per latency t. Quick compiles each timed
        # function once (one S, one t, no M sweep): a smoke test of the code
        # paths, whose timings mean nothing at these sizes anyway.
        size = (
            [
                "--preset",
                "smoke",
                "--latency-t",
                "8",
                "--streams",
                "1",
                "--sweep-memories",
            ]
            if quick
            else ["--preset", "cpu"]
        )
        return [
            f"{script}/bench_solver.py",
            *size,
            "--sections",
            "throughput",
            "latency",
            "--solvers",
            "incremental",
            "--out",
            str(out / "solver.json"),
        ]
    if name == "memory":
        size = (
            ["--queries", "500", "--memories", "200", "--pool", "40"] if quick else []
        )
        return [
            f"{script}/state_memory.py",
            *size,
            "--out",
            str(out / "memory.json"),
        ]
    if name == "retriever":
        size = (
            # Compiling the best preset's functions (warm_up) is most of it;
            # 20 queries still pay through the adaptive rounds and the ledger.
            [
                "--memories",
                "100",
                "--queries",
                "20",
                "--tenants",
                "0",
                "--warmup",
                "5",
                "--log-every",
                "10",
            ]
            if quick
            else []
        )
        return [
            f"{script}/bench_retriever.py",
            *size,
            "--out",
            str(out / "retriever.json"),
        ]
    if name == "scoring":
        if quick:
            return None  # starts two vLLM servers: minutes, and its own venv
        return [f"{script}/bench_scoring.py", "--out", str(out / "scoring.json")]
    raise ValueError(f"unknown benchmark {name!r}; choose from {BENCHMARKS}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="the CI smoke size (numbers meaningless)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS)
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for the JSONs (benchmarks/results/suite is the tracked "
        "report: name it to rewrite it)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    suite: dict = {
        "benchmark": "suite",
        "quick": args.quick,
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "runs": [],
    }
    failed = []
    for name in args.only:
        line = commands(name, args.quick, args.out)
        if line is None:
            print(f"[benchmarks] {name}: skipped at --quick size", file=sys.stderr)
            continue
        print(f"[benchmarks] {name}: {' '.join(line)}", file=sys.stderr, flush=True)
        begin = time.perf_counter()
        done = subprocess.run([sys.executable, *line], cwd=REPO)
        seconds = time.perf_counter() - begin
        suite["runs"].append(
            {
                "name": name,
                "command": " ".join(["python", *line]),
                "returncode": done.returncode,
                "seconds": seconds,
                "json": line[-1],
            }
        )
        if done.returncode:
            failed.append(name)
        print(
            f"[benchmarks] {name}: exit {done.returncode} in {seconds:.0f} s",
            file=sys.stderr,
        )
    (args.out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")
    return suite


if __name__ == "__main__":
    main()
