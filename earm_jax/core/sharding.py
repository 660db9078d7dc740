r"""Streams across devices: a 1-D mesh over the stream axis of ``run_batch``.

Streams are independent, so ``run_batch`` (a ``vmap`` over streams) splits
across devices with no communication at all: put each device's streams on it
and jit; XLA's sharding propagation keeps every intermediate and every output
on the device that holds the stream.

>>> import jax
>>> from earm_jax.core import sharding
>>> mesh = sharding.stream_mesh()            # all devices, axis "streams"
>>> mesh.axis_names
('streams',)

Typical use (``S`` divisible by the number of devices)::

    mesh = sharding.stream_mesh()
    run = sharding.sharded_run_batch(solver, mesh)   # jit with shardings
    states, infos = run(*sharding.shard_streams((keys, streams), mesh))

On one host, test with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(CPU devices). **Multi-host** (several processes, e.g. one per GPU node): call
``jax.distributed.initialize(coordinator_address, num_processes, process_id)``
first in every process; then ``jax.devices()`` is the global device list and
:func:`stream_mesh` spans all hosts. Each process builds only its own streams
(process ``i`` of ``P`` holds streams ``[i S / P, (i + 1) S / P)``) and
:func:`shard_streams` assembles the global arrays with
``jax.make_array_from_process_local_data``; outputs stay distributed, and
``jax.experimental.multihost_utils.process_allgather(x, tiled=True)`` brings
results to every host when needed (or read ``array.addressable_shards``
locally). ``examples/multihost_run_batch.py`` does all of this on CPU devices;
two processes of 2 devices each on one machine (``tests/core/test_multihost.py``
runs them and checks the scores against one process's ``run_batch``)::

    python examples/multihost_run_batch.py --coordinator 127.0.0.1:12345 \
        --num-processes 2 --process-id 0 --out summary.json &
    python examples/multihost_run_batch.py --coordinator 127.0.0.1:12345 \
        --num-processes 2 --process-id 1

On several hosts, start one such process per host: ``--coordinator`` is
``HOST:PORT`` of process 0's host (it listens there; the others must reach it),
the same on every host, as is ``--num-processes``; ``--process-id`` is 0 on that
host and 1, 2, ... on the others. CPU processes gather over gloo, JAX's default
CPU collectives (``jax_cpu_collectives_implementation``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from earm_jax.core.config import OnlineSolver
from earm_jax.core.run import STREAM_AXIS, run_batch


def stream_mesh(
    devices: Sequence[jax.Device] | None = None, axis_name: str = STREAM_AXIS
) -> Mesh:
    """A 1-D mesh over ``devices`` (default: all, across hosts) for the streams."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("stream_mesh needs at least one device")
    return Mesh(np.asarray(devices), (axis_name,))


def stream_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over the mesh's (only) axis; other axes whole."""
    if len(mesh.axis_names) != 1:
        raise ValueError(f"expected a 1-D mesh, got axes {mesh.axis_names}")
    return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))


def _check_divisible(tree: Any, mesh: Mesh) -> int:
    sizes = {np.shape(leaf)[0] for leaf in jax.tree.leaves(tree) if np.ndim(leaf)}
    if len(sizes) != 1:
        raise ValueError(
            f"every leaf needs the same leading stream axis, got sizes {sorted(sizes)}"
        )
    (size,) = sizes
    return size


def shard_streams(tree: Any, mesh: Mesh) -> Any:
    """Places every leaf of ``tree`` split along its leading (stream) axis.

    Args:
      tree: any pytree whose leaves share a leading axis ``S`` (keys, a
        :class:`~earm_jax.base.Stream`, states). In a multi-process run each
        process passes its own ``S / process_count`` streams.
      mesh: from :func:`stream_mesh`.

    Returns:
      The same tree of global ``jax.Array``\\ s, each device holding only its
      ``S / num_devices`` streams.

    Raises:
      ValueError: if ``S`` is not divisible by the devices (pad the batch, e.g.
        by repeating a stream, and drop the padding from the results).
    """
    sharding = stream_sharding(mesh)
    local = _check_divisible(tree, mesh)
    processes = jax.process_count()
    total = local * processes
    if total % mesh.size:
        raise ValueError(
            f"{total} streams do not split over {mesh.size} devices: pad to a "
            f"multiple of {mesh.size}"
        )
    if processes == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(
        lambda leaf: jax.make_array_from_process_local_data(sharding, leaf), tree
    )


def sharded_run_batch(
    solver: OnlineSolver, mesh: Mesh
) -> Callable[[jax.Array, Any], tuple[Any, Any]]:
    """``jit(run_batch)`` with inputs and outputs split over the stream axis.

    This is a driver (like a CLI): it jits, at the outermost scope. The result
    takes ``(keys, streams)`` already placed with :func:`shard_streams` (other
    placements are resharded on entry) and returns ``(states, infos)`` whose
    leaves stay split along ``S``: no device ever holds another's streams.
    """
    sharding = stream_sharding(mesh)
    return jax.jit(
        functools.partial(run_batch, solver),
        in_shardings=(sharding, sharding),
        out_shardings=sharding,
    )


__all__ = [
    "STREAM_AXIS",
    "shard_streams",
    "sharded_run_batch",
    "stream_mesh",
    "stream_sharding",
]
