"""Sharded run_batch over 4 (fake CPU) devices equals the unsharded one.

The check runs in a subprocess with ``--xla_force_host_platform_device_count=4``
so the device count never leaks into the other tests of this session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Slow: a subprocess with 4 forced CPU devices compiles run_batch; ~30-60 s.
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]  # where planted.py lives

SCRIPT = textwrap.dedent(
    """
    import functools, sys
    import jax, numpy as np
    sys.path.insert(0, TESTS_DIR)
    from planted import config_for, planted_stream
    import earm_jax as ej
    from earm_jax.core import sharding

    assert len(jax.devices()) == 4, jax.devices()
    streams = [planted_stream(s, num_memories=30, num_queries=8, pool_size=10,
                              noise=0.05)[0] for s in range(8)]
    batch = jax.tree.map(lambda *leaves: np.stack(leaves), *streams)
    keys = jax.random.split(jax.random.key(0), 8)
    config = config_for(streams[0], solver="incremental", refresh_rows=2)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=10))

    want = jax.jit(functools.partial(ej.run_batch, solver))(keys, batch)

    mesh = sharding.stream_mesh()
    placed_keys, placed = sharding.shard_streams((keys, batch), mesh)
    assert len(placed.scores.sharding.device_set) == 4
    got = sharding.sharded_run_batch(solver, mesh)(placed_keys, placed)

    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
        shards = a.addressable_shards
        assert len(shards) == 4, len(shards)
        assert len({s.device for s in shards}) == 4
        for s in shards:  # each device holds its 2 streams, nothing more
            assert s.data.shape == (2,) + a.shape[1:], (s.data.shape, a.shape)
    try:
        sharding.shard_streams(jax.tree.map(lambda x: x[:6], batch), mesh)
    except ValueError as error:
        assert "pad" in str(error)
    else:
        raise AssertionError("6 streams over 4 devices must be refused")
    print("SHARDING-OK")
    """
)


def test_sharded_run_batch_equals_unsharded_and_stays_local():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, "-c", f"TESTS_DIR = {str(TESTS)!r}\n" + SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=TESTS.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SHARDING-OK" in result.stdout
