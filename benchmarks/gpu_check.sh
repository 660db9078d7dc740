#!/usr/bin/env bash
# GPU check for earm_jax: correctness on the device, then the throughput sweeps.
#
# On a machine with an NVIDIA GPU and a CUDA build of JAX (pip install
# "jax[cuda12]"), from the repository root:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh
#
# 1. correctness on the device: float32 solver vs the float64 NumPy reference,
#    causality, run_batch == loop of run, the incremental solver's tests
#    (statistics == a recount, dense == gathered memory solves), the compiled
#    step's structure (while loops, no history copies) and the anchors ==
#    the argsort samplers (TF32 would fail the reference checks: the solver asks
#    for HIGHEST precision in its small matmuls);
# 2. throughput of jit(run_batch) vs S = 1 .. 4,096 with HLO op counts per
#    step (an A/B against an older commit: benchmarks/ab_commits.py);
# 3. throughput vs M = 5,000 / 20,000 / 100,000 memories at S = 256 (the
#    gathered memory-solve path takes over above M = 2 W K = 3,600);
# 4. latency of one donated step vs history t = 100 .. 10,000, and the bound
#    (FLOPs/bytes per step vs the device's ceilings).
# Whole script: under 8 minutes (each stage has its own timeout; a stage that
# times out leaves the stages before it intact). JSON results and logs go to
# $OUT when set (else benchmarks/results/).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

"$PY" - <<'PY' | tee "$OUT/gpu_device.txt"
import jax
print("backend:", jax.default_backend(), "devices:", jax.devices())
assert jax.default_backend() == "gpu", "no GPU visible to JAX: install jax[cuda12]"
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  local begin=$SECONDS
  timeout "$seconds" "$@" 2>&1 | tee "$OUT/gpu_$name.log"
  local rc=${PIPESTATUS[0]}
  echo "stage $name: rc=$rc in $((SECONDS - begin)) s" | tee -a "$OUT/gpu_stages.txt"
  [ "$rc" -eq 0 ] || status=1
}

# 1. correctness (mostly compilation).
stage tests 150 "$PY" -m pytest -q -x -p no:cacheprovider \
  tests/core/test_solver_reference.py tests/core/test_causality.py \
  tests/core/test_batch_and_compilation.py tests/core/test_incremental.py \
  tests/core/test_step_hlo.py tests/policies/test_anchors_exact.py

# 2. throughput vs S.
stage throughput_S 150 "$PY" benchmarks/bench_solver.py --preset gpu \
  --sections throughput --sweep-memories \
  --out "$OUT/solver_gpu_throughput_S.json"

# 3. throughput vs M (current step only).
stage throughput_M 90 "$PY" benchmarks/bench_solver.py --preset gpu \
  --sections throughput --solvers incremental --streams 1 \
  --sweep-memories 5000 20000 100000 --sweep-streams 256 \
  --out "$OUT/solver_gpu_throughput_M.json"

# 4. latency vs history and the bound.
stage latency 60 "$PY" benchmarks/bench_solver.py --preset gpu \
  --sections latency roofline --out "$OUT/solver_gpu_latency.json"

echo "gpu_check: status=$status, results in $OUT"
exit $status
