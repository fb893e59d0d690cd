#!/usr/bin/env bash
# The demo: installs missing dependencies, builds, and runs the main example (the format tour: a real
# JPEG + MP4 clip + caption + token ids + bf16 tensor packed into a shard and read back zero-copy).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/install-deps.sh
build_dir="${BUILD_DIR:-build/release}"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [ -f "$build_dir/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir"
fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DJITEMBED_BUILD_EXAMPLES=ON
cmake --build "$build_dir" -j "${JOBS:-2}" --target format_tour
"$build_dir/examples/format_tour" "${@:-$build_dir/format_tour_out}"
