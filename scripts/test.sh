#!/usr/bin/env bash
# The test command: installs missing dependencies (install-deps set "test"), configures (Release, tests, tools, examples,
# benchmarks; CUDA whenever the toolkit is found), builds and runs ctest. Exit code is the result.
# Env: BUILD_DIR (default build/release), JOBS (default 2), CTEST_ARGS (extra ctest arguments).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

bash scripts/install-deps.sh test  # every CPU component, tools, tests, benchmarks, test peers, conan

build_dir="${BUILD_DIR:-build/release}"
jobs="${JOBS:-2}"
cuda_args=()
nvcc="$(command -v nvcc || true)"
if [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ]; then nvcc=/usr/local/cuda/bin/nvcc; fi
if [ -n "$nvcc" ]; then
  echo "test.sh: CUDA toolkit found ($nvcc): compiling the CUDA component and every .cu file"
  cuda_args=(-DJITEMBED_WITH_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc")
else
  echo "test.sh: no CUDA toolkit: the CUDA component is not built"
fi

# LibTorch for the torch component: the pinned PyTorch wheel install-deps put in .venv (its package directory,
# not torch.utils.cmake_prefix_path: cmake/FindTorch.cmake says why)
torch_args=()
torch_dir="$(.venv/bin/python -c "import importlib.util as u; print(u.find_spec('torch').submodule_search_locations[0])" 2>/dev/null || true)"
if [ -n "$torch_dir" ]; then
  torch_args=("-DCMAKE_PREFIX_PATH=$torch_dir" "-DJITEMBED_TORCH_PYTHON=$root/.venv/bin/python")
fi

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir"  # generator changed
fi

cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DJITEMBED_BUILD_TESTS=ON -DJITEMBED_BUILD_TOOLS=ON -DJITEMBED_BUILD_EXAMPLES=ON \
  -DJITEMBED_BUILD_BENCHMARKS=ON "${cuda_args[@]}" "${torch_args[@]}"
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$jobs" ${CTEST_ARGS:-}
