#!/usr/bin/env bash
# The one prepared GPU check (run on a machine with a CUDA device): builds with CUDA, runs the
# cuda-labelled tests and the GPU benchmarks, and writes JSON results to $OUT (default ./gpu-out).
# Keep it short: minutes, not more.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true

bash scripts/install-deps.sh > "$out/install.log" 2>&1
build_dir="${BUILD_DIR:-build/gpu}"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DJITEMBED_WITH_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
  -DJITEMBED_BUILD_TOOLS=OFF -DJITEMBED_BUILD_EXAMPLES=OFF > "$out/configure.log" 2>&1
targets=(test_cuda)
[ -f benchmarks/cuda/CMakeLists.txt ] && targets+=(bench_cuda)
[ -f tests/nccl/CMakeLists.txt ] && targets+=(test_nccl)  # NCCL communicator + cuBLAS GEMM (ctest label cuda)
[ -f benchmarks/parallel/bench_parallel.cpp ] && targets+=(bench_parallel)
cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}" > "$out/build.log" 2>&1

status=0
ctest --test-dir "$build_dir" -L cuda --output-on-failure --no-tests=error --output-junit "$out/cuda-tests.xml" \
  > "$out/cuda-tests.log" 2>&1 || status=$?
# A skipped CUDA test on a GPU machine is a failure of this check.
if grep -q "Skipped" "$out/cuda-tests.log"; then status=1; fi
if [ -x "$build_dir/benchmarks/cuda/bench_cuda" ]; then
  "$build_dir/benchmarks/cuda/bench_cuda" > "$out/bench_cuda.txt" 2>&1 || status=$?
  grep '^{' "$out/bench_cuda.txt" > "$out/bench_cuda.jsonl" || true
fi
if [ -x "$build_dir/benchmarks/parallel/bench_parallel" ]; then
  # NCCL algbw / busbw per collective and size (the world size it ran is in each row, "ranks"), then the
  # Gloo collectives and the TP MLP / Ulysses steps on this machine's CPUs.
  timeout 300 "$build_dir/benchmarks/parallel/bench_parallel" nccl gloo tp_mlp ulysses > "$out/bench_parallel.txt" 2>&1 || status=$?
  grep '^{' "$out/bench_parallel.txt" > "$out/bench_parallel.jsonl" || true
fi
if [ -x "$build_dir/tests/nccl/test_nccl" ]; then  # which NCCL world size the tests ran (ranks as threads)
  "$build_dir/tests/nccl/test_nccl" -tc='*all_reduce*' 2>&1 | grep "nccl world:" | tee "$out/nccl-world.txt" || true
fi
tail -n 5 "$out/cuda-tests.log"
[ -f "$out/bench_cuda.txt" ] && cat "$out/bench_cuda.txt"
[ -f "$out/bench_parallel.txt" ] && cat "$out/bench_parallel.txt"
exit $status
