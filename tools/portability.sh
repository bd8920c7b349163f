#!/usr/bin/env bash
# Run the test suite (or a pytest selection) as on an older x86-64 CPU: NumPy's AVX-512 kernels
# off and OpenBLAS on its Haswell (AVX2) kernels, after printing what the machine and the libraries
# report. A bound that holds only on one kernel set fails here (issue 34: two tests passed on
# AVX2 and failed with AVX-512). docs/contributing.md, "Tolerances".
#
#   tools/portability.sh                       # the README's test command, under the emulation
#   tools/portability.sh tests/solvers/test_geodesics.py -k clairaut -q
#   PYTHON=/path/to/python tools/portability.sh ...   (default: python3, or the venv's)
#   tools/portability.sh --native ...          # the same report and run without the emulation
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python3)}
native=0
if [[ "${1:-}" == "--native" ]]; then native=1; shift; fi
if [[ $native == 0 ]]; then
  export NPY_DISABLE_CPU_FEATURES="AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL"
  export OPENBLAS_CORETYPE=Haswell
fi
echo "== CPU"
if [[ -r /proc/cpuinfo ]]; then
  grep -m1 "model name" /proc/cpuinfo || true
  echo "flags (SIMD): $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(sse4_2|avx|avx2|fma|avx512[a-z_0-9]*)$' | tr '\n' ' ')"
else
  "$PYTHON" -c "import platform; print(platform.processor() or platform.machine())"
fi
echo "== environment: NPY_DISABLE_CPU_FEATURES=${NPY_DISABLE_CPU_FEATURES:-<unset>} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
"$PYTHON" - <<'PY'
import numpy as np
from numpy._core._multiarray_umath import __cpu_baseline__, __cpu_dispatch__, __cpu_features__
print("== NumPy", np.__version__)
print("baseline:", " ".join(__cpu_baseline__))
print("dispatched (used):", " ".join(f for f in __cpu_dispatch__ if __cpu_features__.get(f)))
print("dispatched (off or absent):", " ".join(f for f in __cpu_dispatch__ if not __cpu_features__.get(f)) or "-")
try:
    from threadpoolctl import threadpool_info
except ImportError:
    print("== BLAS: threadpoolctl not installed")
else:
    for lib in threadpool_info():
        print(f"== {lib.get('internal_api')} {lib.get('version')}: core type {lib.get('architecture')}, "
              f"{lib.get('num_threads')} threads ({lib.get('filepath')})")
PY
if [[ $# -eq 0 ]]; then echo "== pytest -n 2 (the README command)"; else echo "== pytest $*"; fi
if [[ $# -eq 0 ]]; then
  exec "$PYTHON" -m pytest -n 2
fi
exec "$PYTHON" -m pytest "$@"
