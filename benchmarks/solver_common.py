"""What the solver benchmark's sections share: the config and streams of a
run, the compiled ``run_batch`` and its HLO counts (``bench_solver.py``)."""

from __future__ import annotations

import contextlib
import functools
import re
import time

import jax

import earm_jax as ej
from earm_jax.core import entry_log
from earm_jax.eval.simulate import SimConfig, make_streams

# The current incremental step with ``run_batch(..., streams_per_chunk=C)``
# (``--streams-per-chunk C``): a throughput row at every S above C.
CHUNKED = "incremental_chunked"


# The history layout of the current incremental solver (``--layout``): ``rows``
# (``[Q, K]`` rows) or ``log`` (an entry log sized for the schedule, see
# ``earm_jax.core.entry_log``), and ``--block-entries`` for the log.
LAYOUT = {"layout": "rows", "block_entries": 0}


def solver_config(
    name: str,
    memories: int,
    pool: int,
    rank: int,
    capacity: int,
    budget=None,
    **extra,
) -> ej.SolverConfig:
    """The benchmark's config; ``budget`` (query index -> budget) sizes the log."""
    if name == "incremental" and LAYOUT["layout"] == "log":
        budget = budget or ej.paper_policy(pool_size=pool).budget
        extra = {
            "entry_capacity": entry_log.entries_needed(budget, capacity, pool),
            "block_entries": LAYOUT["block_entries"],
            **extra,
        }
    return ej.SolverConfig(
        num_memories=memories,
        capacity=capacity,
        pool_size=pool,
        max_budget=pool,
        rank=rank,
        solver=name,
        **extra,
    )


def simulated(seed: int, memories: int, pool: int, queries: int, streams: int):
    sim = SimConfig(num_memories=memories, num_queries=queries, pool_size=pool)
    data = jax.jit(make_streams, static_argnums=(1, 2))(
        jax.random.key(seed), sim, streams
    )
    return jax.block_until_ready(data)


def paper_policy_for(name: str, pool: int) -> ej.Policy:
    """The paper policy (every solver runs the same one)."""
    del name
    return ej.paper_policy(pool_size=pool)


def tracing(name: str):
    """Context for lowering ``name`` (none is needed today)."""
    del name
    return contextlib.nullcontext()


def hlo_ops(compiled) -> dict:
    """Operation counts of a compiled program (XLA's optimised HLO text).

    ``fusions`` and ``custom_calls`` approximate kernels per call on a GPU;
    ``while_loops`` are loops (each iteration a launch and a predicate);
    ``instructions`` counts every HLO instruction, loop bodies once.
    """
    text = compiled.as_text()
    lines = [line for line in text.splitlines() if " = " in line]
    return {
        "instructions": len(lines),
        "fusions": sum(1 for line in lines if re.search(r"\sfusion\(", line)),
        "while_loops": len(re.findall(r"\swhile\(", text)),
        "custom_calls": len(re.findall(r"\scustom-call\(", text)),
        "copies": len(re.findall(r"\scopy\(", text)),
    }


def compiled_run_batch(
    solver, keys, streams, streams_per_chunk: int | None = None
) -> tuple[object, float]:
    start = time.perf_counter()
    with tracing(solver.config.solver):
        run = functools.partial(
            ej.run_batch, solver, streams_per_chunk=streams_per_chunk
        )
        fn = jax.jit(run).lower(keys, streams)
    fn = fn.compile()
    return fn, time.perf_counter() - start


def block(out):
    """``out`` once it is computed (``jax.block_until_ready``)."""
    return jax.block_until_ready(out)
