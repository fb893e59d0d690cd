#!/usr/bin/env bash
# Installs the Debian 12 packages jitembed's build, tests, tools and benchmarks need; idempotent: only
# what is missing is installed (apt-get update runs only then). Later components add their packages here.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build
  # core
  libxxhash-dev libdlpack-dev
  # codecs
  libzstd-dev libturbojpeg0-dev libavformat-dev libavcodec-dev libavutil-dev libswscale-dev
  # cache stores (redis-server also brings redis-benchmark, for tests and bench_cache)
  liblmdb-dev libhiredis-dev redis-server lmdb-utils
  # embedding service: HTTP on Boost.Beast (Debian's default Boost 1.74: libboost1.81-dev conflicts with
  # libmsgpack-dev's libboost-dev dependency, and msgpack-c is bench_format's baseline), LibTorch adapter
  libboost-dev libtorch-dev
  # parallelism: Gloo collectives on CPU, CBLAS GEMMs (OpenBLAS)
  libgloo-dev libopenblas-dev
  # programs, tests, benchmarks
  nlohmann-json3-dev libcli11-dev doctest-dev libbenchmark-dev
  libmsgpack-dev libprotobuf-dev protobuf-compiler
  ffmpeg tar
  # protocol peers for tests (tritonclient, pytest and perf_analyzer in .venv; perf_analyzer needs libb64)
  python3-venv libb64-0d
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python protocol peers (tritonclient + numpy) in .venv for the python-labelled tests. Installed only when
# not importable; no network must not fail the script (those tests then skip with a message).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || echo "install-deps: warning: could not create $venv"
fi
pip_install() {
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 "$@"
}
if [ -x "$venv/bin/python" ]; then
  if "$venv/bin/python" -c "import tritonclient.http, numpy, pytest" 2>/dev/null; then
    echo "install-deps: .venv has tritonclient, numpy and pytest"
  elif pip_install "tritonclient[http]==2.73.0" numpy pytest==9.2.0; then
    echo "install-deps: installed tritonclient[http], numpy and pytest into .venv"
  else
    echo "install-deps: warning: could not install tritonclient into .venv (no network?); python tests will skip"
  fi
  # perf_analyzer: PyPI's perf-analyzer wheels need glibc 2.38 (Debian 12 has 2.36); the binary bundled in
  # tritonclient 2.47.0 runs here. It links libcudart.so.12 even without a GPU (nvidia-cuda-runtime-cu12).
  if [ -x "$venv/perf_analyzer/bin/perf_analyzer" ] && "$venv/bin/python" -c "import nvidia.cuda_runtime" 2>/dev/null; then
    echo "install-deps: .venv has perf_analyzer"
  elif pip_install nvidia-cuda-runtime-cu12==12.9.79 &&
       pip_install --no-deps --target "$venv/perf_analyzer" tritonclient==2.47.0; then
    echo "install-deps: installed perf_analyzer (tritonclient 2.47.0) into .venv/perf_analyzer"
  else
    echo "install-deps: warning: could not install perf_analyzer; its test will skip"
  fi
fi
