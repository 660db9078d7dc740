"""Whether this jaxlib's CPU LAPACK kernels hang when one loop step makes
two batched factorizations.

jaxlib's CPU Cholesky and triangular-solve kernels split a batch (a ``vmap``
over streams) across XLA's intra-op thread pool and wait for the pieces on
the pool thread that called them. In a hung run a debugger finds both pool
threads (2 on a 2-core machine) inside such a wait, with no thread left to
run the pieces: the program stops, all threads asleep. Whether it happens
depends on how the threads meet, so each case runs several times. A faster
form of ``best``'s embedding call order (one factorization per query, then
each round's answers added by the Woodbury identity) met this; the policies
as shipped make one such call per loop step.

Each case is a small ``lax.scan`` run in a child process with a time limit:

- ``two_choleskys``: two independent ``vmap``-ed Cholesky solves of 386 rows
  (a query's embedding features) in one scan step;
- ``two_choleskys_in_order``: the same, the second call's operand made to
  depend on the first call's result (``lax.optimization_barrier``), so that
  they cannot run at the same time;
- ``one_cholesky``: one of them (the control);
- ``two_wide_triangular_solves``: two independent ``vmap``-ed triangular
  solves with 200 right-hand sides (a pool's candidates);
- ``two_narrow_triangular_solves``: the same with 16 right-hand sides.

    python experiments/cpu_lapack_hang.py --out experiments/results/cpu_lapack_hang.json

Each case runs ``--repeats`` times; a run that does not finish within
``--timeout`` seconds (one that finishes takes 4-10 s) counts as hung.
Writes the JSON with the command, commit, versions and machine; ``XLA_FLAGS``
set by the caller reach the children.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from earm_jax.jobs.scripts import (  # noqa: E402
    print_table,
    script_metadata,
    write_script_json,
)

STREAMS = 7
FEATURES = 386
CASES = {
    # name: (kind, calls per step, right-hand sides, each call waits for the last)
    "two_choleskys": ("cholesky", 2, 1, False),
    "two_choleskys_in_order": ("cholesky", 2, 1, True),
    "one_cholesky": ("cholesky", 1, 1, False),
    "two_wide_triangular_solves": ("triangular", 2, 200, False),
    "two_narrow_triangular_solves": ("triangular", 2, 16, False),
}

CHILD = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.scipy.linalg import cho_factor, cho_solve, solve_triangular

kind = sys.argv[1]
calls, columns, steps, B, F, ordered = (int(value) for value in sys.argv[2:8])
rng = np.random.default_rng(0)

def spd():
    a = rng.normal(size=(B, F, F)).astype(np.float32)
    return a @ a.transpose(0, 2, 1) + F * np.eye(F, dtype=np.float32)

systems = [jnp.asarray(spd()) for _ in range(calls)]
factors = [jnp.asarray(np.linalg.cholesky(np.asarray(s))) for s in systems]
rhs = [
    jnp.asarray(rng.normal(size=(B, F, columns)).astype(np.float32))
    for _ in range(calls)
]

def solve(system, factor, right, c):
    # An elementwise pass over the operand first, as a policy step has: XLA
    # runs it in parallel, so the solve is then started from a pool thread.
    if kind == "cholesky":
        moved = system + jnp.tanh(system * c) * 1e-6
        return cho_solve(cho_factor(moved, lower=True), right)
    return solve_triangular(factor, jnp.tanh(right * (1.0 + c)), lower=True)

@jax.jit
def run(systems, factors, rhs):
    def step(c, _):
        outs = []
        for s, f, r in zip(systems, factors, rhs):
            if ordered and outs:
                # The operand now depends on the previous call's result, so
                # the two calls cannot be in flight at once.
                s, f, r, _ = jax.lax.optimization_barrier((s, f, r, outs[-1]))
            outs.append(jax.vmap(solve, (0, 0, 0, None))(s, f, r, c))
        return c + 1e-6 * sum(o.mean() for o in outs), None
    return jax.lax.scan(step, jnp.float32(0.0), None, length=steps)[0]

print(float(run(systems, factors, rhs)))
"""


def run_once(name: str, steps: int, timeout_s: float) -> tuple[str, float]:
    kind, calls, columns, ordered = CASES[name]
    numbers = (calls, columns, steps, STREAMS, FEATURES, int(ordered))
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, kind, *(str(n) for n in numbers)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(os.environ),
        )
    except subprocess.TimeoutExpired:
        outcome = "hung"
    else:
        outcome = "finished" if done.returncode == 0 else f"failed ({done.returncode})"
    return outcome, round(time.perf_counter() - started, 1)


def run_case(name: str, steps: int, timeout_s: float, repeats: int) -> dict:
    """The case ``repeats`` times: whether it hangs depends on how the threads
    meet, so one run proves a hang but not its absence."""
    kind, calls, columns, ordered = CASES[name]
    runs = [run_once(name, steps, timeout_s) for _ in range(repeats)]
    finished = [seconds for outcome, seconds in runs if outcome == "finished"]
    return {
        "kind": kind,
        "calls_per_step": calls,
        "each_call_waits_for_the_last": ordered,
        "right_hand_sides": columns,
        "runs": repeats,
        "hung": sum(outcome == "hung" for outcome, _ in runs),
        "failed": sum(outcome.startswith("failed") for outcome, _ in runs),
        "finished_seconds": finished,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=45.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    results = {
        name: run_case(name, args.steps, args.timeout, args.repeats)
        for name in args.cases.split(",")
    }
    print_table(
        [{"case": name, **row} for name, row in results.items()],
        ["case", "runs", "hung", "finished_seconds"],
        title=f"{STREAMS} streams, {FEATURES} features, {args.steps} scan steps, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
    )
    payload = {
        "settings": {
            "streams": STREAMS,
            "features": FEATURES,
            "steps": args.steps,
            "timeout_s": args.timeout,
            "repeats": args.repeats,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "cpu_count": os.cpu_count(),
        },
        "results": results,
        **script_metadata(),
    }
    written = write_script_json(payload, args.out)
    if written:
        print(f"wrote {written}")


if __name__ == "__main__":
    main()
