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
Every benchmark writes one JSON into ``--out`` (default: a new temporary
folder, so a run never rewrites the tracked results) with its command, commit,
date, versions and machine load, and its own output into ``NAME.log`` beside
it; ``suite.json`` lists them. The suite prints a few headline numbers per
benchmark (``--json``: the suite JSON instead).

    python -m benchmarks --quick
    python -m benchmarks --only solver retriever --out benchmarks/results/suite
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def _rows(payload: dict, *keys: str) -> list[dict]:
    for key in keys:
        payload = payload.get(key) or {}
    return payload if isinstance(payload, list) else []


def headlines(name: str, payload: dict[str, Any]) -> list[str]:
    """A few numbers of one benchmark's JSON, in words (none where the JSON
    does not have them: the JSON is the record, this is a glance)."""
    lines = []
    if name == "solver":
        for row in _rows(payload, "throughput", "rows"):
            lines.append(
                f"{row['solver']}, S={row['S']} streams: "
                f"{row['stream_queries_per_s']:,.0f} stream-queries/s "
                f"(compile {row['compile_s']:.1f} s)"
            )
        for row in _rows(payload, "latency", "rows"):
            lines.append(
                f"{row['solver']}, one step at t={row['t']} stored queries: "
                f"p50 {row['p50_ms']:.2f} ms"
            )
    elif name == "memory":
        for layout in ("rows", "log"):
            entry = payload.get(layout)
            if isinstance(entry, dict) and "total_bytes" in entry:
                lines.append(
                    f"solver state, history as {layout}: "
                    f"{entry['total_bytes']:,} bytes per stream"
                )
    elif name == "retriever":
        for row in _rows(payload, "results"):
            latency = row.get("latency_ms_excluding_scorer") or {}
            written = row.get("bytes_written_per_query") or {}
            if "p50" in latency and "mean" in written:
                lines.append(
                    f"{row['num_memories']:,} memories, {row['num_queries']:,} "
                    f"queries: p50 {latency['p50']:.1f} ms per query (scorer "
                    f"excluded), {written['mean']:,.0f} bytes written per query"
                )
    elif name == "scoring":
        for row in _rows(payload, "results"):
            median = row.get("median") or {}
            if "pairs_per_s" in median:
                lines.append(
                    f"{row['mode']}, {row['strategy']}: "
                    f"{median['pairs_per_s']:,.0f} pairs/s"
                )
    return lines


def summary(suite: dict[str, Any]) -> str:
    """What ``python -m benchmarks`` prints: per benchmark its status, time,
    JSON and headline numbers."""
    size = "--quick: code paths only, numbers meaningless"
    lines = [f"benchmarks ({size if suite['quick'] else 'report sizes'})"]
    for run in suite["runs"]:
        status = (
            "ok" if run["returncode"] == 0 else f"FAILED (exit {run['returncode']})"
        )
        lines.append(
            f"{run['name']}: {status} in {run['seconds']:.0f} s, {run['json']}"
        )
        try:
            payload = json.loads(Path(run["json"]).read_text(encoding="utf-8"))
            found = headlines(run["name"], payload)
        except (OSError, ValueError, KeyError, TypeError):
            found = []
        lines.extend(f"  {line}" for line in found)
    lines.append(f"suite: {suite['out']}/suite.json")
    return "\n".join(lines)


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
        default=None,
        help="folder for the JSONs (default: a new temporary folder; "
        "benchmarks/results/suite is the tracked report: name it to rewrite it)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the suite JSON instead of the summary",
    )
    args = parser.parse_args(argv)
    # Absolute: the benchmarks run from the repository root, the caller may not.
    out = (args.out or Path(tempfile.mkdtemp(prefix="earm-benchmarks-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"[benchmarks] writing into {out}", file=sys.stderr, flush=True)
    suite: dict = {
        "benchmark": "suite",
        "quick": args.quick,
        "out": str(out),
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "runs": [],
    }
    failed = []
    for name in args.only:
        line = commands(name, args.quick, out)
        if line is None:
            print(f"[benchmarks] {name}: skipped at --quick size", file=sys.stderr)
            continue
        log = out / f"{name}.log"
        print(
            f"[benchmarks] {name}: {' '.join(line)} (output: {log})",
            file=sys.stderr,
            flush=True,
        )
        begin = time.perf_counter()
        # The scripts print their rows as JSON lines: kept in the log, so the
        # terminal shows the summary below.
        with log.open("w", encoding="utf-8") as sink:
            done = subprocess.run([sys.executable, *line], cwd=REPO, stdout=sink)
        seconds = time.perf_counter() - begin
        suite["runs"].append(
            {
                "name": name,
                "command": " ".join(["python", *line]),
                "returncode": done.returncode,
                "seconds": seconds,
                "json": line[-1],
                "log": str(log),
            }
        )
        if done.returncode:
            failed.append(name)
            tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-20:]
            print("\n".join(tail), file=sys.stderr)
        print(
            f"[benchmarks] {name}: exit {done.returncode} in {seconds:.0f} s",
            file=sys.stderr,
        )
    (out / "suite.json").write_text(json.dumps(suite, indent=1) + "\n")
    print(json.dumps(suite, indent=1) if args.json else summary(suite), flush=True)
    if failed:
        raise SystemExit(f"benchmarks failed: {', '.join(failed)}")
    return suite


if __name__ == "__main__":
    main()
