"""The batched step of several commits, side by side in one process.

Each commit's ``earm_jax`` is exported (``git archive``) into a temporary
folder as a package of its own name (``earm_<sha>``, imports rewritten), so
all of them load into one Python process; their compiled ``run_batch`` calls
then alternate (round r: one call of each), and every ratio compares calls
made seconds apart under the same load. The first commit is the reference:
the JSON holds, per commit, the median time, the per-round ratios to the
reference, whether the anchors equal the reference's and the largest
difference of the completions. Not a test: it measures.

    python benchmarks/ab_commits.py eb6173e HEAD --streams 64 --rounds 9 \\
        --out benchmarks/results/ab_eb6173e_head.json

``WORKTREE`` stands for the uncommitted working tree.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import jax
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks._common import metadata, write_json  # noqa: E402
from benchmarks.solver_common import simulated  # noqa: E402

WORKTREE = "WORKTREE"


def export_package(commit: str, into: Path) -> str:
    """Writes ``commit``'s ``earm_jax`` under ``into`` as its own package; returns
    the package's name."""
    if commit == WORKTREE:
        name = "earm_worktree"
        files = {
            str(path.relative_to(REPO)): path.read_bytes()
            for path in (REPO / "earm_jax").rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }
    else:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=10", commit],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        name = f"earm_{sha}"
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, "earm_jax"],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout
        files = {}
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    files[member.name] = tar.extractfile(member).read()
    for relative, content in files.items():
        target = into / name / Path(relative).relative_to("earm_jax")
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative.endswith(".py"):  # imports name the package
            content = content.replace(b"earm_jax", name.encode())
        target.write_bytes(content)
    return name


def compile_all(args, folder: Path, base_streams, keys):
    """Each commit's package exported, imported and its ``run_batch`` compiled."""
    compiled, outputs, names = {}, {}, []
    for commit in args.commits:
        name = export_package(commit, folder)
        lib = importlib.import_module(name)
        streams = lib.Stream(*base_streams)
        config = lib.SolverConfig(
            num_memories=args.memories,
            capacity=args.queries,
            pool_size=args.pool,
            max_budget=args.pool,
            rank=args.rank,
            solver="incremental",
        )
        solver = lib.online_solver(config, lib.paper_policy(pool_size=args.pool))
        begin = time.perf_counter()
        call = jax.jit(functools.partial(lib.run_batch, solver))
        call = call.lower(keys, streams).compile()
        compile_s = time.perf_counter() - begin
        outputs[commit] = jax.block_until_ready(call(keys, streams))[1]
        text = call.as_text()
        compiled[commit] = (call, keys, streams)
        names.append(commit)
        print(
            f"{commit} as {name}: compiled in {compile_s:.1f} s, "
            f"{text.count(' fusion(')} fusions",
            flush=True,
        )
    return compiled, outputs, names


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commits", nargs="+", help="the first is the reference")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--pool", type=int, default=200)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if len(args.commits) < 2:
        parser.error("argument commits: give at least two (reference first)")

    # One set of streams and keys (the working tree's simulator) for every
    # commit: the commits differ only in the step.
    base_streams = simulated(0, args.memories, args.pool, args.queries, args.streams)
    keys = jax.random.split(jax.random.key(1), args.streams)
    folder = Path(tempfile.mkdtemp(prefix="earm_ab_"))
    sys.path.insert(0, str(folder))
    try:
        compiled, outputs, names = compile_all(args, folder, base_streams, keys)
    finally:  # every module is loaded and every program compiled by now
        sys.path.remove(str(folder))
        shutil.rmtree(folder, ignore_errors=True)

    times: dict[str, list[float]] = {commit: [] for commit in names}
    for _ in range(args.rounds):
        for commit in names:
            call, keys, streams = compiled[commit]
            begin = time.perf_counter()
            jax.block_until_ready(call(keys, streams))
            times[commit].append(time.perf_counter() - begin)

    reference = names[0]
    rows = []
    for commit in names:
        ratios = [r / c for r, c in zip(times[reference], times[commit], strict=True)]
        got, want = outputs[commit], outputs[reference]
        row = {
            "commit": commit,
            "median_s": statistics.median(times[commit]),
            "times_s": times[commit],
            "stream_queries_per_s": args.streams
            * args.queries
            / statistics.median(times[commit]),
            "speedup_vs_reference_by_round": ratios,
            "speedup_vs_reference": statistics.median(ratios),
            "anchors_equal_reference": bool(
                np.array_equal(np.asarray(got.anchors), np.asarray(want.anchors))
            ),
            "max_abs_completion_difference": float(
                np.max(np.abs(np.asarray(got.completed) - np.asarray(want.completed)))
            ),
        }
        rows.append(row)
        print(
            f"{commit:>12s}: median {row['median_s']:.3f} s, "
            f"{row['stream_queries_per_s']:,.0f} stream-queries/s, "
            f"{row['speedup_vs_reference']:.3f}x {reference} (median of rounds); "
            f"anchors equal: {row['anchors_equal_reference']}, max |completion "
            f"difference| {row['max_abs_completion_difference']:.2g}",
            flush=True,
        )
    payload = {
        "benchmark": "ab_commits",
        "meta": metadata(argv if argv is not None else sys.argv[1:]),
        "config": vars(args),
        "rows": rows,
    }
    write_json(payload, args.out)
    return payload


if __name__ == "__main__":
    main()
