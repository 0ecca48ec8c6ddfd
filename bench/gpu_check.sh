#!/usr/bin/env bash
# The GPU check of docs/torch-versions.md#gpu, run from the repository root on a machine with a
# CUDA GPU whose python3 holds torch: the `cuda` tests (each AOTInductor case in a process of its
# own, so a crash inside torch's loader names its case), the golden file saved on the GPU, and,
# at the same time on the CPU cores, the default test run. With no package registry there, the
# test requirements of that torch line travel as wheels in .whl/ (docs/torch-versions.md#gpu).
# Logs and the golden files go to $OUT (default gpu-check-out/).
set -uo pipefail
OUT=${OUT:-gpu-check-out}
PY=${PY:-python3}
# AOTInductor builds its library with $CXX. The lent H200 image (torch 2.11, 2026-11-26) sets
# CXX=/opt/gcc/bin/g++, a wrapper whose libraries crash torch's loader even for a one-layer CPU
# program (bench/probes/aoti_gpu_probe.py); the system g++ of the same release builds ones that load.
# AOTI_CXX picks another; the probe's log in $OUT says which toolchain was used.
export CXX=${AOTI_CXX:-$(command -v g++ || echo "${CXX:-g++}")}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/gpu-site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PYTEST=("$PY" -m pytest -p no:cacheprovider -p no:benchmark -rfEs)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name())"
} 2>&1 | tee "$OUT/machine.txt"

gpu_tests() {
  "$PY" tests/golden/make_cuda_golden.py "$OUT"
  "${PYTEST[@]}" -v -m cuda tests/e2e/test_cuda.py tests/unit/test_decomp_custom_triton_ops.py -k "not aoti"
  for name in tv_resnet18 hf_gpt2; do
    for exporter in graphcap torch.export; do
      "${PYTEST[@]}" -v -m cuda "tests/e2e/test_cuda.py::test_aoti_compiles_a_cuda_program[$name-$exporter]"
      echo "exit $? for aoti $name $exporter"
    done
  done
  # Last: the toolchain probe only says why AOTInductor fails when the cases above fail; its CPU
  # compile can outlast the time left while the default run holds the cores (2026-11-26 evening).
  "$PY" bench/probes/aoti_gpu_probe.py "$OUT" > /dev/null
}
timeout "${GPU_TESTS_S:-330}" bash -c "$(declare -f gpu_tests); $(declare -p PY PYTEST OUT); gpu_tests" \
  > "$OUT/cuda_tests.log" 2>&1 &
timeout "${DEFAULT_RUN_S:-330}" "${PYTEST[@]}" -v -n "${JOBS:-12}" --dist loadfile -m "not slow and not cuda" \
  > "$OUT/default_run.log" 2>&1
wait
grep -h "^=== \|^--- exit\|max diff" "$OUT/aoti_probe.log" 2>/dev/null
grep -h "FAILED\|ERROR\|passed\|failed\|^exit" "$OUT/cuda_tests.log" "$OUT/default_run.log" | tail -60
