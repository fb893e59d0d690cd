#!/usr/bin/env bash
# ctest packaging/conan: `conan create` of packaging/conan with its test_package, offline (-nr: no remote;
# every requirement is a platform requirement of system.profile, i.e. the system's package), in a copy of
# the recipe's sources under WORK_DIR with CONAN_HOME inside it. Then the options: an invalid combination
# is refused, and turning the video-using components off takes FFmpeg out of the graph.
# Usage: ctest.sh <source dir> <work dir>. Exit 77 (skip) when .venv has no conan, except in CI.
set -euo pipefail
src="$1"
work="$2"
conan="$src/.venv/bin/conan"
if [ ! -x "$conan" ]; then
  echo "packaging/conan: no $conan (bash scripts/install-deps.sh test installs it)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  exit 77
fi
rm -rf "$work"
mkdir -p "$work/tree/packaging"
cp -r "$src/CMakeLists.txt" "$src/LICENSE" "$src/cmake" "$src/include" "$work/tree/"
cp -r "$src/packaging/conan" "$work/tree/packaging/"
rm -rf "$work/tree/packaging/conan/test_package/build" "$work/tree/packaging/conan/test_package/CMakeUserPresets.json"
export CONAN_HOME="$work/home"
"$conan" profile detect --force >/dev/null 2>&1
cd "$work/tree/packaging/conan"
profiles=(-pr:h=default -pr:h=system.profile -pr:b=default)

"$conan" create . "${profiles[@]}" --build=missing -nr 2>&1 | tee "$work/create.log" | tail -25
grep -q "test_package: jpeg" "$work/create.log" || { echo "packaging/conan: test_package did not run"; exit 1; }

# an option that needs another one that is off is refused
"$conan" graph info . "${profiles[@]}" -nr -o "&:with_video=False" > "$work/invalid.log" 2>&1 || true
if ! grep -q "with_models_video=True needs with_video=True" "$work/invalid.log"; then
  echo "packaging/conan: with_video=False without with_models_video=False was not refused:"; cat "$work/invalid.log"; exit 1
fi
# without the components that use FFmpeg, FFmpeg is not a requirement
"$conan" graph info . "${profiles[@]}" -nr --format=json -o "&:with_video=False" -o "&:with_models_video=False" \
  -o "&:with_server=False" -o "&:with_repository=False" -o "&:with_client=False" \
  -o "&:with_loader=False" > "$work/novideo.json" 2> "$work/novideo.log"
if grep -q '"ffmpeg/' "$work/novideo.json" || ! grep -q '"zstd/' "$work/novideo.json"; then
  echo "packaging/conan: with_video=False still requires ffmpeg (or zstd is gone)"; exit 1
fi
echo "packaging/conan: conan create + test_package passed offline; options refuse a broken closure and drop FFmpeg without video"
