"""``one_at_a_time_on_cpu``: its vmap equals the plain function's batch and a
loop, makes only unbatched LAPACK calls on CPU and keeps the batched call
elsewhere, and a loop step with two such calls finishes where the plain
batched calls can stop the program for good."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest
from jax.scipy.linalg import cho_factor, cho_solve

from earm_jax.core.one_at_a_time_on_cpu import one_at_a_time_on_cpu

CUSTOM_CALL = re.compile(r"custom_call @(\w+)\([^)]*\).*?: \(([^)]*)\)")


def _solve(system, right):
    return cho_solve(cho_factor(system, lower=True), right)


def _systems(batch: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(batch, size, size)).astype(np.float32)
    systems = a @ a.transpose(0, 2, 1) + size * np.eye(size, dtype=np.float32)
    return systems, rng.normal(size=(batch, size)).astype(np.float32)


def _lapack_operands(text: str, prefix: str) -> list[list[str]]:
    """The operand types of each custom call whose target starts with
    ``prefix``, e.g. ``["tensor<3x4x4xf32>"]``."""
    return [
        [t.strip() for t in match[2].split(",")]
        for match in CUSTOM_CALL.finditer(text)
        if match[1].startswith(prefix)
    ]


def test_vmap_equals_the_batched_function_and_a_loop():
    systems, right = _systems(5, 6)
    wrapped = one_at_a_time_on_cpu(_solve)
    batched = jax.jit(jax.vmap(wrapped))(systems, right)
    np.testing.assert_allclose(batched, jax.vmap(_solve)(systems, right), rtol=1e-6)
    for index in range(5):
        np.testing.assert_array_equal(
            batched[index], jax.jit(wrapped)(systems[index], right[index])
        )
    reference = np.linalg.solve(systems.astype(np.float64), right[..., None])[..., 0]
    np.testing.assert_allclose(batched, reference, rtol=1e-4, atol=1e-6)


def test_unbatched_arguments_and_nested_vmaps():
    systems, right = _systems(6, 4, seed=1)
    wrapped = one_at_a_time_on_cpu(_solve)
    # One system for every right-hand side, and a batch of batches.
    shared = jax.vmap(wrapped, (None, 0))(systems[0], right)
    np.testing.assert_allclose(
        shared, jax.vmap(_solve, (None, 0))(systems[0], right), rtol=1e-6
    )
    nested = jax.vmap(jax.vmap(wrapped))(
        systems.reshape(2, 3, 4, 4), right.reshape(2, 3, 4)
    )
    np.testing.assert_allclose(
        nested.reshape(6, 4), jax.vmap(_solve)(systems, right), rtol=1e-6
    )


def test_on_cpu_every_lapack_call_is_unbatched_and_elsewhere_batched():
    systems, right = _systems(3, 4)
    wrapped = jax.jit(jax.vmap(one_at_a_time_on_cpu(_solve)))
    cpu = _lapack_operands(wrapped.lower(systems, right).as_text(), "lapack_")
    plain = jax.jit(jax.vmap(_solve)).lower(systems, right).as_text()
    assert _lapack_operands(plain, "lapack_")[0] == ["tensor<3x4x4xf32>"]
    assert len(cpu) == 3  # the factorization and its two triangular solves
    assert all(operand.count("x") <= 2 for call in cpu for operand in call), cpu
    cuda = jax.export.export(wrapped, platforms=["cuda"])(systems, right)
    assert _lapack_operands(cuda.mlir_module(), "cusolver_") == [["tensor<3x4x4xf32>"]]


HANG_PRONE = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.scipy.linalg import cho_factor, cho_solve
    from earm_jax.core.one_at_a_time_on_cpu import one_at_a_time_on_cpu

    rng = np.random.default_rng(0)
    streams, size = 7, 386
    def spd():
        a = rng.normal(size=(streams, size, size)).astype(np.float32)
        eye = np.eye(size, dtype=np.float32)
        return jnp.asarray(a @ a.transpose(0, 2, 1) + size * eye)
    systems = [spd(), spd()]
    right = jnp.asarray(rng.normal(size=(streams, size)).astype(np.float32))

    @one_at_a_time_on_cpu
    def solve(system, right, c):
        # An elementwise pass first, as a policy step has, so that XLA starts
        # the solve from a pool thread.
        moved = system + jnp.tanh(system * c) * 1e-6
        return cho_solve(cho_factor(moved, lower=True), right)

    @jax.jit
    def run(systems, right):
        def step(c, _):
            outs = [jax.vmap(solve, (0, 0, None))(s, right, c) for s in systems]
            return c + 1e-6 * sum(o.mean() for o in outs), None
        return jax.lax.scan(step, jnp.float32(0.0), None, length=200)[0]

    print(float(run(systems, right)))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("attempt", [1, 2])
def test_two_batched_factorizations_in_one_loop_step_finish(attempt):
    """Two vmap-ed Cholesky solves of 386 rows for 7 streams in each step of a
    200-step scan: with jaxlib's batched CPU kernels 3 of 4 such runs stopped
    for good (experiments/cpu_lapack_hang.py); through the wrapper each
    finishes in seconds. A run that stops fails this test by its time limit."""
    done = subprocess.run(
        [sys.executable, "-c", HANG_PRONE],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.isfinite(float(done.stdout.strip()))
