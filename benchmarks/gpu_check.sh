#!/usr/bin/env bash
# GPU check for earm_jax: correctness on the device, then the throughput sweep.
#
# On a machine with an NVIDIA GPU and a CUDA build of JAX (pip install
# "jax[cuda12]"), from the repository root:
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh
#
# 1. the correctness tests that matter on the device: float32 solver vs the
#    float64 NumPy reference, causality, run_batch == loop of run, the
#    incremental solver's tests (TF32 would fail the reference checks: the solver
#    asks for HIGHEST precision in its small matmuls);
# 2. bench_solver.py --preset gpu, throughput and latency and the bound (the
#    NumPy and Surprise sections stay on CPU-sized data and are skipped here).
# Whole script: under 8 minutes on one H200 (each stage has its own timeout).
# JSON results and logs go to $OUT when set (else benchmarks/results/).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/results}"
mkdir -p "$OUT"
PY="${PYTHON:-python}"
status=0

"$PY" - <<'PY' | tee "$OUT/gpu_device.txt"
import jax
print("backend:", jax.default_backend(), "devices:", jax.devices())
assert jax.default_backend() == "gpu", "no GPU visible to JAX: install jax[cuda12]"
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

# 1. correctness on the device (about 2-3 minutes, mostly compilation).
timeout 240 "$PY" -m pytest -q -x -p no:cacheprovider \
  tests/core/test_solver_reference.py tests/core/test_causality.py \
  tests/core/test_batch_and_compilation.py tests/core/test_incremental.py \
  2>&1 | tee "$OUT/gpu_tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# 2. throughput vs S (to 4096), latency vs history, FLOPs/bytes vs ceilings.
timeout 240 "$PY" benchmarks/bench_solver.py --preset gpu \
  --sections throughput latency roofline \
  --out "$OUT/solver_gpu.json" 2>&1 | tee "$OUT/gpu_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "gpu_check: status=$status, results in $OUT"
exit $status
