#!/usr/bin/env bash
# One call on a GPU machine: environment, kernel compile checks, the GPU test suite, the
# compute-sanitizer memcheck and racecheck runs over a subset of it, and the GPU benchmark,
# with every log under $OUT (8 files at most come back).
# Usage: benchmarks/gpu_session.sh [tests|bench|all]
#
# The GPU image has CuPy, PyTorch, numpy, scipy and pytest but not SQLAlchemy or platformdirs;
# bring them as wheels (on the machine with network, from the repository root):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl sqlalchemy greenlet platformdirs typing_extensions
# and name .whl in the device tool's `carry`.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PWD"
fi
export CONVTUNE_DB_URL="sqlite:///$OUT/convtune.db"
{
    date -u; nvidia-smi; nvcc --version
    python3 -c "import cupy, numpy, torch; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} > "$OUT/env.log" 2>&1
rc=0
if [[ $what == tests || $what == all ]]; then
    python3 -m pytest -q -p no:cacheprovider tests/test_kernels_compile.py tests/test_cuda_host_checks.py tests/gpu \
        > "$OUT/gpu_tests.log" 2>&1 || rc=$?
    tail -n 30 "$OUT/gpu_tests.log"
    # Small shapes only: the sanitizers slow kernels down by 10-100x.
    subset=(-k "odd or groups4 or dilation_stride or depthwise_s2 or element_aligned")
    for tool in memcheck racecheck; do
        compute-sanitizer --tool "$tool" --error-exitcode 99 python3 -m pytest -q -x \
            -p no:cacheprovider tests/gpu/test_cuda_algorithms.py "${subset[@]}" \
            > "$OUT/$tool.log" 2>&1 || rc=$?
        tail -n 5 "$OUT/$tool.log"
    done
fi
if [[ $what == bench || $what == all ]]; then
    python3 benchmarks/bench_gpu.py --out "$OUT/bench_gpu.json" > "$OUT/bench_gpu.md" 2> "$OUT/bench_gpu.err" || rc=$?
    cat "$OUT/bench_gpu.md"; tail -n 20 "$OUT/bench_gpu.err"
fi
exit $rc
