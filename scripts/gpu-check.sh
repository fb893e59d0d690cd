#!/usr/bin/env bash
# The one prepared GPU check. GPU minutes are spent on running only:
#   scripts/gpu-check.sh build   on the CPU machine (CUDA toolkit, no GPU needed): configures BUILD_DIR
#                                (default build/gpu) for CUDA_ARCH (default 90: H100/H200), builds the cuda
#                                tests and the GPU benchmarks, and packs them with the non-CUDA shared
#                                libraries they need into build/gpu-carry/gpu-check.tar.xz (checked ≤ 64 MiB),
#                                with examples/hybrid_parallel (run with --device cuda: 4 ranks on one GPU)
#   scripts/gpu-check.sh run     on the GPU machine, from build/gpu-carry (device tool: carry
#                                ["build/gpu-carry"]): runs the cuda tests and the GPU benchmarks, JSON to
#                                $OUT (default ./gpu-out), each step under a timeout, all within 8 minutes;
#                                with cuDNN's attention at S 65,536 (bench_parallel sdpa) against PyTorch's
#                                scaled_dot_product_attention (benchmarks/parallel/sdpa_torch.py, the GPU
#                                machine's python3 with PyTorch)
#   scripts/gpu-check.sh         both, on one machine that has a GPU and the build dependencies
# It exits non-zero when a build, a test (a CUDA test skipped on a GPU machine counts as failed) or a
# benchmark fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mode="${1:-all}"
build_dir="${BUILD_DIR:-build/gpu}"
carry="$root/build/gpu-carry"
bins=(tests/cuda/test_cuda tests/nccl/test_nccl tests/nccl/test_parallel_cuda benchmarks/cuda/bench_cuda
      benchmarks/parallel/bench_parallel examples/hybrid_parallel)

do_build() {
  local log="$carry/build.log"
  rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib"
  echo "configure + build $build_dir (sm_${CUDA_ARCH:-90}); log: $log"
  # no torch component: none of these targets links it, and the GPU machine has no PyTorch wheel
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DJITEMBED_WITH_CUDA=ON -DJITEMBED_WITH_TORCH=OFF \
    -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" \
    -DJITEMBED_BUILD_TESTS=ON -DJITEMBED_BUILD_BENCHMARKS=ON -DJITEMBED_BUILD_TOOLS=OFF -DJITEMBED_BUILD_EXAMPLES=ON \
    > "$log" 2>&1
  cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target test_cuda test_nccl test_parallel_cuda bench_cuda bench_parallel hybrid_parallel \
    >> "$log" 2>&1 || { tail -n 30 "$log"; return 1; }
  for b in "${bins[@]}"; do cp "$build_dir/$b" "$carry/bin/"; done
  # Shared libraries the GPU machine may lack: everything but glibc, the C++ runtime and CUDA's own
  # (cudart, cuBLAS, NCCL, cuDNN, NVRTC come from that machine's toolkit / Python wheels: PyTorch's
  # nvidia-cudnn-cu13 and nvidia-cu13; cuDNN alone is ~1 GiB, far over the carry).
  for b in "$carry"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*.so*|libnccl.so*|libcudnn*.so*|libnvrtc*.so*) ;;
      *) cp -L "$lib" "$carry/lib/" ;;
    esac
  done
  # xz, not gzip: test_cuda links the server, hence FFmpeg and its codecs (about 200 MiB unpacked; gzip
  # gave 78 MiB, xz -9 56 MiB). The repository's tracked files travel too, within the same 64 MiB.
  tar -C "$carry" -cf - bin lib | xz -9 -T "${JOBS:-$(nproc)}" > "$carry/gpu-check.tar.xz"
  rm -rf "$carry/bin" "$carry/lib"
  local size repo
  size=$(stat -c %s "$carry/gpu-check.tar.xz")
  repo=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
  echo "packed $carry/gpu-check.tar.xz: $((size / 1048576)) MiB (+ $((repo / 1048576)) MiB of tracked files)"
  [ $((size + repo)) -le $((63 * 1048576)) ] || { echo "over the 64 MiB carry limit (with the repo)"; return 1; }
}

# Runs "$@" under `timeout`, output to $out/<name>.txt; the JSON lines (benchmarks) to <name>.jsonl.
step() {
  local name="$1" secs="$2"
  shift 2
  local rc=0
  echo "== $name (≤ ${secs} s)"
  timeout "$secs" "$@" > "$out/$name.txt" 2>&1 || rc=$?
  grep '^{' "$out/$name.txt" > "$out/$name.jsonl" 2>/dev/null || rm -f "$out/$name.jsonl"
  tail -n 4 "$out/$name.txt"
  if [ "$rc" -ne 0 ]; then echo "$name: exit $rc"; status=1; fi
  if grep -q "no CUDA device" "$out/$name.txt"; then echo "$name: skipped on a GPU machine"; status=1; fi
}

do_run() {
  out="${OUT:-$root/gpu-out}"
  mkdir -p "$out"
  status=0
  local dir=/tmp/jitembed-gpu-check
  rm -rf "$dir" && mkdir -p "$dir"
  # (Python's tarfile where tar cannot run xz)
  tar -C "$dir" -xJf "$carry/gpu-check.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$carry/gpu-check.tar.xz" "$dir"
  # cudart / cuBLAS / NCCL / cuDNN / NVRTC: the toolkit's, then the Python wheels' of the GPU machine
  # (nvidia/*/lib: cudnn/lib is nvidia-cudnn-cu13's, cu13/lib holds cudart, cuBLAS and NVRTC).
  local libs="$dir/lib"
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && libs="$libs:$d"
  done
  local site
  site="$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null || true)"
  if [ -n "$site" ]; then
    for d in "$site"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  fi
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
  for b in "$dir"/bin/*; do
    if ldd "$b" | grep -q "not found"; then echo "$(basename "$b"): missing libraries"; ldd "$b" | grep "not found"; status=1; fi
  done
  local bin="$dir/bin"
  step cuda-tests 60 "$bin/test_cuda"
  step nccl-tests 90 "$bin/test_nccl"
  # (with cuDNN's SDPA tests: ~20 graphs built, some by NVRTC at run time)
  step parallel-cuda-tests 130 "$bin/test_parallel_cuda"
  step bench_cuda 40 "$bin/bench_cuda"
  step hybrid_parallel 30 "$bin/hybrid_parallel" --device cuda --llm-ranks 0,1,2,3
  step bench_parallel 140 "$bin/bench_parallel" --device cuda gemm tp_mlp ulysses nccl
  # attention at S 65,536, bf16, D 80: cuDNN's tokens/s and peak device memory (≤ 1 GiB), then PyTorch's
  # at the same shapes and the ratio (target ≥ 0.9×)
  step bench_sdpa 45 "$bin/bench_parallel" --device cuda sdpa
  if command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
    step sdpa_torch 60 python3 "$root/benchmarks/parallel/sdpa_torch.py" --compare "$out/bench_sdpa.jsonl"
  else
    echo "sdpa_torch: no python3 with PyTorch here: the comparison is missing"; status=1
  fi
  grep -h "nccl world:" "$out/nccl-tests.txt" > "$out/nccl-world.txt" 2>/dev/null || true
  echo "gpu-check: $([ "$status" -eq 0 ] && echo OK || echo FAILED); results in $out"
  return "$status"
}

case "$mode" in
  build) do_build ;;
  run) do_run ;;
  all) do_build && do_run ;;
  *) echo "usage: scripts/gpu-check.sh [build|run]" >&2; exit 2 ;;
esac
