#!/usr/bin/env bash
# The test command: installs missing dependencies (install-deps set "test"), configures (Release, tests, tools, examples,
# benchmarks; CUDA whenever the toolkit is found), builds and runs ctest. Exit code is the result.
# Env: BUILD_DIR (default build/release), JOBS (default 2), CTEST_ARGS (extra ctest arguments).
# Prints the time of each phase (install, configure, build, export, ctest) at the end, also when one fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

phases=()
phase_start=$(date +%s)
phase_done() {  # phase_done NAME: the time since the previous phase ended
  local now
  now=$(date +%s)
  phases+=("$1 $((now - phase_start)) s")
  phase_start=$now
}
report_phases() {
  local rc=$? p
  echo "test.sh phases (exit $rc):"
  for p in "${phases[@]}"; do echo "  $p"; done
}
trap report_phases EXIT

bash scripts/install-deps.sh test  # every CPU component, tools, tests, benchmarks, test peers, conan
phase_done install

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
phase_done configure
cmake --build "$build_dir" -j "$jobs"
phase_done build
# The model export (scripts/export_models.py, ~3 min, cached by a stamp) is the fixture of the models label:
# run it first so that its time is reported apart; the full run below finds it done.
if ctest --test-dir "$build_dir" -N -R '^models/export$' | grep -q 'models/export'; then
  # not fatal here: a failed export fails again, with its dependents, in the full run below
  ctest --test-dir "$build_dir" --output-on-failure -R '^models/export$' || echo "test.sh: the model export failed"
  phase_done export
fi
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error -j "$jobs" ${CTEST_ARGS:-}
phase_done ctest
