"""Sharded ``run_batch`` over several processes (``jax.distributed``), on CPUs.

Two processes on one machine, 2 CPU devices each (4 devices in all); start both,
in any order, with the same coordinator address and stream count:

    python examples/multihost_run_batch.py --coordinator 127.0.0.1:12345 \
        --num-processes 2 --process-id 0 --out summary.json &
    python examples/multihost_run_batch.py --coordinator 127.0.0.1:12345 \
        --num-processes 2 --process-id 1

On several hosts, run one process per host with ``--coordinator`` set to an
address of the host of process 0 that the others can reach (process 0 listens
there), the same ``--num-processes``, and ``--process-id`` 0, 1, ... . Process
``i`` of ``N`` holds streams ``[i * S / N, (i + 1) * S / N)`` of the ``S``
(``--streams``) streams: it places them on its own devices with
``sharding.shard_streams``, runs ``sharding.sharded_run_batch`` over the mesh
of every process's devices, and gathers the mixed scores to every host
(``process_allgather``; CPU processes exchange them over gloo, JAX's default
cross-process collectives on CPU). Every process prints one JSON line: what it
saw (process count, devices) and a summary of all streams (Mixed Recall@10 per
stream, a checksum of ``infos.scores``). Process 0 also writes that summary to
``--out`` and the whole ``infos.scores`` array (``float32[S, T, N]``) beside it
(``summary.json`` -> ``summary.scores.npy``).

The streams are simulated (:mod:`earm_jax.eval.simulate`, stream ``s`` drawn
from ``fold_in(key(0), s)``) and the keys are ``split(key(1), S)``: the
single-process ``earm_jax.run_batch`` on the same streams and keys gives the
same scores (``tests/core/test_multihost.py`` checks it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej
from earm_jax.eval.compare import usable_mask
from earm_jax.eval.metrics import ranking_metrics
from earm_jax.eval.simulate import SimConfig, make_streams

# A small problem: CPU-sized, still the paper's policy and the incremental solver.
SIM = SimConfig(num_memories=200, num_queries=20, pool_size=32)
RANK = 4
STREAM_SEED, KEY_SEED = 0, 1


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (exit status 2)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _coordinator(text: str) -> str:
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {port!r}")
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = _Parser(
        prog="multihost_run_batch.py",
        description="Sharded earm_jax run_batch over processes (jax.distributed).",
    )
    parser.add_argument(
        "--coordinator",
        type=_coordinator,
        required=True,
        metavar="HOST:PORT",
        help="address of process 0's coordinator service (the same in every process)",
    )
    parser.add_argument("--num-processes", type=_positive_int, required=True)
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument(
        "--streams", type=_positive_int, default=8, help="global stream count S"
    )
    parser.add_argument(
        "--local-devices",
        type=_positive_int,
        default=2,
        help="CPU devices of this process",
    )
    parser.add_argument(
        "--out", type=Path, help="process 0: JSON summary here, scores beside it"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.process_id < args.num_processes:
        parser.error(
            f"argument --process-id: must be in 0..{args.num_processes - 1} "
            f"(--num-processes {args.num_processes}), got {args.process_id}"
        )
    devices = args.num_processes * args.local_devices
    if args.streams % devices:
        parser.error(
            f"argument --streams: {args.streams} streams do not split over "
            f"{devices} devices (--num-processes x --local-devices): use a multiple "
            f"of {devices}"
        )
    return args


def simulated_problem(num_streams: int):
    """The solver, the ``S`` streams and their keys (the same in every process)."""
    streams = jax.jit(make_streams, static_argnums=(1, 2))(
        jax.random.key(STREAM_SEED), SIM, num_streams
    )
    keys = jax.random.split(jax.random.key(KEY_SEED), num_streams)
    solver = ej.compose_solver(
        model=ej.LowRankModel(num_memories=SIM.num_memories, rank=RANK),
        history=ej.RowHistory(capacity=SIM.num_queries, pool_size=SIM.pool_size),
        algorithm=ej.incremental(),
        policy=ej.paper_policy(pool_size=SIM.pool_size),
    )
    return solver, keys, streams


def mixed_recall_at_10(scores: np.ndarray, streams: ej.Stream) -> list[float]:
    """Per-stream Mixed Recall@10, averaged over the queries with a relevant one."""
    metrics = jax.jit(
        jax.vmap(
            lambda s, stream: ranking_metrics(
                s,
                stream.relevant,
                k=10,
                where=usable_mask(stream),
                num_relevant=stream.num_relevant,
            )
        )
    )(jnp.asarray(scores), streams)
    recall = np.asarray(metrics.recall)
    counted = np.asarray(metrics.has_relevant)
    return [
        round(float(r[c].mean()), 6) if c.any() else float("nan")
        for r, c in zip(recall, counted, strict=True)
    ]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    # Before any JAX computation: the CPU backend is created once, with these.
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", args.local_devices)
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        cluster_detection_method="deactivate",  # only what the arguments say
    )
    try:
        summary = run(args)
    finally:
        jax.distributed.shutdown()
    return summary


def run(args: argparse.Namespace) -> dict:
    from jax.experimental import multihost_utils

    from earm_jax.core import sharding

    process, processes = jax.process_index(), jax.process_count()
    solver, keys, streams = simulated_problem(args.streams)
    # This process's contiguous slice; a real job would load only these.
    per_process = args.streams // processes
    mine = slice(process * per_process, (process + 1) * per_process)
    local_keys, local_streams = jax.tree.map(lambda x: x[mine], (keys, streams))

    mesh = sharding.stream_mesh()  # every process's devices
    placed = sharding.shard_streams((local_keys, local_streams), mesh)
    _, infos = sharding.sharded_run_batch(solver, mesh)(*placed)

    # Each local device holds exactly its S / devices streams, in stream order.
    per_device = args.streams // len(jax.devices())
    for shard in infos.scores.addressable_shards:
        assert shard.data.shape[0] == per_device, shard.data.shape
    scores = np.asarray(multihost_utils.process_allgather(infos.scores, tiled=True))
    local_devices = multihost_utils.process_allgather(
        np.int32(jax.local_device_count())
    )
    finite = np.isfinite(scores)
    summary = {
        "process_id": process,
        "process_count": processes,
        "global_devices": len(jax.devices()),
        "local_devices": jax.local_device_count(),
        "devices_per_process": [int(d) for d in np.ravel(local_devices)],
        "streams": args.streams,
        "local_streams": [mine.start, mine.stop],
        "scores_shape": list(scores.shape),
        "scores_checksum": float(scores[finite].astype(np.float64).sum()),
        "scores_sha256": hashlib.sha256(scores.tobytes()).hexdigest(),
        "mixed_recall_at_10": mixed_recall_at_10(scores, streams),
    }
    if process == 0 and args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        scores_file = args.out.with_suffix(".scores.npy")
        np.save(scores_file, scores)
        summary["scores_file"] = str(scores_file)
        args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary), flush=True)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
