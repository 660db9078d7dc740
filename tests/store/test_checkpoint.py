"""Atomic checkpoints of any solver state, restored into a template's structure."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import earm_jax as ej
from earm_jax.store.checkpoint import atomic_write, load_pytree, save_pytree

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def _state(solver_name: str, num_memories: int = 30):
    config = ej.SolverConfig(
        num_memories=num_memories,
        capacity=5,
        pool_size=8,
        max_budget=8,
        rank=2,
        solver=solver_name,
    )
    solver = ej.online_solver(config, ej.paper_policy(pool_size=8))
    state = solver.init(jax.random.key(0))
    query = ej.Query(
        jnp.arange(8, dtype=jnp.int32), jnp.linspace(1, 0, 8), jnp.ones(8, bool)
    )
    anchors = solver.select(jax.random.key(1), state, query)
    state, _ = solver.observe(state, query, ej.Observation(jnp.full(8, 0.7), anchors))
    return solver, state


@pytest.mark.parametrize("solver_name", sorted(ej.SOLVERS))
def test_every_registered_solver_state_round_trips(tmp_path, solver_name):
    solver, state = _state(solver_name)
    path = tmp_path / "state.npz"
    save_pytree(path, state)
    restored = load_pytree(path, solver.init(jax.random.key(9)))
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for got, want in zip(
        jax.tree.leaves(restored), jax.tree.leaves(state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_a_checkpoint_of_other_shapes_is_refused_naming_the_file_and_leaf(tmp_path):
    _, state = _state("incremental", num_memories=30)
    other, _ = _state("incremental", num_memories=40)
    path = tmp_path / "state.npz"
    save_pytree(path, state)
    with pytest.raises(ValueError, match=r"state\.npz: leaf \.memory_bias has shape"):
        load_pytree(path, other.init(jax.random.key(0)))


def test_a_checkpoint_of_another_solver_is_refused(tmp_path):
    _, state = _state("als")
    incremental, _ = _state("incremental")
    path = tmp_path / "state.npz"
    save_pytree(path, state)
    with pytest.raises(ValueError, match="state.npz: checkpoint leaves do not match"):
        load_pytree(path, incremental.init(jax.random.key(0)))


def test_a_corrupt_checkpoint_names_the_file(tmp_path):
    path = tmp_path / "state.npz"
    path.write_bytes(b"not a zip file")
    solver, _ = _state("als")
    with pytest.raises(ValueError, match="state.npz: not a readable checkpoint"):
        load_pytree(path, solver.init(jax.random.key(0)))


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "file.txt"
    path.write_text("old")

    def failing(temporary: str) -> None:
        with open(temporary, "w") as handle:
            handle.write("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, failing)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]
